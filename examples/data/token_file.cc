#include "examples/data/token_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "ir/errno_status.h"
#include "ir/read_file.h"

namespace tandem::examples {

int TokenFile::TokenBytes(int64_t vocab_size) { return vocab_size <= 65536 ? 2 : 4; }

absl::StatusOr<std::unique_ptr<TokenFile>> TokenFile::Open(const std::string& path, Tokenizer tokenizer) {
  const int64_t vocab_size = tokenizer.vocab_size();
  const int fd = open(path.c_str(), ir::kOpenForReading);
  if (fd < 0) {
    return ir::ErrnoStatus(errno == ENOENT ? absl::StatusCode::kNotFound : absl::StatusCode::kUnavailable,
                           absl::StrCat("open ", path));
  }
  int64_t file_bytes = 0;
  if (absl::Status regular = ir::RequireRegularFile(fd, path, &file_bytes); !regular.ok()) {
    close(fd);
    return regular;
  }
  const auto bytes = static_cast<size_t>(file_bytes);
  const int width = TokenBytes(vocab_size);
  const auto bits = absl::StrCat("uint", 8 * width, " token ids");
  if (bytes % static_cast<size_t>(width) != 0 || bytes / static_cast<size_t>(width) < kMinTokens) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", bytes, " bytes is not a file of at least ", kMinTokens,
                                                   " ", bits, " (a vocabulary of ", vocab_size, " ids)"));
  }
  void* mapped = mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (mapped == MAP_FAILED) return ir::ErrnoStatus(absl::StatusCode::kUnavailable, absl::StrCat("mmap ", path));
  std::unique_ptr<TokenFile> file(
      new TokenFile(path, std::move(tokenizer), static_cast<const unsigned char*>(mapped), bytes, width));
  // One pass over the ids, so that a wrong tokenizer or a foreign file is
  // found here, naming where, and not as an embedding error mid-run.
  for (int64_t i = 0; i < file->size(); ++i) {
    if (file->Id(i) >= static_cast<uint64_t>(vocab_size)) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": token ", i, " is ", file->Id(i), ", not below the ",
                                                     vocab_size, " ids of ", file->tokenizer_.path(),
                                                     " (is it another tokenizer's file?)"));
    }
  }
  return file;
}

TokenFile::~TokenFile() { munmap(const_cast<unsigned char*>(data_), bytes_); }

std::string TokenFile::description() const {
  return absl::StrCat(path_, " (", tokens_, " tokens of ", tokenizer_.path(), ")");
}

uint32_t TokenFile::Id(int64_t i) const {
  const unsigned char* at = data_ + static_cast<size_t>(i) * static_cast<size_t>(width_);
  uint32_t id = 0;
  for (int b = width_ - 1; b >= 0; --b) id = (id << 8) | at[b];
  return id;
}

}  // namespace tandem::examples
