#include "backends/cuda/cuda_device.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/cuda/cuda_graph_runner.h"
#include "backends/cuda/cuda_runtime.h"
#include "ir/device_spec.h"

namespace tandem::cuda {
namespace {

// The GPU: a device-resident Device over CudaGraphRunner.
class CudaDevice final : public backends::ResidentDevice {
  // A CudaExecutable of the device's runner, over device tensors.
  class Compiled final : public backends::Executable {
   public:
    Compiled(std::string device, CudaGraphRunner* runner, std::unique_ptr<CudaExecutable> executable)
        : device_(std::move(device)), runner_(runner), executable_(std::move(executable)) {}
    absl::StatusOr<backends::HandleMap> Run(const backends::HandleMap& inputs) override {
      DeviceTensorMap device_inputs;
      for (const auto& [input, handle] : inputs) {
        if (!handle.on_device()) {
          return absl::InvalidArgumentError(absl::StrCat(device_, ": input '", input, "' is not a device tensor"));
        }
        device_inputs.emplace(input, handle.device());
      }
      absl::StatusOr<DeviceTensorMap> results = runner_->Run(*executable_, device_inputs);
      if (!results.ok()) return results.status();
      backends::HandleMap outputs;
      for (auto& [output, tensor] : *results) {
        if (!tensor.defined()) {
          return absl::InternalError(absl::StrCat(device_, ": output '", output, "' was not computed"));
        }
        outputs.emplace(output, backends::TensorHandle(std::move(tensor)));
      }
      return outputs;
    }
    const ir::ElementwiseRuns* fused_runs() const override { return &executable_->fused_runs(); }
    std::vector<std::pair<ir::ValueId, ir::ValueId>> bias_epilogues() const override {
      return executable_->bias_epilogues();
    }

   private:
    const std::string device_;
    CudaGraphRunner* const runner_;
    const std::unique_ptr<CudaExecutable> executable_;
  };

 public:
  CudaDevice(ir::DeviceSpec spec, std::unique_ptr<CudaGraphRunner> runner, absl::Duration wait_timeout)
      : ResidentDevice(wait_timeout), spec_(spec), runner_(std::move(runner)) {}
  std::string name() const override { return ir::DeviceSpecName(spec_); }
  int cuda_ordinal() const override { return spec_.index; }
  backends::DeviceMemory* memory() const override { return &runner_->memory(); }
  std::optional<int64_t> FreeBytes() const override {
    absl::StatusOr<int64_t> free = cuda::FreeBytes(spec_.index);
    return free.ok() ? std::optional<int64_t>(*free) : std::nullopt;
  }
  absl::Status set_node_times(std::vector<double>* node_ms) override {
    runner_->set_node_times(node_ms);
    return absl::OkStatus();
  }
  void set_deferred_checks(bool on) override { runner_->set_defer_range_checks(on); }
  absl::StatusOr<std::optional<backends::DeferredFailure>> SettleRuns(absl::Time) override {
    return runner_->Settle();  // bounded by the runner's own wait timeout
  }
  std::optional<backends::PeakRates> Peak() const override {
    absl::StatusOr<DeviceFacts> facts = DescribeDevice(spec_.index);
    if (!facts.ok()) return std::nullopt;
    return PeakRatesOf(*facts, spec_.precision);
  }

  absl::StatusOr<std::unique_ptr<backends::Executable>> Compile(const ir::Graph& graph) override {
    absl::StatusOr<std::unique_ptr<CudaExecutable>> compiled = runner_->Compile(graph);
    if (!compiled.ok()) return compiled.status();
    return std::make_unique<Compiled>(name(), runner_.get(), *std::move(compiled));
  }

 private:
  const ir::DeviceSpec spec_;  // with the resolved index
  std::unique_ptr<CudaGraphRunner> runner_;
};

Precision RunnerPrecision(ir::DeviceSpec::Precision precision) {
  switch (precision) {
    case ir::DeviceSpec::Precision::kF32:
      return Precision::kF32;
    case ir::DeviceSpec::Precision::kTf32:
      return Precision::kTf32;
    case ir::DeviceSpec::Precision::kBf16:
      return Precision::kBf16;
  }
  return Precision::kF32;
}

}  // namespace

absl::StatusOr<std::shared_ptr<backends::Device>> OpenCudaDevice(const ir::DeviceSpec& spec,
                                                                 absl::Duration wait_timeout, bool fuse_elementwise) {
  absl::StatusOr<std::unique_ptr<CudaGraphRunner>> runner =
      CudaGraphRunner::Create({.device = spec.index,
                               .precision = RunnerPrecision(spec.precision),
                               .wait_timeout = wait_timeout,
                               .fuse_elementwise = fuse_elementwise});
  if (!runner.ok()) return runner.status();
  return std::make_shared<CudaDevice>(spec, *std::move(runner), wait_timeout);
}

}  // namespace tandem::cuda
