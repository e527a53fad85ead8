// ProbeDevices and CheckDevice over the CUDA runtime API.
#include "actor/cuda/cuda_runtime.h"

#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"

namespace tandem::actor::cuda {

DeviceProbe ProbeDevices() {
  DeviceProbe probe;
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    // Not sticky (no context exists yet), but clear it so that a later
    // cudaGetLastError of the same thread does not report it again.
    cudaGetLastError();
    probe.why = absl::StrCat("cudaGetDeviceCount: ", cudaGetErrorString(error));
    return probe;
  }
  probe.count = count;
  if (count == 0) probe.why = "cudaGetDeviceCount: 0 devices visible";
  return probe;
}

absl::Status CheckDevice(int device) {
  const DeviceProbe probe = ProbeDevices();
  if (probe.count == 0) {
    return absl::FailedPreconditionError(absl::StrCat("no CUDA device ", device, ": ", probe.why));
  }
  if (device < 0 || device >= probe.count) {
    return absl::FailedPreconditionError(
        absl::StrCat("CUDA device ", device, " asked for, ", probe.count, " visible"));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> FreeBytes(int device) {
  if (cudaError_t error = cudaSetDevice(device); error != cudaSuccess) {
    return absl::InternalError(absl::StrCat("cudaSetDevice(", device, "): ", cudaGetErrorString(error)));
  }
  size_t free = 0, total = 0;
  if (cudaError_t error = cudaMemGetInfo(&free, &total); error != cudaSuccess) {
    return absl::InternalError(absl::StrCat("cudaMemGetInfo on device ", device, ": ", cudaGetErrorString(error)));
  }
  return static_cast<int64_t>(free);
}

}  // namespace tandem::actor::cuda
