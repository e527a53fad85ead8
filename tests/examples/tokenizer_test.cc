// Issue 35's acceptance 3, below the CLI: a BPE tokenizer trained on the
// licence texts encodes and decodes any text back exactly; a token file
// holds the ids of its text, little-endian, as wide as the vocabulary
// needs; and a file that is not one is refused naming where.
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "examples/data/sentencepiece_bridge.h"
#include "examples/data/token_file.h"
#include "examples/data/tokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/temporary_directory.h"

namespace tandem::examples {
namespace {

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
  std::vector<int32_t> ids;
  for (int64_t i = 0; i < (*file)->size(); ++i) ids.push_back((*file)->Token(i));
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
  std::vector<int32_t> ids;
  for (int64_t i = 0; i < (*file)->size(); ++i) ids.push_back((*file)->Token(i));
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

}  // namespace
}  // namespace tandem::examples
