#include "backends/open_device.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "backends/cpu/cpu_device.h"
#include "backends/fake/fake_cuda_device.h"
#include "ir/device_spec.h"

#ifdef TANDEM_WITH_CUDA
#include "backends/cuda/cuda_device.h"
#include "backends/cuda/cuda_runtime.h"
#endif

namespace tandem::backends {

absl::Status CheckDeviceVisible(const ir::DeviceSpec& spec) {
  if (spec.kind != ir::DeviceSpec::Kind::kCuda) return absl::OkStatus();
#ifdef TANDEM_WITH_CUDA
  const cuda::DeviceProbe probe = cuda::ProbeDevices();
  if (probe.count == 0) {
    return absl::FailedPreconditionError(absl::StrCat("no CUDA device is visible (", probe.why, ")"));
  }
  if (spec.index >= probe.count) {
    return absl::FailedPreconditionError(absl::StrCat("only ", probe.count, " CUDA device(s) visible"));
  }
  return absl::OkStatus();
#else
  return absl::FailedPreconditionError(
      "this build of Tandem has no CUDA backend (it was configured with TANDEM_WITH_CUDA=OFF)");
#endif
}

absl::StatusOr<std::shared_ptr<Device>> OpenDevice(const ir::DeviceSpec& spec, int32_t actor,
                                                   const OpenDeviceOptions& options) {
  if (spec.kind == ir::DeviceSpec::Kind::kCpu) return cpu::CpuDevice();
  if (spec.kind == ir::DeviceSpec::Kind::kFakeCuda) {
    absl::StatusOr<fake::FakeCudaFaults> faults = fake::ParseFakeCudaFaults(options.fault, actor);
    if (!faults.ok()) return faults.status();
    absl::StatusOr<std::shared_ptr<fake::FakeCudaDevice>> device =
        fake::FakeCudaDevice::Create({.wait_timeout = options.wait_timeout,
                                      .poison_at_run = faults->poison_at_run,
                                      .free_bytes = faults->free_bytes});
    if (!device.ok()) {
      return absl::Status(device.status().code(),
                          absl::StrCat("device fake-cuda for actor ", actor, ": ", device.status().message()));
    }
    return std::shared_ptr<Device>(*std::move(device));
  }
  const absl::Status visible = CheckDeviceVisible(spec);
#ifdef TANDEM_WITH_CUDA
  // (Without CUDA, a CUDA device is never visible: the error below.)
  if (visible.ok()) {
    ir::DeviceSpec resolved = spec;
    if (resolved.index < 0) {
      resolved.index =
          ir::GpuForRank(options.local_rank >= 0 ? options.local_rank : actor, cuda::ProbeDevices().count);
    }
    absl::StatusOr<std::shared_ptr<Device>> device =
        cuda::OpenCudaDevice(resolved, options.wait_timeout, options.fuse_elementwise);
    if (!device.ok()) {
      return absl::Status(device.status().code(), absl::StrCat("device ", ir::DeviceSpecName(resolved), " for actor ",
                                                               actor, ": ", device.status().message()));
    }
    return device;
  }
#endif
  return absl::Status(visible.code(),
                      absl::StrCat("device ", ir::DeviceSpecName(spec), " for actor ", actor, ": ", visible.message()));
}

}  // namespace tandem::backends
