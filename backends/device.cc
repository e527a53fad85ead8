#include "backends/device.h"

#include <map>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "ir/graph_builder.h"

namespace tandem::backends {

absl::Status Device::set_node_times(std::vector<double>*) {
  return absl::UnimplementedError(absl::StrCat(name(), " does not time nodes"));
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

absl::StatusOr<TensorHandle> ResidentDevice::Upload(const ir::HostTensor& tensor) {
  absl::StatusOr<DeviceTensor> device = CopyToDevice(*memory(), tensor, absl::Now() + wait_timeout_);
  if (!device.ok()) return device.status();
  return TensorHandle(*std::move(device));
}

absl::StatusOr<ir::HostTensor> ResidentDevice::Download(const TensorHandle& handle) {
  if (!handle.on_device()) return Device::Download(handle);
  return CopyToHost(*memory(), handle.device(), absl::Now() + wait_timeout_);
}

absl::StatusOr<TensorHandle> ResidentDevice::Accumulate(const TensorHandle& acc, const TensorHandle& grad) {
  if (!acc.defined() || !grad.defined() || acc.type() != grad.type()) {
    return absl::InvalidArgumentError(absl::StrCat(name(), ": accumulating tensors of different types"));
  }
  std::unique_ptr<Executable>& executable = accumulators_[ir::TypeToString(acc.type())];
  if (executable == nullptr) {
    ir::Graph graph;
    ir::GraphBuilder builder(&graph);
    const ir::ValueId a = builder.AddInput("acc", ir::InputRole::kAccumulator, acc.type(), {});
    const ir::ValueId g = builder.AddInput("grad", ir::InputRole::kGradient, acc.type(), {});
    graph.AddOutput("sum", builder.Add(ir::OpKind::kAdd, {a, g}, {}, {}));
    absl::StatusOr<std::unique_ptr<Executable>> compiled = Compile(graph);
    if (!compiled.ok()) return compiled.status();
    executable = *std::move(compiled);
  }
  absl::StatusOr<HandleMap> results = executable->Run({{"acc", acc}, {"grad", grad}});
  if (!results.ok()) return results.status();
  return results->at("sum");
}

}  // namespace tandem::backends
