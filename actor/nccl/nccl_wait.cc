#include "actor/nccl/nccl_wait.h"

#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace tandem::actor::nccl {

absl::Status NcclError(absl::string_view call, ncclResult_t result) {
  return absl::InternalError(absl::StrCat(call, ": ", ncclGetErrorString(result)));
}

absl::Status WaitUntilIdle(ncclComm_t comm, absl::string_view what, absl::Time deadline) {
  for (;;) {
    ncclResult_t state = ncclSuccess;
    if (ncclResult_t result = ncclCommGetAsyncError(comm, &state); result != ncclSuccess) {
      return NcclError("ncclCommGetAsyncError", result);
    }
    if (state == ncclSuccess) return absl::OkStatus();
    if (state != ncclInProgress) return NcclError(what, state);
    if (absl::Now() >= deadline) return absl::DeadlineExceededError(absl::StrCat(what, " did not complete in time"));
    std::this_thread::sleep_for(absl::ToChronoMicroseconds(kNcclPoll));
  }
}

}  // namespace tandem::actor::nccl
