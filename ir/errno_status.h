// A failed system call in words: the one home of errno's text in Tandem.
// ErrnoStatus is an absl::Status of `what` and the C library's words for
// the error, "open /x: No such file or directory", with the code the
// caller's contract gives it (a transport's peer trouble is Unavailable, a
// missing file NotFound, ...); ErrnoText is the words alone, for messages
// that say more around them. Thread-safe (strerror_r, not strerror).
// Header-only, so every folder may use it.
#ifndef TANDEM_IR_ERRNO_STATUS_H_
#define TANDEM_IR_ERRNO_STATUS_H_

#include <cerrno>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace tandem::ir {

// The C library's words for `error`, e.g. "No such file or directory".
inline std::string ErrnoText(int error) {
  char buffer[256];
  return std::string(strerror_r(error, buffer, sizeof(buffer)));  // the GNU variant: returns the text
}

// `error` defaults to errno as it is when called: call it right after the
// failing call.
inline absl::Status ErrnoStatus(absl::StatusCode code, absl::string_view what, int error = errno) {
  return absl::Status(code, absl::StrCat(what, ": ", ErrnoText(error)));
}

}  // namespace tandem::ir

#endif  // TANDEM_IR_ERRNO_STATUS_H_
