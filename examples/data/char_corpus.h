// A character-level text corpus for training the example GPT: bytes of one
// or more text files, a vocabulary of the distinct bytes, and deterministic
// batches of windows from a train or a validation split.
#ifndef TANDEM_EXAMPLES_DATA_CHAR_CORPUS_H_
#define TANDEM_EXAMPLES_DATA_CHAR_CORPUS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ir/interpreter.h"

namespace tandem::examples {

class CharCorpus {
 public:
  enum class Split { kTrain, kValidation };

  // The bytes of `text`; the first 90% are the train split, the rest
  // validation. InvalidArgument naming `source` and the byte offset when the
  // text is not UTF-8 text (a NUL byte or a malformed sequence: a binary
  // file), or when there is too little of it.
  static absl::StatusOr<CharCorpus> FromText(std::string text, std::string source);
  // `path` is a file, or a directory whose regular files are read in name
  // order; each must be UTF-8 text (the error names the file and offset),
  // and all together at most kMaxCorpusBytes (examples/limits.h).
  static absl::StatusOr<CharCorpus> Load(const std::string& path);
  // The corpus `tandem train` uses: `data_path` if given (an error if it
  // cannot be read), else the licence texts under /usr/share/common-licenses
  // that every Debian machine has, else a generated text.
  static absl::StatusOr<CharCorpus> LoadDefault(const std::optional<std::string>& data_path);

  int64_t vocab_size() const { return static_cast<int64_t>(alphabet_.size()); }
  int64_t size() const { return static_cast<int64_t>(ids_.size()); }
  const std::string& source() const { return source_; }

  // "tokens" and "labels" (the next byte of each position), i32
  // [batch, sequence_length], from windows whose starts are drawn from
  // (seed, index): the same arguments give the same batch.
  ir::TensorMap Batch(Split split, int64_t batch, int64_t sequence_length, uint64_t seed, uint64_t index) const;

 private:
  std::string source_;
  std::string alphabet_;       // the distinct bytes, sorted
  std::vector<int32_t> ids_;   // the text as indices into alphabet_
  int64_t split_point_ = 0;
};

}  // namespace tandem::examples

#endif  // TANDEM_EXAMPLES_DATA_CHAR_CORPUS_H_
