// NCCL bootstrap, the controller's half: the unique id of a pair
// communicator between two actors on different GPUs.
//
// The controller creates one id per actor pair and hands it to both actors
// over the control plane (they join it with
// actor/cuda/nccl_communicator.h). ncclGetUniqueId needs no GPU, but it
// starts NCCL's bootstrap listener in the calling process, which must stay
// up while the actors join: the controller does.
//
// NCCL is loaded at run time (dlopen of libnccl.so.2, also looked up under
// /usr/local/cuda/lib64), so the controller library and libtandem.so do not
// link NCCL: a machine without NCCL runs every CPU job, and only a GPU job
// that needs NCCL fails, with this message.
#ifndef TANDEM_CONTROLLER_NCCL_UNIQUE_ID_H_
#define TANDEM_CONTROLLER_NCCL_UNIQUE_ID_H_

#include <string>

#include "absl/status/statusor.h"

namespace tandem::controller {

// A fresh NCCL unique id (128 bytes, opaque). FailedPrecondition naming the
// library paths tried when NCCL cannot be loaded; Internal with NCCL's
// words when ncclGetUniqueId fails. Thread-safe.
absl::StatusOr<std::string> NewNcclUniqueId();

}  // namespace tandem::controller

#endif  // TANDEM_CONTROLLER_NCCL_UNIQUE_ID_H_
