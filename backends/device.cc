#include "backends/device.h"

#include <map>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "ir/graph_builder.h"

namespace tandem::backends {

absl::Status Device::set_node_times(std::vector<double>*) {
  return absl::UnimplementedError(absl::StrCat(name(), " does not time nodes"));
}

absl::StatusOr<TensorHandle> DeviceAccumulator::Accumulate(Device& device, const TensorHandle& acc,
                                                           const TensorHandle& grad) {
  if (!acc.defined() || !grad.defined() || acc.type() != grad.type()) {
    return absl::InvalidArgumentError(absl::StrCat(device.name(), ": accumulating tensors of different types"));
  }
  std::unique_ptr<Executable>& executable = executables_[ir::TypeToString(acc.type())];
  if (executable == nullptr) {
    ir::Graph graph;
    ir::GraphBuilder builder(&graph);
    const ir::ValueId a = builder.AddInput("acc", ir::InputRole::kAccumulator, acc.type(), {});
    const ir::ValueId g = builder.AddInput("grad", ir::InputRole::kGradient, acc.type(), {});
    graph.AddOutput("sum", builder.Add(ir::OpKind::kAdd, {a, g}, {}, {}));
    absl::StatusOr<std::unique_ptr<Executable>> compiled = device.Compile(graph);
    if (!compiled.ok()) return compiled.status();
    executable = *std::move(compiled);
  }
  absl::StatusOr<HandleMap> results = executable->Run({{"acc", acc}, {"grad", grad}});
  if (!results.ok()) return results.status();
  return results->at("sum");
}

absl::StatusOr<ir::HostTensor> Device::Download(const TensorHandle& handle) {
  if (handle.on_device()) {
    return absl::InvalidArgumentError(absl::StrCat(name(), ": cannot download a device tensor it does not hold"));
  }
  return handle.host();
}

absl::StatusOr<HandleMap> Device::Run(const ir::Graph& graph, const HandleMap& inputs) {
  absl::StatusOr<std::unique_ptr<Executable>> executable = Compile(graph);
  if (!executable.ok()) return executable.status();
  return (*executable)->Run(inputs);
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

}  // namespace tandem::backends
