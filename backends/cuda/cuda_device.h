// The CUDA backend's Device: a device-resident Device over CudaGraphRunner
// (cuda_graph_runner.h), whose memory is every buffer's home and the data
// plane's. Only in builds with TANDEM_WITH_CUDA; OpenDevice
// (backends/open_device.h) is how an actor gets one.
#ifndef TANDEM_BACKENDS_CUDA_CUDA_DEVICE_H_
#define TANDEM_BACKENDS_CUDA_CUDA_DEVICE_H_

#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "backends/device.h"
#include "ir/device_spec.h"

namespace tandem::cuda {

// Opens GPU `spec.index` (resolved: >= 0) with `spec`'s precision; its host
// waits (on its stream) give up after `wait_timeout`; `fuse_elementwise` as
// RunnerOptions says. The runner's errors (CudaGraphRunner::Create),
// unprefixed.
absl::StatusOr<std::shared_ptr<backends::Device>> OpenCudaDevice(const ir::DeviceSpec& spec,
                                                                 absl::Duration wait_timeout,
                                                                 bool fuse_elementwise = true);

}  // namespace tandem::cuda

#endif  // TANDEM_BACKENDS_CUDA_CUDA_DEVICE_H_
