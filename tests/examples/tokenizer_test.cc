// Issue 35's acceptance 3, below the CLI: a BPE tokenizer trained on the
// licence texts encodes and decodes any text back exactly; a token file
// holds the ids of its text, little-endian, as wide as the vocabulary
// needs; and a file that is not one is refused naming where.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "examples/data/sentencepiece_bridge.h"
#include "examples/data/sentencepiece_model_check.h"
#include "examples/data/token_file.h"
#include "examples/data/tokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/temporary_directory.h"

namespace tandem::examples {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr char kLicences[] = "/usr/share/common-licenses";

class TokenizerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    directory_ = new test::TemporaryDirectory("tandem-tokenizer-test");
    model_ = directory_->Path("licences.model");
    absl::StatusOr<std::vector<std::string>> files = TextFiles(kLicences);
    ASSERT_TRUE(files.ok()) << files.status();
    ASSERT_TRUE(Tokenizer::Train(*files, 400, model_).ok());
  }
  static void TearDownTestSuite() { delete directory_; }

  static test::TemporaryDirectory* directory_;
  static std::string model_;
};
test::TemporaryDirectory* TokenizerTest::directory_ = nullptr;
std::string TokenizerTest::model_;

TEST_F(TokenizerTest, DecodingAnEncodingGivesTheTextBackExactly) {
  absl::StatusOr<Tokenizer> tokenizer = Tokenizer::Load(model_);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_EQ(tokenizer->vocab_size(), 400);
  for (const std::string& text : {std::string("This program is free software; you can redistribute it.\n"),
                                 std::string("  two  spaces,\ttabs\n\nand blank lines  \n"),
                                 std::string("Unicode: \xc3\xa9t\xc3\xa9, \xe6\x97\xa5\xe6\x9c\xac, \xf0\x9f\x99\x82 1234567"),
                                 std::string("")}) {
    absl::StatusOr<std::vector<int32_t>> ids = tokenizer->Encode(text);
    ASSERT_TRUE(ids.ok()) << ids.status();
    absl::StatusOr<std::string> back = tokenizer->Decode(*ids);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, text);
  }
  absl::StatusOr<std::vector<int32_t>> common = tokenizer->Encode("the License");
  ASSERT_TRUE(common.ok());
  EXPECT_LT(common->size(), 11u) << "BPE merged some of the licences' common words";
  EXPECT_THAT(tokenizer->Decode({400}).status().message(), HasSubstr("id 400 is not a piece of"));
}

TEST_F(TokenizerTest, ATokenFileHoldsTheTextsIdsAsNarrowAsTheVocabularyAllows) {
  absl::StatusOr<Tokenizer> tokenizer = Tokenizer::Load(model_);
  ASSERT_TRUE(tokenizer.ok());
  const std::string text_path = directory_->Path("text.txt");
  std::string text;
  for (int i = 0; i < 300; ++i) text += "Everyone is permitted to copy and distribute verbatim copies.\n";
  std::ofstream(text_path) << text;
  const std::string tokens_path = directory_->Path("tokens.bin");
  absl::StatusOr<TokenizedText> counts = TokenizeText(*tokenizer, text_path, tokens_path);
  ASSERT_TRUE(counts.ok()) << counts.status();
  EXPECT_EQ(counts->bytes, static_cast<int64_t>(text.size()));
  EXPECT_EQ(static_cast<int64_t>(std::filesystem::file_size(tokens_path)), 2 * counts->tokens) << "uint16";
  absl::StatusOr<std::unique_ptr<TokenFile>> file = TokenFile::Open(tokens_path, *tokenizer);
  ASSERT_TRUE(file.ok()) << file.status();
  std::vector<int32_t> ids(static_cast<size_t>((*file)->size()));
  ASSERT_TRUE((*file)->Read(0, (*file)->size(), ids.data()).ok());
  EXPECT_EQ(*tokenizer->Decode(ids), text);
  EXPECT_EQ(TokenFile::TokenBytes(65536), 2);
  EXPECT_EQ(TokenFile::TokenBytes(65537), 4);
}

// A line longer than the pieces the text is encoded in (1 MiB) is cut
// between characters, never inside one, and still decodes back exactly.
TEST_F(TokenizerTest, ALineLongerThanAPieceIsCutBetweenCharacters) {
  absl::StatusOr<Tokenizer> tokenizer = Tokenizer::Load(model_);
  ASSERT_TRUE(tokenizer.ok());
  std::string line;
  while (line.size() < (size_t{5} << 19)) line += "copies \xc3\xa9t\xc3\xa9 \xe6\x97\xa5 ";  // 2.5 MiB, no line break
  const std::string text_path = directory_->Path("long-line.txt");
  std::ofstream(text_path, std::ios::binary) << line;
  const std::string tokens_path = directory_->Path("long-line.bin");
  absl::StatusOr<TokenizedText> counts = TokenizeText(*tokenizer, text_path, tokens_path);
  ASSERT_TRUE(counts.ok()) << counts.status();
  EXPECT_EQ(counts->bytes, static_cast<int64_t>(line.size()));
  absl::StatusOr<std::unique_ptr<TokenFile>> file = TokenFile::Open(tokens_path, *tokenizer);
  ASSERT_TRUE(file.ok()) << file.status();
  std::vector<int32_t> ids(static_cast<size_t>((*file)->size()));
  ASSERT_TRUE((*file)->Read(0, (*file)->size(), ids.data()).ok());
  absl::StatusOr<std::string> back = tokenizer->Decode(ids);
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(*back == line) << "the decoded text differs from the line";
}

// A SentencePiece model with the library's default dummy prefix would put
// a space at the start of every piece of a corpus encoded in pieces.
TEST_F(TokenizerTest, AModelWithADummyPrefixIsRefusedForTokenFiles) {
  const std::string prefix = directory_->Path("default");
  ASSERT_EQ(spm::Train(absl::StrCat("--input=", kLicences, "/GPL-3 --model_prefix=", prefix,
                                    " --vocab_size=300 --model_type=bpe --minloglevel=2")),
            "");
  absl::StatusOr<Tokenizer> tokenizer = Tokenizer::Load(prefix + ".model");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_THAT(TokenizeText(*tokenizer, absl::StrCat(kLicences, "/GPL-3"), directory_->Path("default.bin")).status().message(),
              HasSubstr("adds a prefix to every text it encodes"));
}

TEST_F(TokenizerTest, AFileThatIsNotTheTokenizersIsRefusedNamingWhere) {
  absl::StatusOr<Tokenizer> tokenizer = Tokenizer::Load(model_);
  ASSERT_TRUE(tokenizer.ok());
  const std::string odd = directory_->Path("odd.bin");
  std::ofstream(odd, std::ios::binary) << std::string(2 * TokenFile::kMinTokens + 1, '\0');
  EXPECT_THAT(TokenFile::Open(odd, *tokenizer).status().message(), HasSubstr("is not a file of at least"));
  const std::string foreign = directory_->Path("foreign.bin");
  std::string ids(2 * TokenFile::kMinTokens, '\0');
  ids[2 * 700] = '\x34';
  ids[2 * 700 + 1] = '\x12';  // id 0x1234 = 4660, past 400
  std::ofstream(foreign, std::ios::binary) << ids;
  EXPECT_THAT(TokenFile::Open(foreign, *tokenizer).status().message(), HasSubstr("token 700 is 4660, not below the 400"));
  EXPECT_EQ(TokenFile::Open(directory_->Path("missing.bin"), *tokenizer).status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(Tokenizer::Load(directory_->Path("missing.model")).status().message(),
              HasSubstr("cannot load the SentencePiece model"));
  EXPECT_THAT(Tokenizer::Train({kLicences}, 100, directory_->Path("small.model")).message(),
              HasSubstr("a vocabulary of 100 pieces is outside"));
  EXPECT_THAT(Tokenizer::Train({kLicences}, 400, directory_->Path("no-suffix")).message(), HasSubstr("must end in .model"));
}

// Issue 41, finding 8: a token file is never read whole. Open checks its
// first ids; the rest are checked as windows are read, and a file
// truncated under a run is an error naming it, not a SIGBUS.
TEST_F(TokenizerTest, ATokenFileIsReadByWindowsAndATruncationIsAnErrorNotASignal) {
  absl::StatusOr<Tokenizer> tokenizer = Tokenizer::Load(model_);
  ASSERT_TRUE(tokenizer.ok());
  const std::string path = directory_->Path("windows.bin");
  const int64_t tokens = TokenFile::kCheckedAtOpen + 4096;
  std::string ids(static_cast<size_t>(2 * tokens), '\0');
  ids[static_cast<size_t>(2 * (tokens - 10))] = '\x34';
  ids[static_cast<size_t>(2 * (tokens - 10) + 1)] = '\x12';  // id 4660, past the checked prefix
  std::ofstream(path, std::ios::binary) << ids;
  absl::StatusOr<std::unique_ptr<TokenFile>> file = TokenFile::Open(path, *tokenizer);
  ASSERT_TRUE(file.ok()) << file.status();
  std::vector<int32_t> window(64);
  EXPECT_TRUE((*file)->Read(0, 64, window.data()).ok());
  EXPECT_THAT((*file)->Read(tokens - 64, 64, window.data()).message(),
              HasSubstr(absl::StrCat("token ", tokens - 10, " is 4660, not below the 400")));
  ASSERT_EQ(truncate(path.c_str(), 2 * 2048), 0);
  const absl::Status truncated = (*file)->Read(4000, 64, window.data());
  EXPECT_EQ(truncated.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(truncated.message(), AllOf(HasSubstr(path), HasSubstr("ends before token 4000"), HasSubstr("truncated")));
}

// Protobuf's wire format: a length-delimited field.
std::string Field(int number, const std::string& bytes) {
  std::string out(1, static_cast<char>(number << 3 | 2));
  for (uint64_t length = bytes.size();; length >>= 7) {
    out.push_back(static_cast<char>((length & 0x7F) | (length > 0x7F ? 0x80 : 0)));
    if (length <= 0x7F) break;
  }
  return out + bytes;
}

// A charsmap of `units` trie units (given, little-endian) and `strings`.
std::string Charsmap(const std::vector<uint32_t>& units, const std::string& strings) {
  std::string out;
  auto put = [&](uint32_t word) {
    for (int b = 0; b < 4; ++b) out.push_back(static_cast<char>(word >> (8 * b)));
  };
  put(static_cast<uint32_t>(4 * units.size()));
  for (uint32_t unit : units) put(unit);
  return out + strings;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The library follows a normaliser's trie wherever its units point: the
// check must pass a real one and refuse one that points outside itself.
TEST_F(TokenizerTest, ANormalisingModelPassesTheCheckAndNormalises) {
  const std::string prefix = directory_->Path("nfkc");
  ASSERT_EQ(spm::Train(absl::StrCat("--input=", kLicences, "/GPL-3 --model_prefix=", prefix,
                                    " --vocab_size=300 --model_type=unigram --normalization_rule_name=nmt_nfkc"
                                    " --add_dummy_prefix=false --minloglevel=2")),
            "");
  EXPECT_TRUE(CheckSentencePieceModel(ReadAll(prefix + ".model"), "nfkc.model").ok());
  absl::StatusOr<Tokenizer> tokenizer = Tokenizer::Load(prefix + ".model");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  // NFKC: full-width letters become ASCII ones.
  absl::StatusOr<std::vector<int32_t>> ids = tokenizer->Encode("\xef\xbd\x86\xef\xbd\x92\xef\xbd\x85\xef\xbd\x85");
  ASSERT_TRUE(ids.ok()) << ids.status();
  absl::StatusOr<std::string> text = tokenizer->Decode(*ids);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "free");
}

TEST_F(TokenizerTest, AForgedNormaliserTableIsRefusedBeforeTheLibraryReadsIt) {
  // A spec appended to a good model merges into it (protobuf), and its
  // charsmap replaces the model's.
  const std::string good = ReadAll(model_);
  auto forged = [&](const std::string& charsmap) {
    const std::string path = directory_->Path("forged.model");
    std::ofstream(path, std::ios::binary) << good + Field(3, Field(2, charsmap));
    return Tokenizer::Load(path).status();
  };
  // Unit 0's offset sends the search to unit 2^20, far past a trie of 256.
  std::vector<uint32_t> units(256, 0);
  units[0] = (1u << 20) << 10;
  absl::Status status = forged(Charsmap(units, std::string("a\0", 2)));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), AllOf(HasSubstr("forged.model"), HasSubstr("points outside its trie of 256 units")));
  // A trie bigger than the table that holds it.
  std::string short_table = Charsmap(units, "");
  short_table.resize(100);
  EXPECT_THAT(forged(short_table).message(), HasSubstr("which is not a whole number of units within its 96"));
  // A leaf whose replacement lies past the strings: byte 'a' at unit 'a'
  // (base 0), with a leaf; its value unit at 'a' ^ 0 = 'a'... value 1000.
  units.assign(256, 0);
  units['a'] = 'a' | (1u << 8) | (0u << 10);
  EXPECT_THAT(forged(Charsmap(units, std::string("x\0", 2))).message(), HasSubstr("names replacement"));
  // Random bytes, the probe's case.
  std::string random(4096, '\0');
  uint32_t state = 12345;
  for (char& c : random) {
    state = state * 1103515245u + 12345u;
    c = static_cast<char>(state >> 16);
  }
  random[0] = 0;
  random[1] = 8;  // a trie of 2048 bytes
  random[2] = random[3] = 0;
  EXPECT_EQ(forged(random).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(TokenizerTest, ATokenizerThatIsNoRegularFileOrTooLargeIsRefusedWithoutReadingIt) {
  EXPECT_THAT(Tokenizer::Load("/dev/zero").status().message(),
              HasSubstr("/dev/zero is a character device, not a regular file"));
  const std::string fifo = directory_->Path("model.fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_THAT(Tokenizer::Load(fifo).status().message(), HasSubstr("is a FIFO, not a regular file"));
  const std::string sparse = directory_->Path("sparse.model");
  std::ofstream(sparse).close();
  ASSERT_EQ(truncate(sparse.c_str(), kMaxTokenizerModelBytes + 1), 0);
  EXPECT_THAT(Tokenizer::Load(sparse).status().message(),
              HasSubstr(absl::StrCat("has ", kMaxTokenizerModelBytes + 1, " bytes, more than the")));
}

}  // namespace
}  // namespace tandem::examples
