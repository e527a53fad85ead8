// A failed system call as an absl::Status: `what` and the C library's words
// for the error, "open /x: No such file or directory", with the code the
// caller's contract gives it (a transport's peer trouble is Unavailable, a
// missing file NotFound, ...). Header-only, so every folder may use it.
#ifndef TANDEM_IR_ERRNO_STATUS_H_
#define TANDEM_IR_ERRNO_STATUS_H_

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace tandem::ir {

// `error` defaults to errno as it is when called: call it right after the
// failing call.
inline absl::Status ErrnoStatus(absl::StatusCode code, absl::string_view what, int error = errno) {
  return absl::Status(code, absl::StrCat(what, ": ", std::strerror(error)));
}

}  // namespace tandem::ir

#endif  // TANDEM_IR_ERRNO_STATUS_H_
