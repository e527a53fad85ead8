#include "actor/device.h"

#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

#ifdef TANDEM_WITH_CUDA
#include "actor/cuda/cuda_graph_runner.h"
#include "actor/cuda/cuda_runtime.h"
#endif

namespace tandem::actor {
namespace {

class ReferenceDevice final : public Device {
 public:
  std::string name() const override { return "cpu"; }
  absl::StatusOr<ir::TensorMap> RunGraph(const ir::Graph& graph, const ir::TensorMap& inputs) override {
    return ir::RunGraph(graph, inputs);
  }
};

#ifdef TANDEM_WITH_CUDA
class CudaDevice final : public Device {
 public:
  CudaDevice(DeviceSpec spec, std::unique_ptr<cuda::CudaGraphRunner> runner)
      : spec_(spec), runner_(std::move(runner)) {}
  std::string name() const override { return DeviceSpecName(spec_); }
  absl::StatusOr<ir::TensorMap> RunGraph(const ir::Graph& graph, const ir::TensorMap& inputs) override {
    return runner_->Run(graph, inputs);
  }
  int cuda_ordinal() const override { return spec_.index; }

 private:
  const DeviceSpec spec_;  // with the resolved index
  std::unique_ptr<cuda::CudaGraphRunner> runner_;
};
#endif

absl::Status BadSpec(absl::string_view text) {
  return absl::InvalidArgumentError(
      absl::StrCat("unknown device '", text, "': expected cpu, cuda, cuda:N, cuda+bf16 or cuda:N+bf16"));
}

}  // namespace

absl::StatusOr<DeviceSpec> ParseDeviceSpec(absl::string_view text) {
  DeviceSpec spec;
  if (text == "cpu") return spec;
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
  std::string name = spec.index < 0 ? "cuda" : absl::StrCat("cuda:", spec.index);
  if (spec.bf16_matmul) absl::StrAppend(&name, "+bf16");
  return name;
}

std::shared_ptr<Device> CpuDevice() {
  static const auto* const device = new std::shared_ptr<Device>(std::make_shared<ReferenceDevice>());
  return *device;
}

absl::Status CheckDeviceVisible(const DeviceSpec& spec) {
  if (spec.kind == DeviceSpec::Kind::kCpu) return absl::OkStatus();
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

absl::StatusOr<std::shared_ptr<Device>> OpenDevice(const DeviceSpec& spec, int32_t actor) {
  if (spec.kind == DeviceSpec::Kind::kCpu) return CpuDevice();
  const absl::Status visible = CheckDeviceVisible(spec);
#ifdef TANDEM_WITH_CUDA
  // (Without CUDA, a CUDA device is never visible: the error below.)
  if (visible.ok()) {
    DeviceSpec resolved = spec;
    if (resolved.index < 0) resolved.index = actor % cuda::ProbeDevices().count;
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
