// ProbeDevices and CheckDevice over the CUDA runtime API.
#include "backends/cuda/cuda_status.h"
#include "backends/cuda/cuda_runtime.h"

#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"

namespace tandem::cuda {

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
  if (absl::Status status = CudaStatus(cudaSetDevice(device), absl::StrCat("cudaSetDevice(", device, ")"));
      !status.ok()) {
    return status;
  }
  size_t free = 0, total = 0;
  if (absl::Status status = CudaStatus(cudaMemGetInfo(&free, &total), absl::StrCat("cudaMemGetInfo on device ", device));
      !status.ok()) {
    return status;
  }
  return static_cast<int64_t>(free);
}

}  // namespace tandem::cuda
