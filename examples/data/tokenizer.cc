#include "examples/data/tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "examples/data/token_file.h"
#include "examples/limits.h"
#include "ir/state_file.h"
#include "examples/data/sentencepiece_bridge.h"

namespace tandem::examples {
namespace {

// Text is encoded a piece of whole lines at a time, about this long.
constexpr size_t kPieceBytes = size_t{1} << 20;

}  // namespace

absl::StatusOr<std::vector<std::string>> TextFiles(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code error;
  if (fs::is_regular_file(path, error)) return std::vector<std::string>{path};
  if (!fs::is_directory(path, error)) return absl::NotFoundError(absl::StrCat("no text file or directory at ", path));
  std::vector<std::string> files;
  for (const fs::directory_entry& entry : fs::directory_iterator(path, error)) {
    if (entry.is_regular_file(error)) files.push_back(entry.path().string());
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) return absl::NotFoundError(absl::StrCat(path, " holds no regular file"));
  return files;
}

absl::StatusOr<Tokenizer> Tokenizer::Load(const std::string& path) {
  std::shared_ptr<const spm::Model> model;
  if (const std::string error = spm::Load(path, &model); !error.empty()) {
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
      " --remove_extra_whitespaces=false --split_digits=true --max_sentence_length=65536"
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
  absl::StatusOr<std::unique_ptr<ir::AtomicFileWriter>> writer = ir::AtomicFileWriter::Create(output);
  if (!writer.ok()) return writer.status();
  const int width = TokenFile::TokenBytes(tokenizer.vocab_size());
  TokenizedText counts;
  std::string piece, bytes;
  auto flush = [&]() -> absl::Status {
    if (piece.empty()) return absl::OkStatus();
    absl::StatusOr<std::vector<int32_t>> ids = tokenizer.Encode(piece);
    if (!ids.ok()) return ids.status();
    bytes.clear();
    for (int32_t id : *ids) {
      for (int b = 0; b < width; ++b) bytes.push_back(static_cast<char>((static_cast<uint32_t>(id) >> (8 * b)) & 0xff));
    }
    counts.bytes += static_cast<int64_t>(piece.size());
    counts.tokens += static_cast<int64_t>(ids->size());
    piece.clear();
    return (*writer)->Append(bytes);
  };
  for (const std::string& file : *files) {
    std::ifstream in(file, std::ios::binary);
    if (!in) return absl::UnavailableError(absl::StrCat("cannot read ", file));
    std::string line;
    while (std::getline(in, line)) {
      if (!in.eof()) line.push_back('\n');
      piece += line;
      if (piece.size() >= kPieceBytes) {
        if (absl::Status status = flush(); !status.ok()) return status;
      }
    }
    if (in.bad()) return absl::UnavailableError(absl::StrCat("cannot read ", file));
  }
  if (absl::Status status = flush(); !status.ok()) return status;
  absl::StatusOr<ir::WrittenFile> written = (*writer)->Commit();
  if (!written.ok()) return written.status();
  return counts;
}

}  // namespace tandem::examples
