// A tokenized corpus on disk, as nanoGPT and others keep one: the token ids
// of the whole text, flat, little-endian, uint16 when the vocabulary has at
// most 65,536 ids and uint32 otherwise, with no header. `tandem tokenize`
// writes such files; a run maps one into memory and samples windows from it
// (examples/data/corpus.h), never reading it whole.
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

  // Bytes per id for a vocabulary of `vocab_size` ids: 2 or 4.
  static int TokenBytes(int64_t vocab_size);

  // Maps the file at `path`, of ids of `tokenizer`. InvalidArgument naming
  // the file for a size that is no whole number of ids, fewer than
  // kMinTokens ids, or an id past the tokenizer's vocabulary (naming its
  // position); NotFound or Unavailable when it cannot be read.
  static absl::StatusOr<std::unique_ptr<TokenFile>> Open(const std::string& path, Tokenizer tokenizer);
  ~TokenFile() override;
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  int64_t vocab_size() const override { return tokenizer_.vocab_size(); }
  int64_t size() const override { return tokens_; }
  std::string description() const override;
  // Open checked every id below vocab_size(), which fits an int32.
  int32_t Token(int64_t i) const override { return static_cast<int32_t>(Id(i)); }
  absl::StatusOr<std::vector<int32_t>> Encode(absl::string_view text) const override {
    return tokenizer_.Encode(text);
  }
  absl::StatusOr<std::string> Decode(const std::vector<int32_t>& ids) const override { return tokenizer_.Decode(ids); }

 private:
  uint32_t Id(int64_t i) const;  // little-endian, width_ bytes
  TokenFile(std::string path, Tokenizer tokenizer, const unsigned char* data, size_t bytes, int width)
      : path_(std::move(path)), tokenizer_(std::move(tokenizer)), data_(data), bytes_(bytes), width_(width),
        tokens_(static_cast<int64_t>(bytes / width)) {}

  std::string path_;
  Tokenizer tokenizer_;
  const unsigned char* data_;
  size_t bytes_;
  int width_;
  int64_t tokens_;
};

}  // namespace tandem::examples

#endif  // TANDEM_EXAMPLES_DATA_TOKEN_FILE_H_
