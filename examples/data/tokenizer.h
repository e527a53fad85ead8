// A subword tokenizer: a SentencePiece model (Kudo & Richardson, 2018; the
// library Debian ships), trained here as BPE on a corpus by `tandem
// tokenize --train`, or any .model file SentencePiece wrote. The models
// Tandem trains keep the text exactly (no normalization, whitespace as it
// is, bytes of unknown characters as byte pieces), so decoding an encoding
// gives the text back.
#ifndef TANDEM_EXAMPLES_DATA_TOKENIZER_H_
#define TANDEM_EXAMPLES_DATA_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tandem::examples::spm {
class Model;
}  // namespace tandem::examples::spm

namespace tandem::examples {

class Tokenizer {
 public:
  // The SentencePiece model at `path`. InvalidArgument naming it when it
  // cannot be loaded.
  static absl::StatusOr<Tokenizer> Load(const std::string& path);

  // Trains a BPE model of `vocab_size` pieces on the text files `inputs`
  // (UTF-8) and writes it to `model_path`, which must end in ".model" (its
  // .vocab goes beside it). InvalidArgument for a vocabulary outside
  // [kMinVocab, kMaxVocab] or larger than the text supports.
  static absl::Status Train(const std::vector<std::string>& inputs, int64_t vocab_size, const std::string& model_path);
  static constexpr int64_t kMinVocab = 260;  // the 256 byte pieces and the special ones, and some to learn

  int64_t vocab_size() const;
  const std::string& path() const { return path_; }
  absl::StatusOr<std::vector<int32_t>> Encode(absl::string_view text) const;
  absl::StatusOr<std::string> Decode(const std::vector<int32_t>& ids) const;

 private:
  Tokenizer(std::string path, std::shared_ptr<const spm::Model> model)
      : path_(std::move(path)), model_(std::move(model)) {}

  std::string path_;
  std::shared_ptr<const spm::Model> model_;  // immutable once loaded
};

struct TokenizedText {
  int64_t bytes = 0;   // of text read
  int64_t tokens = 0;  // ids written
};

// Encodes the text at `input` (a file, or a directory's regular files in
// name order, as `--data` reads them) into the token file `output`
// (examples/data/token_file.h), a piece of about 1 MiB at a time, ending at
// a line break (or, in a longer line, between characters) so that neither
// the text nor its ids are ever held whole; written atomically.
// InvalidArgument for a model whose pieces would not join (one with a
// dummy prefix).
absl::StatusOr<TokenizedText> TokenizeText(const Tokenizer& tokenizer, const std::string& input,
                                           const std::string& output);

}  // namespace tandem::examples

#endif  // TANDEM_EXAMPLES_DATA_TOKENIZER_H_
