#include "actor/nccl/nccl_library.h"

#include "actor/nccl/fake_nccl.h"
#include "backends/fake/fake_cuda_device.h"
#ifdef TANDEM_WITH_CUDA
#include "actor/nccl/cuda_nccl.h"
#include "backends/cuda/cuda_device_memory.h"
#endif

namespace tandem::actor::nccl {

absl::StatusOr<std::unique_ptr<NcclLibrary>> NcclLibraryFor(backends::Device& device) {
  if (auto* fake = dynamic_cast<fake::FakeCudaDevice*>(&device); fake != nullptr) {
    return std::unique_ptr<NcclLibrary>(new FakeNccl(fake->fake_memory(), FakeNccl::Options()));
  }
#ifdef TANDEM_WITH_CUDA
  if (auto* memory = dynamic_cast<cuda::CudaDeviceMemory*>(device.memory()); memory != nullptr) {
    return std::unique_ptr<NcclLibrary>(new CudaNccl(*memory));
  }
#endif
  return std::unique_ptr<NcclLibrary>();
}

}  // namespace tandem::actor::nccl
