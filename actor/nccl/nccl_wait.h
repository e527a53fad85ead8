// NCCL's errors as statuses, and the bounded wait on a non-blocking
// communicator (CudaNccl's). Internal to actor/nccl.
#ifndef TANDEM_ACTOR_NCCL_NCCL_WAIT_H_
#define TANDEM_ACTOR_NCCL_NCCL_WAIT_H_

#include <nccl.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace tandem::actor::nccl {

// Polling interval of the non-blocking waits: short against a transfer's
// microseconds-to-milliseconds, long enough not to burn a core.
inline constexpr absl::Duration kNcclPoll = absl::Microseconds(50);

// Internal("<call>: <NCCL's message>").
absl::Status NcclError(absl::string_view call, ncclResult_t result);

// Waits until `comm` has no operation in progress: OK, NCCL's error (naming
// `what`), or DeadlineExceeded naming `what` once `deadline` passed.
absl::Status WaitUntilIdle(ncclComm_t comm, absl::string_view what, absl::Time deadline);

}  // namespace tandem::actor::nccl

#endif  // TANDEM_ACTOR_NCCL_NCCL_WAIT_H_
