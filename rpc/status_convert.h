// Conversions between KJ exceptions (Cap'n Proto's error channel) and
// absl::Status (Tandem's). KJ exceptions never leave rpc/: clients turn
// failed promises into Status with FromKjException, and server methods that
// fail throw ToKjException(status), which carries the absl code in a
// recognizable prefix ("tandem:INVALID_ARGUMENT: ...") so that the client on
// the other side of the connection gets the same code back.
//
// Pure functions; thread-safe.
#ifndef TANDEM_RPC_STATUS_CONVERT_H_
#define TANDEM_RPC_STATUS_CONVERT_H_

#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "kj/common.h"
#include "kj/exception.h"

namespace tandem::rpc {

// The prefix of a FAILED exception's description that carries an absl code.
inline constexpr char kStatusPrefix[] = "tandem:";

// DISCONNECTED -> Unavailable, OVERLOADED -> ResourceExhausted,
// UNIMPLEMENTED -> Unimplemented; FAILED whose description contains
// "tandem:<CODE>: <message>" (Cap'n Proto may prepend "remote exception: ")
// -> that code and message; any other FAILED -> Internal with KJ's text.
absl::Status FromKjException(const kj::Exception& exception);

// A FAILED exception for a non-OK `status` (Unavailable becomes DISCONNECTED
// so that it reads as a lost peer on both sides). CHECK-fails on OK.
kj::Exception ToKjException(const absl::Status& status);

// Throws ToKjException(status) unless it is OK. For server methods.
void ThrowIfError(const absl::Status& status);

// For decoders of received messages, which return statuses and never
// throw: runs `decode()` (returning an absl::StatusOr) and returns its
// result, except that a KJ exception it throws (Cap'n Proto's answer to a
// malformed message: a pointer out of bounds or of the wrong kind, text
// without its NUL, the traversal or nesting limit passed) becomes
// InvalidArgument "<what>: malformed message: <KJ's description>".
template <typename Decode>
auto CatchMalformedMessage(absl::string_view what, Decode&& decode) -> decltype(decode()) {
  std::optional<decltype(decode())> result;
  kj::Maybe<kj::Exception> exception = kj::runCatchingExceptions([&] { result.emplace(decode()); });
  KJ_IF_MAYBE(thrown, exception) {
    const kj::StringPtr description = thrown->getDescription();
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": malformed message: ", absl::string_view(description.cStr(), description.size())));
  }
  return *std::move(result);
}

}  // namespace tandem::rpc

#endif  // TANDEM_RPC_STATUS_CONVERT_H_
