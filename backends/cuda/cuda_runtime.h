// The CUDA runtime as the rest of Tandem sees it: is there a device, and how
// much memory is free. Plain C++: no CUDA header is included here (CUDA
// errors as absl::Status, inside backends/cuda/: cuda_status.h).
//
// Without a GPU (or without a driver) cudaGetDeviceCount fails ("CUDA driver
// version is insufficient for CUDA runtime version"); ProbeDevices turns
// that into zero devices and keeps the runtime's words in `why`, so callers
// (tests, `tandem train --device cuda`) can skip or refuse with a clear
// message instead of crashing.
#ifndef TANDEM_BACKENDS_CUDA_CUDA_RUNTIME_H_
#define TANDEM_BACKENDS_CUDA_CUDA_RUNTIME_H_

#include <string>

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tandem::cuda {

struct DeviceProbe {
  int count = 0;    // visible CUDA devices
  std::string why;  // when count is 0: the runtime's reason
};

// Thread-safe; asks the runtime every time (cheap after the first call).
DeviceProbe ProbeDevices();

// OK when `device` is a visible device; FailedPrecondition otherwise, e.g.
// "no CUDA device 0: cudaGetDeviceCount: CUDA driver version is
// insufficient for CUDA runtime version", or "CUDA device 3 asked for, 1
// visible".
absl::Status CheckDevice(int device);

// The bytes free on `device` for new allocations (cudaMemGetInfo, on the
// calling thread's current device set to `device`); Internal with the
// runtime's words when it cannot be asked.
absl::StatusOr<int64_t> FreeBytes(int device);

}  // namespace tandem::cuda

#endif  // TANDEM_BACKENDS_CUDA_CUDA_RUNTIME_H_
