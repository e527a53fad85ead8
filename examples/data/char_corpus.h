// A character-level text corpus for training the example language models:
// bytes of one or more text files, a vocabulary of the distinct bytes
// (examples/data/corpus.h: the splits and batches).
#ifndef TANDEM_EXAMPLES_DATA_CHAR_CORPUS_H_
#define TANDEM_EXAMPLES_DATA_CHAR_CORPUS_H_

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "examples/data/corpus.h"

namespace tandem::examples {

class CharCorpus : public Corpus {
 public:
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

  int64_t vocab_size() const override { return static_cast<int64_t>(alphabet_.size()); }
  int64_t size() const override { return static_cast<int64_t>(ids_.size()); }
  std::string description() const override;
  absl::Status Read(int64_t start, int64_t count, int32_t* ids) const override {
    std::copy_n(ids_.begin() + start, count, ids);
    return absl::OkStatus();
  }
  // Each byte is its id; a byte the corpus never has cannot be encoded.
  absl::StatusOr<std::vector<int32_t>> Encode(absl::string_view text) const override;
  absl::StatusOr<std::string> Decode(const std::vector<int32_t>& ids) const override;
  const std::string& source() const { return source_; }

 private:
  std::string source_;
  std::string alphabet_;       // the distinct bytes, sorted
  std::vector<int32_t> ids_;   // the text as indices into alphabet_
};

}  // namespace tandem::examples

#endif  // TANDEM_EXAMPLES_DATA_CHAR_CORPUS_H_
