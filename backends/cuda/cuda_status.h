// A CUDA runtime error as an absl::Status, the one way backends/cuda/ reports
// them: "<call>: <error name> (<the runtime's text>)". Internal unless the
// caller knows better (ResourceExhausted for cudaErrorMemoryAllocation,
// Unavailable for an IPC handle whose exporter is gone). Internal to
// backends/cuda/ (it includes the CUDA runtime's header).
#ifndef TANDEM_BACKENDS_CUDA_CUDA_STATUS_H_
#define TANDEM_BACKENDS_CUDA_CUDA_STATUS_H_

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace tandem::cuda {

// OK for cudaSuccess. Otherwise the error, cleared from the calling thread's
// last error (so that a later cudaGetLastError after a launch does not
// report it again) where it is not sticky.
inline absl::Status CudaStatus(cudaError_t error, absl::string_view call,
                               absl::StatusCode code = absl::StatusCode::kInternal) {
  if (error == cudaSuccess) return absl::OkStatus();
  cudaGetLastError();
  return absl::Status(code, absl::StrCat(call, ": ", cudaGetErrorName(error), " (", cudaGetErrorString(error), ")"));
}

}  // namespace tandem::cuda

#endif  // TANDEM_BACKENDS_CUDA_CUDA_STATUS_H_
