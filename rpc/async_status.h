// Turning Cap'n Proto promises into absl::Status results at the rpc/
// boundary, with bounded waits.
//
// All functions here must run on the thread that owns the KJ event loop the
// promise belongs to; the returned promise completes on that thread. They
// never block.
#ifndef TANDEM_RPC_ASYNC_STATUS_H_
#define TANDEM_RPC_ASYNC_STATUS_H_

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "kj/async.h"
#include "kj/timer.h"
#include "rpc/status_convert.h"

namespace tandem::rpc {

// Resolves with the value, or with FromKjException of the failure
// (a dropped connection -> Unavailable).
template <typename T>
kj::Promise<absl::StatusOr<T>> ToStatusOr(kj::Promise<T> promise) {
  return promise.then([](T&& value) -> absl::StatusOr<T> { return absl::StatusOr<T>(kj::mv(value)); },
                      [](kj::Exception&& exception) -> absl::StatusOr<T> {
                        return FromKjException(exception);
                      });
}

inline kj::Promise<absl::Status> ToStatus(kj::Promise<void> promise) {
  return promise.then([]() { return absl::OkStatus(); },
                      [](kj::Exception&& exception) { return FromKjException(exception); });
}

// Like ToStatusOr, but resolves with DeadlineExceeded("<what>: no reply
// within ...") if `timeout` passes first; the call is then cancelled.
template <typename T>
kj::Promise<absl::StatusOr<T>> ToStatusOrWithin(kj::Timer& timer, kj::Duration timeout,
                                                std::string what, kj::Promise<T> promise) {
  auto expired = timer.afterDelay(timeout).then([what = std::move(what), timeout]() {
    return absl::StatusOr<T>(absl::DeadlineExceededError(
        absl::StrCat(what, ": no reply within ", timeout / kj::MILLISECONDS, " ms")));
  });
  return ToStatusOr(kj::mv(promise)).exclusiveJoin(kj::mv(expired));
}

}  // namespace tandem::rpc

#endif  // TANDEM_RPC_ASYNC_STATUS_H_
