#include "actor/device.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "actor/fake_cuda_device.h"

#ifdef TANDEM_WITH_CUDA
#include "actor/cuda/cuda_graph_runner.h"
#include "actor/cuda/cuda_runtime.h"
#endif

namespace tandem::actor {
namespace {

// A device whose buffers are host tensors: Run unwraps them for RunOnHost.
class HostResidentDevice : public Device {
 public:
  absl::StatusOr<HandleMap> Run(const ir::Graph& graph, const HandleMap& inputs) final {
    ir::TensorMap host_inputs;
    for (const auto& [input, handle] : inputs) {
      if (handle.on_device()) {
        return absl::InvalidArgumentError(absl::StrCat(name(), ": input '", input, "' is a device tensor"));
      }
      host_inputs.emplace(input, handle.host());
    }
    absl::StatusOr<ir::TensorMap> results = RunOnHost(graph, host_inputs);
    if (!results.ok()) return results.status();
    HandleMap outputs;
    for (auto& [output, tensor] : *results) outputs.emplace(output, std::move(tensor));
    return outputs;
  }

 protected:
  virtual absl::StatusOr<ir::TensorMap> RunOnHost(const ir::Graph& graph, const ir::TensorMap& inputs) = 0;
};

class ReferenceDevice final : public HostResidentDevice {
 public:
  std::string name() const override { return "cpu"; }

 private:
  absl::StatusOr<ir::TensorMap> RunOnHost(const ir::Graph& graph, const ir::TensorMap& inputs) override {
    return ir::RunGraph(graph, inputs);
  }
};

#ifdef TANDEM_WITH_CUDA
class CudaDevice final : public HostResidentDevice {
 public:
  CudaDevice(DeviceSpec spec, std::unique_ptr<cuda::CudaGraphRunner> runner)
      : spec_(spec), runner_(std::move(runner)) {}
  std::string name() const override { return DeviceSpecName(spec_); }
  int cuda_ordinal() const override { return spec_.index; }
  std::optional<int64_t> FreeBytes() const override {
    absl::StatusOr<int64_t> free = cuda::FreeBytes(spec_.index);
    return free.ok() ? std::optional<int64_t>(*free) : std::nullopt;
  }

 private:
  absl::StatusOr<ir::TensorMap> RunOnHost(const ir::Graph& graph, const ir::TensorMap& inputs) override {
    return runner_->Run(graph, inputs);
  }

  const DeviceSpec spec_;  // with the resolved index
  std::unique_ptr<cuda::CudaGraphRunner> runner_;
};
#endif

absl::Status BadSpec(absl::string_view text) {
  return absl::InvalidArgumentError(
      absl::StrCat("unknown device '", text, "': expected cpu, cuda, cuda:N, cuda+bf16, cuda:N+bf16 or fake-cuda"));
}

}  // namespace

absl::StatusOr<ir::HostTensor> Device::Download(const TensorHandle& handle) {
  if (handle.on_device()) {
    return absl::InvalidArgumentError(absl::StrCat(name(), ": cannot download a device tensor it does not hold"));
  }
  return handle.host();
}

absl::StatusOr<TensorHandle> Device::Accumulate(const TensorHandle& acc, const TensorHandle& grad) {
  if (acc.on_device() || grad.on_device()) {
    return absl::InvalidArgumentError(absl::StrCat(name(), ": cannot accumulate device tensors it does not hold"));
  }
  absl::StatusOr<ir::HostTensor> sum = ir::AccumulateGradient(acc.host(), grad.host());
  if (!sum.ok()) return sum.status();
  return TensorHandle(*std::move(sum));
}

absl::StatusOr<ir::TensorMap> Device::RunGraph(const ir::Graph& graph, const ir::TensorMap& inputs) {
  HandleMap handles;
  for (const auto& [input, tensor] : inputs) {
    absl::StatusOr<TensorHandle> uploaded = Upload(tensor);
    if (!uploaded.ok()) return uploaded.status();
    handles.emplace(input, *std::move(uploaded));
  }
  absl::StatusOr<HandleMap> results = Run(graph, handles);
  if (!results.ok()) return results.status();
  ir::TensorMap outputs;
  for (const auto& [output, handle] : *results) {
    absl::StatusOr<ir::HostTensor> downloaded = Download(handle);
    if (!downloaded.ok()) return downloaded.status();
    outputs.emplace(output, *std::move(downloaded));
  }
  return outputs;
}

absl::StatusOr<DeviceSpec> ParseDeviceSpec(absl::string_view text) {
  DeviceSpec spec;
  if (text == "cpu") return spec;
  if (text == "fake-cuda") {
    spec.kind = DeviceSpec::Kind::kFakeCuda;
    return spec;
  }
  absl::string_view rest = text;
  if (!absl::ConsumePrefix(&rest, "cuda")) return BadSpec(text);
  spec.kind = DeviceSpec::Kind::kCuda;
  spec.bf16_matmul = absl::ConsumeSuffix(&rest, "+bf16");
  if (rest.empty()) return spec;
  int index = -1;
  if (!absl::ConsumePrefix(&rest, ":") || rest.empty() || rest[0] == '+' || rest[0] == '-' ||
      !absl::SimpleAtoi(rest, &index) || index < 0) {
    return BadSpec(text);
  }
  spec.index = index;
  return spec;
}

std::string DeviceSpecName(const DeviceSpec& spec) {
  if (spec.kind == DeviceSpec::Kind::kCpu) return "cpu";
  if (spec.kind == DeviceSpec::Kind::kFakeCuda) return "fake-cuda";
  std::string name = spec.index < 0 ? "cuda" : absl::StrCat("cuda:", spec.index);
  if (spec.bf16_matmul) absl::StrAppend(&name, "+bf16");
  return name;
}

std::shared_ptr<Device> CpuDevice() {
  static const auto* const device = new std::shared_ptr<Device>(std::make_shared<ReferenceDevice>());
  return *device;
}

absl::Status CheckDeviceVisible(const DeviceSpec& spec) {
  if (spec.kind != DeviceSpec::Kind::kCuda) return absl::OkStatus();
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

int GpuForRank(int32_t rank, int visible) { return visible > 0 ? std::max(rank, 0) % visible : 0; }

absl::StatusOr<std::shared_ptr<Device>> OpenDevice(const DeviceSpec& spec, int32_t actor,
                                                   const OpenDeviceOptions& options) {
  if (spec.kind == DeviceSpec::Kind::kCpu) return CpuDevice();
  if (spec.kind == DeviceSpec::Kind::kFakeCuda) {
    absl::StatusOr<FakeCudaFaults> faults = ParseFakeCudaFaults(options.fault, actor);
    if (!faults.ok()) return faults.status();
    absl::StatusOr<std::shared_ptr<FakeCudaDevice>> device =
        FakeCudaDevice::Create({.wait_timeout = options.wait_timeout,
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
    DeviceSpec resolved = spec;
    if (resolved.index < 0) {
      resolved.index = GpuForRank(options.local_rank >= 0 ? options.local_rank : actor, cuda::ProbeDevices().count);
    }
    absl::StatusOr<std::unique_ptr<cuda::CudaGraphRunner>> runner =
        cuda::CudaGraphRunner::Create({.device = resolved.index, .bf16_matmul = resolved.bf16_matmul});
    if (!runner.ok()) {
      return absl::Status(runner.status().code(), absl::StrCat("device ", DeviceSpecName(resolved), " for actor ",
                                                               actor, ": ", runner.status().message()));
    }
    return std::make_shared<CudaDevice>(resolved, *std::move(runner));
  }
#endif
  return absl::Status(visible.code(),
                      absl::StrCat("device ", DeviceSpecName(spec), " for actor ", actor, ": ", visible.message()));
}

}  // namespace tandem::actor
