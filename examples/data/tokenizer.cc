#include "examples/data/tokenizer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "examples/data/corpus.h"
#include "examples/data/sentencepiece_bridge.h"
#include "examples/data/sentencepiece_model_check.h"
#include "examples/data/token_file.h"
#include "examples/limits.h"
#include "ir/errno_status.h"
#include "ir/read_file.h"
#include "ir/state_file.h"

namespace tandem::examples {
namespace {

// Text is encoded a piece of whole lines at a time, about this long.
constexpr size_t kPieceBytes = size_t{1} << 20;

}  // namespace

absl::StatusOr<Tokenizer> Tokenizer::Load(const std::string& path) {
  // A model is read whole, within a bound, and checked before the library
  // sees it: it trusts the tables inside.
  absl::StatusOr<std::string> bytes = ir::ReadFileUpTo(path, kMaxTokenizerModelBytes, path);
  if (!bytes.ok()) {
    return absl::Status(bytes.status().code(),
                        absl::StrCat("cannot load the SentencePiece model ", path, ": ", bytes.status().message()));
  }
  if (absl::Status checked = CheckSentencePieceModel(*bytes, path); !checked.ok()) return checked;
  std::shared_ptr<const spm::Model> model;
  if (const std::string error = spm::LoadSerialized(*bytes, &model); !error.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("cannot load the SentencePiece model ", path, ": ", error));
  }
  return Tokenizer(path, std::move(model));
}

absl::Status Tokenizer::Train(const std::vector<std::string>& inputs, int64_t vocab_size,
                              const std::string& model_path) {
  if (vocab_size < kMinVocab || vocab_size > kMaxVocab) {
    return absl::InvalidArgumentError(
        absl::StrCat("a vocabulary of ", vocab_size, " pieces is outside [", kMinVocab, ", ", kMaxVocab, "]"));
  }
  constexpr absl::string_view kSuffix = ".model";
  if (model_path.size() <= kSuffix.size() || !absl::EndsWith(model_path, kSuffix)) {
    return absl::InvalidArgumentError(absl::StrCat("the model path '", model_path, "' must end in .model"));
  }
  const std::string prefix = model_path.substr(0, model_path.size() - kSuffix.size());
  // Exact round trips: no normalization, whitespace kept as it is, and any
  // character outside the pieces as its UTF-8 bytes.
  const std::string args = absl::StrCat(
      "--input=", absl::StrJoin(inputs, ","), " --model_prefix=", prefix, " --vocab_size=", vocab_size,
      " --model_type=bpe --character_coverage=1.0 --byte_fallback=true --normalization_rule_name=identity"
      " --remove_extra_whitespaces=false --add_dummy_prefix=false --split_digits=true --max_sentence_length=65536"
      " --minloglevel=2");
  if (const std::string error = spm::Train(args); !error.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("training a tokenizer of ", vocab_size, " pieces on ", absl::StrJoin(inputs, ", "), ": ", error));
  }
  return absl::OkStatus();
}

int64_t Tokenizer::vocab_size() const { return spm::PieceCount(*model_); }

absl::StatusOr<std::vector<int32_t>> Tokenizer::Encode(absl::string_view text) const {
  std::vector<int> ids;
  if (const std::string error = spm::Encode(*model_, std::string_view(text.data(), text.size()), &ids); !error.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": cannot encode: ", error));
  }
  return std::vector<int32_t>(ids.begin(), ids.end());
}

absl::StatusOr<std::string> Tokenizer::Decode(const std::vector<int32_t>& ids) const {
  std::string text;
  const std::vector<int> pieces(ids.begin(), ids.end());
  for (int id : pieces) {
    if (id < 0 || id >= spm::PieceCount(*model_)) {
      return absl::InvalidArgumentError(absl::StrCat("id ", id, " is not a piece of ", path_));
    }
  }
  if (const std::string error = spm::Decode(*model_, pieces, &text); !error.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": cannot decode: ", error));
  }
  return text;
}

absl::StatusOr<TokenizedText> TokenizeText(const Tokenizer& tokenizer, const std::string& input,
                                           const std::string& output) {
  absl::StatusOr<std::vector<std::string>> files = TextFiles(input);
  if (!files.ok()) return files.status();
  // Pieces encoded apart must decode to the pieces joined: a model that
  // adds a space before every text it encodes (SentencePiece's default
  // dummy prefix) would put one at every piece's start.
  absl::StatusOr<std::vector<int32_t>> a = tokenizer.Encode("a");
  absl::StatusOr<std::vector<int32_t>> b = tokenizer.Encode("b");
  if (!a.ok()) return a.status();
  if (!b.ok()) return b.status();
  a->insert(a->end(), b->begin(), b->end());
  if (absl::StatusOr<std::string> joined = tokenizer.Decode(*a); !joined.ok() || *joined != "ab") {
    return absl::InvalidArgumentError(absl::StrCat(
        tokenizer.path(), " adds a prefix to every text it encodes (SentencePiece's dummy prefix), so a corpus "
        "encoded a piece at a time would gain a space at each piece: use a model trained by `tandem tokenize "
        "--train`, which adds none"));
  }
  absl::StatusOr<std::unique_ptr<ir::AtomicFileWriter>> writer = ir::AtomicFileWriter::Create(output);
  if (!writer.ok()) return writer.status();
  const int width = TokenFile::TokenBytes(tokenizer.vocab_size());
  TokenizedText counts;
  std::string bytes;
  auto encode = [&](absl::string_view piece) -> absl::Status {
    if (piece.empty()) return absl::OkStatus();
    absl::StatusOr<std::vector<int32_t>> ids = tokenizer.Encode(piece);
    if (!ids.ok()) return ids.status();
    bytes.clear();
    for (int32_t id : *ids) {
      for (int b = 0; b < width; ++b) bytes.push_back(static_cast<char>((static_cast<uint32_t>(id) >> (8 * b)) & 0xff));
    }
    counts.bytes += static_cast<int64_t>(piece.size());
    counts.tokens += static_cast<int64_t>(ids->size());
    return (*writer)->Append(bytes);
  };
  // Read kPieceBytes at a time and encode up to the last line break, so
  // pieces end where lines do; a piece with none (one very long line) ends
  // before its last incomplete UTF-8 character instead.
  std::string buffer;
  for (const std::string& file : *files) {
    const int fd = open(file.c_str(), ir::kOpenForReading);
    if (fd < 0) return ir::ErrnoStatus(absl::StatusCode::kUnavailable, absl::StrCat("cannot read ", file));
    const absl::Cleanup closer = [fd] { close(fd); };
    if (absl::Status regular = ir::RequireRegularFile(fd, file); !regular.ok()) return regular;
    for (bool more = true; more;) {
      const size_t kept = buffer.size();
      buffer.resize(kept + kPieceBytes);
      size_t got = 0;
      while (got < kPieceBytes) {
        const ssize_t read_now = read(fd, buffer.data() + kept + got, kPieceBytes - got);
        if (read_now < 0 && errno == EINTR) continue;
        if (read_now < 0) return ir::ErrnoStatus(absl::StatusCode::kUnavailable, absl::StrCat("cannot read ", file));
        if (read_now == 0) {
          more = false;
          break;
        }
        got += static_cast<size_t>(read_now);
      }
      buffer.resize(kept + got);
      size_t cut = buffer.rfind('\n');
      if (cut != std::string::npos) {
        ++cut;
      } else if (buffer.size() >= kPieceBytes) {
        cut = buffer.size();
        while (cut > 0 && (static_cast<unsigned char>(buffer[cut - 1]) & 0xC0) == 0x80) --cut;  // continuation bytes
        if (cut > 0 && static_cast<unsigned char>(buffer[cut - 1]) >= 0xC0) --cut;              // their lead byte
        if (cut == 0) cut = buffer.size();  // not UTF-8 at all: SentencePiece takes the bytes as they are
      } else {
        continue;  // less than a piece and no line break yet: read on
      }
      if (absl::Status status = encode(absl::string_view(buffer).substr(0, cut)); !status.ok()) return status;
      buffer.erase(0, cut);
    }
  }
  if (absl::Status status = encode(buffer); !status.ok()) return status;
  absl::StatusOr<ir::WrittenFile> written = (*writer)->Commit();
  if (!written.ok()) return written.status();
  return counts;
}

}  // namespace tandem::examples
