// Opening the device a name says (ir/device_spec.h) for an actor: the one
// place that knows every backend of this build.
#ifndef TANDEM_BACKENDS_OPEN_DEVICE_H_
#define TANDEM_BACKENDS_OPEN_DEVICE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "backends/device.h"
#include "ir/device_spec.h"

namespace tandem::backends {

// OK when this build and machine have the device `spec` names (always, for
// the CPU), without opening it: a controller checks before starting
// actors. FailedPrecondition otherwise, saying why without naming the
// device (callers add the name): "this build of Tandem has no CUDA backend
// (...)", "no CUDA device is visible (<the CUDA runtime's reason>)", "only 1
// CUDA device(s) visible".
absl::Status CheckDeviceVisible(const ir::DeviceSpec& spec);

struct OpenDeviceOptions {
  // How long a device-resident device's host waits (on its stream) may take.
  absl::Duration wait_timeout = absl::Minutes(1);
  // TANDEM_FAULT's value: faults the fake device injects for tests
  // (fake_cuda_device.h); the other devices ignore it.
  std::string fault;
  // Which GPU a `cuda` spec without an index takes: GpuForRank of this rank
  // among the actors of the node (Slurm's SLURM_LOCALID); -1: the actor id.
  int32_t local_rank = -1;
  // Whether a GPU launches each run of elementwise nodes as one kernel
  // (ir/elementwise_runs.h; the same bits either way) and a linear layer's
  // matmul and bias add as one GEMM with cuBLASLt's bias epilogue (within
  // rounding of the two); off, a kernel per node, to measure what fusing
  // saves (cuda::RunnerOptions::fuse_elementwise). The CPU and the emulated
  // GPU, whose reference interpreter fuses inside its kernels, ignore it.
  bool fuse_elementwise = true;
};

// Opens the device `spec` names for actor `actor`: CheckDeviceVisible's
// errors as "device cuda for actor 1: no CUDA device is visible (...)";
// InvalidArgument for a malformed fake-device fault.
absl::StatusOr<std::shared_ptr<Device>> OpenDevice(const ir::DeviceSpec& spec, int32_t actor,
                                                   const OpenDeviceOptions& options = {});

}  // namespace tandem::backends

#endif  // TANDEM_BACKENDS_OPEN_DEVICE_H_
