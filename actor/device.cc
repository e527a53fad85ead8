#include "actor/device.h"

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "actor/fake_cuda_device.h"
#include "ir/graph_builder.h"

#ifdef TANDEM_WITH_CUDA
#include "actor/cuda/cuda_graph_runner.h"
#include "actor/cuda/cuda_runtime.h"
#endif

namespace tandem::actor {
namespace {

// A graph and its plan on the reference kernels, over host tensors.
class ReferenceExecutable final : public Executable {
 public:
  explicit ReferenceExecutable(const ir::Graph& graph) : graph_(graph), plan_(ir::PlanGraph(graph_)) {}
  absl::StatusOr<HandleMap> Run(const HandleMap& inputs) override {
    ir::TensorMap host_inputs;
    for (const auto& [input, handle] : inputs) {
      if (handle.on_device()) {
        return absl::InvalidArgumentError(absl::StrCat("cpu: input '", input, "' is a device tensor"));
      }
      host_inputs.emplace(input, handle.host());
    }
    absl::StatusOr<ir::TensorMap> results = ir::RunGraph(graph_, plan_, host_inputs);
    if (!results.ok()) return results.status();
    HandleMap outputs;
    for (auto& [output, tensor] : *results) outputs.emplace(output, std::move(tensor));
    return outputs;
  }

 private:
  const ir::Graph graph_;
  const ir::GraphPlan plan_;
};

// The reference kernels on host tensors (the CPU device).
class ReferenceDevice final : public Device {
 public:
  std::string name() const override { return "cpu"; }
  absl::StatusOr<std::unique_ptr<Executable>> Compile(const ir::Graph& graph) override {
    return std::make_unique<ReferenceExecutable>(graph);
  }
};

#ifdef TANDEM_WITH_CUDA
// The GPU: a device-resident Device over CudaGraphRunner, whose memory is
// every buffer's home and the data plane's.
class CudaDevice final : public Device {
  // A CudaExecutable of the device's runner, over device tensors.
  class Compiled final : public Executable {
   public:
    Compiled(std::string device, cuda::CudaGraphRunner* runner, std::unique_ptr<cuda::CudaExecutable> executable)
        : device_(std::move(device)), runner_(runner), executable_(std::move(executable)) {}
    absl::StatusOr<HandleMap> Run(const HandleMap& inputs) override {
      cuda::DeviceTensorMap device_inputs;
      for (const auto& [input, handle] : inputs) {
        if (!handle.on_device()) {
          return absl::InvalidArgumentError(absl::StrCat(device_, ": input '", input, "' is not a device tensor"));
        }
        device_inputs.emplace(input, handle.device());
      }
      absl::StatusOr<cuda::DeviceTensorMap> results = runner_->Run(*executable_, device_inputs);
      if (!results.ok()) return results.status();
      HandleMap outputs;
      for (auto& [output, tensor] : *results) {
        if (!tensor.defined()) {
          return absl::InternalError(absl::StrCat(device_, ": output '", output, "' was not computed"));
        }
        outputs.emplace(output, TensorHandle(std::move(tensor)));
      }
      return outputs;
    }

   private:
    const std::string device_;
    cuda::CudaGraphRunner* const runner_;
    const std::unique_ptr<cuda::CudaExecutable> executable_;
  };

 public:
  CudaDevice(DeviceSpec spec, std::unique_ptr<cuda::CudaGraphRunner> runner, absl::Duration wait_timeout)
      : spec_(spec), runner_(std::move(runner)), wait_timeout_(wait_timeout) {}
  std::string name() const override { return DeviceSpecName(spec_); }
  int cuda_ordinal() const override { return spec_.index; }
  DeviceMemory* memory() const override { return &runner_->memory(); }
  std::optional<int64_t> FreeBytes() const override {
    absl::StatusOr<int64_t> free = cuda::FreeBytes(spec_.index);
    return free.ok() ? std::optional<int64_t>(*free) : std::nullopt;
  }
  absl::Status set_node_times(std::vector<double>* node_ms) override {
    runner_->set_node_times(node_ms);
    return absl::OkStatus();
  }

  absl::StatusOr<std::unique_ptr<Executable>> Compile(const ir::Graph& graph) override {
    absl::StatusOr<std::unique_ptr<cuda::CudaExecutable>> compiled = runner_->Compile(graph);
    if (!compiled.ok()) return compiled.status();
    return std::make_unique<Compiled>(name(), runner_.get(), *std::move(compiled));
  }
  absl::StatusOr<TensorHandle> Upload(const ir::HostTensor& tensor) override {
    absl::StatusOr<DeviceTensor> device = CopyToDevice(runner_->memory(), tensor, absl::Now() + wait_timeout_);
    if (!device.ok()) return device.status();
    return TensorHandle(*std::move(device));
  }
  absl::StatusOr<ir::HostTensor> Download(const TensorHandle& handle) override {
    if (!handle.on_device()) return Device::Download(handle);
    return CopyToHost(runner_->memory(), handle.device(), absl::Now() + wait_timeout_);
  }
  absl::StatusOr<TensorHandle> Accumulate(const TensorHandle& acc, const TensorHandle& grad) override {
    return accumulator_.Accumulate(*this, acc, grad);
  }

 private:
  const DeviceSpec spec_;  // with the resolved index
  std::unique_ptr<cuda::CudaGraphRunner> runner_;
  const absl::Duration wait_timeout_;
  DeviceAccumulator accumulator_;
};

cuda::Precision RunnerPrecision(DeviceSpec::Precision precision) {
  switch (precision) {
    case DeviceSpec::Precision::kF32:
      return cuda::Precision::kF32;
    case DeviceSpec::Precision::kTf32:
      return cuda::Precision::kTf32;
    case DeviceSpec::Precision::kBf16:
      return cuda::Precision::kBf16;
  }
  return cuda::Precision::kF32;
}
#endif

}  // namespace

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

absl::StatusOr<TensorHandle> Device::Accumulate(const TensorHandle& acc, const TensorHandle& grad) {
  if (acc.on_device() || grad.on_device()) {
    return absl::InvalidArgumentError(absl::StrCat(name(), ": cannot accumulate device tensors it does not hold"));
  }
  absl::StatusOr<ir::HostTensor> sum = ir::AccumulateGradient(acc.host(), grad.host());
  if (!sum.ok()) return sum.status();
  return TensorHandle(*std::move(sum));
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
        cuda::CudaGraphRunner::Create({.device = resolved.index,
                                       .precision = RunnerPrecision(resolved.precision),
                                       .wait_timeout = options.wait_timeout});
    if (!runner.ok()) {
      return absl::Status(runner.status().code(), absl::StrCat("device ", DeviceSpecName(resolved), " for actor ",
                                                               actor, ": ", runner.status().message()));
    }
    return std::make_shared<CudaDevice>(resolved, *std::move(runner), options.wait_timeout);
  }
#endif
  return absl::Status(visible.code(),
                      absl::StrCat("device ", DeviceSpecName(spec), " for actor ", actor, ": ", visible.message()));
}

}  // namespace tandem::actor
