// A tokenized corpus on disk, as nanoGPT and others keep one: the token ids
// of the whole text, flat, little-endian, uint16 when the vocabulary has at
// most 65,536 ids and uint32 otherwise, with no header. `tandem tokenize`
// writes such files; a run reads the windows it samples from one
// (examples/data/corpus.h) with pread, never the whole file: each window's
// ids are checked as they are read, and a file truncated under a running
// job is an error naming it, not a SIGBUS as a mapping would give.
#ifndef TANDEM_EXAMPLES_DATA_TOKEN_FILE_H_
#define TANDEM_EXAMPLES_DATA_TOKEN_FILE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "examples/data/corpus.h"
#include "examples/data/tokenizer.h"

namespace tandem::examples {

class TokenFile : public Corpus {
 public:
  // The fewest ids a file may hold: enough for windows in both splits.
  static constexpr int64_t kMinTokens = 1024;
  // Ids Open checks; the rest are checked as windows are read.
  static constexpr int64_t kCheckedAtOpen = int64_t{1} << 20;

  // Bytes per id for a vocabulary of `vocab_size` ids: 2 or 4.
  static int TokenBytes(int64_t vocab_size);

  // Opens the file at `path`, of ids of `tokenizer`. InvalidArgument naming
  // the file for one that is not a regular file, a size that is no whole
  // number of ids, fewer than kMinTokens ids, or an id past the tokenizer's
  // vocabulary among its first kCheckedAtOpen (naming its position: a file
  // of another tokenizer is found at once); NotFound or Unavailable when it
  // cannot be read.
  static absl::StatusOr<std::unique_ptr<TokenFile>> Open(const std::string& path, Tokenizer tokenizer);
  ~TokenFile() override;
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  int64_t vocab_size() const override { return tokenizer_.vocab_size(); }
  int64_t size() const override { return tokens_; }
  std::string description() const override;
  // One pread; InvalidArgument for an id past the vocabulary, DataLoss for
  // a file shorter than it was at Open.
  absl::Status Read(int64_t start, int64_t count, int32_t* ids) const override;
  absl::StatusOr<std::vector<int32_t>> Encode(absl::string_view text) const override {
    return tokenizer_.Encode(text);
  }
  absl::StatusOr<std::string> Decode(const std::vector<int32_t>& ids) const override { return tokenizer_.Decode(ids); }

 private:
  TokenFile(std::string path, Tokenizer tokenizer, int fd, size_t bytes, int width)
      : path_(std::move(path)), tokenizer_(std::move(tokenizer)), fd_(fd), bytes_(bytes), width_(width),
        tokens_(static_cast<int64_t>(bytes / width)) {}

  std::string path_;
  Tokenizer tokenizer_;
  int fd_;  // owned
  size_t bytes_;
  int width_;
  int64_t tokens_;
};

}  // namespace tandem::examples

#endif  // TANDEM_EXAMPLES_DATA_TOKEN_FILE_H_
