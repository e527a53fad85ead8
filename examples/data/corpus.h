// A language model's corpus: a sequence of token ids below a vocabulary
// size, split into a train part (the first 90%) and a validation part (the
// rest), and deterministic batches of windows drawn from either. A
// character-level text (char_corpus.h) and a file of token ids
// (token_file.h) are corpora.
#ifndef TANDEM_EXAMPLES_DATA_CORPUS_H_
#define TANDEM_EXAMPLES_DATA_CORPUS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ir/initial_state.h"

namespace tandem::examples {

class Corpus {
 public:
  enum class Split { kTrain, kValidation };

  virtual ~Corpus() = default;
  // Ids are below it: the LM head's width at least.
  virtual int64_t vocab_size() const = 0;
  // Tokens in all.
  virtual int64_t size() const = 0;
  // "<path> (N bytes)", "<path> (N tokens of M.model)": where it comes from.
  virtual std::string description() const = 0;
  // Tokens [start, start + count) into `ids`, within [0, size()).
  // InvalidArgument naming the position for an id outside the vocabulary;
  // DataLoss when the tokens cannot be read (a file that shrank while the
  // run reads it).
  virtual absl::Status Read(int64_t start, int64_t count, int32_t* ids) const = 0;
  // Text to ids and back, as the corpus was made (a prompt, a generation).
  // InvalidArgument for text the vocabulary cannot express, or an id
  // outside it.
  virtual absl::StatusOr<std::vector<int32_t>> Encode(absl::string_view text) const = 0;
  virtual absl::StatusOr<std::string> Decode(const std::vector<int32_t>& ids) const = 0;

  // "tokens" and "labels" (the next token of each position), i32
  // [batch, sequence_length], from windows of the split whose starts are
  // drawn from (seed, index) by the seeded generator: the same arguments
  // give the same batch. Read's errors, with the window that met them.
  absl::StatusOr<ir::TensorMap> Batch(Split split, int64_t batch, int64_t sequence_length, uint64_t seed,
                                      uint64_t index) const;
  // The same of the consecutive windows first, first + 1, ..., first +
  // batch - 1 of the whole corpus, in order: window w is tokens
  // [w * sequence_length, (w + 1) * sequence_length) and their labels the
  // token after each, so another tool computes its loss over exactly the
  // same tokens (`tandem eval`). OutOfRange, saying how many windows the
  // corpus holds, when it ends before the last window's last label; Read's
  // errors, with the window that met them.
  absl::StatusOr<ir::TensorMap> Windows(int64_t first, int64_t batch, int64_t sequence_length) const;

 protected:
  // The batch of the windows that begin at `starts`, each sequence_length + 1
  // tokens (past the end, the last token repeats).
  absl::StatusOr<ir::TensorMap> WindowsAt(const std::vector<int64_t>& starts, int64_t sequence_length) const;
  // Where the validation part begins: 90% of `size`.
  static int64_t SplitPoint(int64_t size) { return size * 9 / 10; }
};

// The files a corpus reads at `path` (--data, --input): the regular files
// of a directory in name order, or `path` itself when it is a file.
// NotFound when there is neither.
absl::StatusOr<std::vector<std::string>> TextFiles(const std::string& path);

}  // namespace tandem::examples

#endif  // TANDEM_EXAMPLES_DATA_CORPUS_H_
