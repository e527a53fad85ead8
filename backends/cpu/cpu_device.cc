#include "backends/cpu/cpu_device.h"

#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "backends/cpu/interpreter.h"
#include "ir/graph_plan.h"

namespace tandem::cpu {
namespace {

// A graph and its plan on the reference kernels, over host tensors.
class ReferenceExecutable final : public backends::Executable {
 public:
  explicit ReferenceExecutable(const ir::Graph& graph) : graph_(graph), plan_(ir::PlanGraph(graph_)) {}
  absl::StatusOr<backends::HandleMap> Run(const backends::HandleMap& inputs) override {
    ir::TensorMap host_inputs;
    for (const auto& [input, handle] : inputs) {
      if (handle.on_device()) {
        return absl::InvalidArgumentError(absl::StrCat("cpu: input '", input, "' is a device tensor"));
      }
      host_inputs.emplace(input, handle.host());
    }
    absl::StatusOr<ir::TensorMap> results = RunGraph(graph_, plan_, host_inputs);
    if (!results.ok()) return results.status();
    backends::HandleMap outputs;
    for (auto& [output, tensor] : *results) outputs.emplace(output, std::move(tensor));
    return outputs;
  }

 private:
  const ir::Graph graph_;
  const ir::GraphPlan plan_;
};

// The reference kernels on host tensors (the CPU device).
class ReferenceDevice final : public backends::Device {
 public:
  std::string name() const override { return "cpu"; }
  absl::StatusOr<std::unique_ptr<backends::Executable>> Compile(const ir::Graph& graph) override {
    return std::make_unique<ReferenceExecutable>(graph);
  }
  absl::StatusOr<backends::TensorHandle> Accumulate(const backends::TensorHandle& acc,
                                                    const backends::TensorHandle& grad) override {
    if (acc.on_device() || grad.on_device()) {
      return absl::InvalidArgumentError(absl::StrCat(name(), ": cannot accumulate device tensors it does not hold"));
    }
    absl::StatusOr<ir::HostTensor> sum = AccumulateGradient(acc.host(), grad.host());
    if (!sum.ok()) return sum.status();
    return backends::TensorHandle(*std::move(sum));
  }
};

}  // namespace

std::shared_ptr<backends::Device> CpuDevice() {
  static const auto* const device = new std::shared_ptr<backends::Device>(std::make_shared<ReferenceDevice>());
  return *device;
}

}  // namespace tandem::cpu
