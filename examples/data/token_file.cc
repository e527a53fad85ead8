#include "examples/data/token_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <vector>

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
  std::unique_ptr<TokenFile> file(new TokenFile(path, std::move(tokenizer), fd, bytes, width));
  // The first ids, so that a wrong tokenizer or a foreign file is found
  // here, naming where, and not as an error steps into the run.
  std::vector<int32_t> ids(static_cast<size_t>(std::min(file->size(), kCheckedAtOpen)));
  if (absl::Status status = file->Read(0, static_cast<int64_t>(ids.size()), ids.data()); !status.ok()) return status;
  return file;
}

TokenFile::~TokenFile() { close(fd_); }

absl::Status TokenFile::Read(int64_t start, int64_t count, int32_t* ids) const {
  const size_t want = static_cast<size_t>(count) * static_cast<size_t>(width_);
  std::vector<unsigned char> bytes(want);
  size_t got = 0;
  while (got < want) {
    const ssize_t n = pread(fd_, bytes.data() + got, want - got,
                            static_cast<off_t>(static_cast<size_t>(start) * static_cast<size_t>(width_) + got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ir::ErrnoStatus(absl::StatusCode::kDataLoss, absl::StrCat("cannot read ", path_));
    if (n == 0) {
      return absl::DataLossError(absl::StrCat(path_, " ends before token ", start + static_cast<int64_t>(got) / width_,
                                              ": it had ", bytes_, " bytes when the run began (was it truncated?)"));
    }
    got += static_cast<size_t>(n);
  }
  const int64_t vocab_size = tokenizer_.vocab_size();
  for (int64_t i = 0; i < count; ++i) {
    const unsigned char* at = bytes.data() + static_cast<size_t>(i) * static_cast<size_t>(width_);
    uint32_t id = 0;
    for (int b = width_ - 1; b >= 0; --b) id = (id << 8) | at[b];
    if (id >= static_cast<uint64_t>(vocab_size)) {
      return absl::InvalidArgumentError(absl::StrCat(path_, ": token ", start + i, " is ", id, ", not below the ",
                                                     vocab_size, " ids of ", tokenizer_.path(),
                                                     " (is it another tokenizer's file?)"));
    }
    ids[i] = static_cast<int32_t>(id);
  }
  return absl::OkStatus();
}

std::string TokenFile::description() const {
  return absl::StrCat(path_, " (", tokens_, " tokens of ", tokenizer_.path(), ")");
}

}  // namespace tandem::examples
