// Reading a whole file that a user or a peer names, bounded before anything
// is allocated: the one way Tandem reads small files whole (manifests,
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

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "ir/errno_status.h"

namespace tandem::ir {

// The whole of `path`, where `what` names it in errors ("the file",
// "plan /x.json"):
//   - NotFound "cannot open WHAT: No such file or directory" (or the C
//     library's other words) when it cannot be opened or read;
//   - InvalidArgument "WHAT is a directory";
//   - InvalidArgument "WHAT has N bytes, more than the M it may have" for a
//     file over `max_bytes`, before anything is read.
inline absl::StatusOr<std::string> ReadFileUpTo(const std::string& path, int64_t max_bytes, absl::string_view what) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(absl::StatusCode::kNotFound, absl::StrCat("cannot open ", what));
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};
  struct stat info {};
  if (fstat(fd, &info) != 0) return ErrnoStatus(absl::StatusCode::kNotFound, absl::StrCat("cannot open ", what));
  if (S_ISDIR(info.st_mode)) return absl::InvalidArgumentError(absl::StrCat(what, " is a directory"));
  // Regular files say their size; others (pipes, /proc) are read up to the
  // bound.
  if (S_ISREG(info.st_mode) && info.st_size > max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " has ", info.st_size, " bytes, more than the ", max_bytes, " it may have"));
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
