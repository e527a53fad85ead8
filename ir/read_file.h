// Owning an open file descriptor, reading exactly N bytes at an offset, and
// opening a file that a user or a peer names, and reading a small one whole,
// bounded before anything is allocated. Every file Tandem reads is opened
// with kOpenForReading, so that a FIFO cannot block the open, and checked
// with RequireRegularFile before a byte is read, so that a FIFO, a device or
// a socket is refused naming it instead of hanging or reading without end.
// ReadFileUpTo is the one way Tandem reads small files whole (manifests,
// schedule files, plans, cost files, IR text). Header-only, so every folder
// may use it; state files, which are legitimately large, are read in pieces
// (ir/state_file.h).
#ifndef TANDEM_IR_READ_FILE_H_
#define TANDEM_IR_READ_FILE_H_

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "ir/errno_status.h"

namespace tandem::ir {

// An open file descriptor, closed when the owner goes (or is reset).
// Move-only; -1 owns nothing.
class FileDescriptor {
 public:
  FileDescriptor() = default;
  explicit FileDescriptor(int fd) : fd_(fd) {}
  FileDescriptor(FileDescriptor&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  FileDescriptor& operator=(FileDescriptor&& other) noexcept {
    Reset(std::exchange(other.fd_, -1));
    return *this;
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor() { Reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  // Closes what it owns (errno kept, so that a caller can still report the
  // failure that led here) and owns `fd` instead.
  void Reset(int fd = -1) {
    if (fd_ >= 0) {
      const int saved = errno;
      close(fd_);
      errno = saved;
    }
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

// Reads exactly `size` bytes at `offset` of `fd` into `out` (pread,
// interrupted reads retried): Unavailable "cannot read PATH: <errno's
// words>" when a read fails, InvalidArgument "PATH ended while it was being
// read" when the file is shorter.
inline absl::Status ReadExactlyAt(int fd, void* out, uint64_t size, uint64_t offset, absl::string_view path) {
  auto* bytes = static_cast<char*>(out);
  while (size > 0) {
    const ssize_t n = pread(fd, bytes, size, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus(absl::StatusCode::kUnavailable, absl::StrCat("cannot read ", path));
    if (n == 0) return absl::InvalidArgumentError(absl::StrCat(path, " ended while it was being read"));
    bytes += n;
    offset += static_cast<uint64_t>(n);
    size -= static_cast<uint64_t>(n);
  }
  return absl::OkStatus();
}

// open(2) flags for a file to read: O_NONBLOCK makes the open of a FIFO
// return at once (RequireRegularFile then refuses it and clears the flag
// for a regular file).
inline constexpr int kOpenForReading = O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY;

// What a file that is not regular is, for messages: "a FIFO", "a directory".
inline const char* FileKindName(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// OK if `fd` (opened with kOpenForReading) is a regular file, which is then
// read blocking as usual; InvalidArgument "WHAT is a directory" or "WHAT is
// a FIFO, not a regular file" otherwise; NotFound if it cannot be looked at.
// `size`, if given, receives its size.
inline absl::Status RequireRegularFile(int fd, absl::string_view what, int64_t* size = nullptr) {
  struct stat info {};
  if (fstat(fd, &info) != 0) return ErrnoStatus(absl::StatusCode::kNotFound, absl::StrCat("cannot stat ", what));
  if (S_ISDIR(info.st_mode)) return absl::InvalidArgumentError(absl::StrCat(what, " is a directory"));
  if (!S_ISREG(info.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " is ", FileKindName(info.st_mode), ", not a regular file: Tandem reads only regular files"));
  }
  const int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
    return ErrnoStatus(absl::StatusCode::kNotFound, absl::StrCat("cannot read ", what));
  }
  if (size != nullptr) *size = static_cast<int64_t>(info.st_size);
  return absl::OkStatus();
}

// The whole of `path`, where `what` names it in errors ("the file",
// "plan /x.json"):
//   - NotFound "cannot open WHAT: No such file or directory" (or the C
//     library's other words) when it cannot be opened or read;
//   - InvalidArgument "WHAT is a directory", "WHAT is a FIFO, not a regular
//     file" (devices, sockets alike), before anything is read;
//   - InvalidArgument "WHAT has N bytes, more than the M it may have" for a
//     file over `max_bytes`, before anything is read.
inline absl::StatusOr<std::string> ReadFileUpTo(const std::string& path, int64_t max_bytes, absl::string_view what) {
  const FileDescriptor file(open(path.c_str(), kOpenForReading));
  if (!file.valid()) return ErrnoStatus(absl::StatusCode::kNotFound, absl::StrCat("cannot open ", what));
  const int fd = file.get();
  int64_t size = 0;
  if (absl::Status regular = RequireRegularFile(fd, what, &size); !regular.ok()) return regular;
  // /proc's files say 0 bytes and are read up to the bound.
  if (size > max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " has ", size, " bytes, more than the ", max_bytes, " it may have"));
  }
  std::string contents;
  char buffer[1 << 16];
  while (true) {
    const ssize_t got = read(fd, buffer, sizeof(buffer));
    if (got < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(absl::StatusCode::kNotFound, absl::StrCat("cannot read ", what));
    }
    if (got == 0) return contents;
    if (static_cast<int64_t>(contents.size()) + got > max_bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " has more than the ", max_bytes, " bytes it may have"));
    }
    contents.append(buffer, static_cast<size_t>(got));
  }
}

}  // namespace tandem::ir

#endif  // TANDEM_IR_READ_FILE_H_
