#include "backends/fake/fake_cuda_device.h"

#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "backends/cpu/interpreter.h"
#include "ir/graph_plan.h"

namespace tandem::fake {

absl::StatusOr<FakeCudaFaults> ParseFakeCudaFaults(absl::string_view fault, int32_t actor) {
  FakeCudaFaults faults;
  absl::string_view rest = fault;
  int64_t* target = nullptr;
  if (absl::ConsumePrefix(&rest, "fake-cuda-poison:")) {
    target = &faults.poison_at_run;
  } else if (absl::ConsumePrefix(&rest, "fake-cuda-die:")) {
    target = &faults.die_at_send;
  } else if (absl::ConsumePrefix(&rest, "fake-cuda-free:")) {
    target = &faults.free_bytes;
  } else {
    return faults;
  }
  const std::vector<absl::string_view> fields = absl::StrSplit(rest, ':');
  int32_t faulty_actor = -1;
  int64_t count = 0;
  if (fields.size() != 2 || !absl::SimpleAtoi(fields[0], &faulty_actor) || !absl::SimpleAtoi(fields[1], &count) ||
      faulty_actor < 0 || count < 1) {
    return absl::InvalidArgumentError(absl::StrCat("TANDEM_FAULT=", fault,
                                                   ": expected fake-cuda-poison:ACTOR:N, fake-cuda-die:ACTOR:N or "
                                                   "fake-cuda-free:ACTOR:BYTES with ACTOR >= 0 and N, BYTES >= 1"));
  }
  if (faulty_actor == actor) *target = count;
  return faults;
}

absl::StatusOr<std::shared_ptr<FakeCudaDevice>> FakeCudaDevice::Create(Options options) {
  absl::StatusOr<std::unique_ptr<FakeDeviceMemory>> memory = FakeDeviceMemory::Create(options.memory);
  if (!memory.ok()) return memory.status();
  return std::shared_ptr<FakeCudaDevice>(new FakeCudaDevice(options, *std::move(memory)));
}

class FakeCudaDevice::Compiled final : public backends::Executable {
 public:
  Compiled(FakeCudaDevice* device, const ir::Graph& graph)
      : device_(device), graph_(graph), plan_(ir::PlanGraph(graph_)) {}
  absl::StatusOr<backends::HandleMap> Run(const backends::HandleMap& inputs) override {
    return device_->RunPlanned(graph_, plan_, inputs);
  }

 private:
  FakeCudaDevice* const device_;
  const ir::Graph graph_;
  const ir::GraphPlan plan_;
};

absl::StatusOr<std::unique_ptr<backends::Executable>> FakeCudaDevice::Compile(const ir::Graph& graph) {
  return std::make_unique<Compiled>(this, graph);
}

absl::StatusOr<backends::HandleMap> FakeCudaDevice::RunPlanned(const ir::Graph& graph, const ir::GraphPlan& plan,
                                                               const backends::HandleMap& inputs) {
  ++runs_;
  if (runs_ == options_.poison_at_run) {
    memory_->Poison(absl::InternalError(
        absl::StrCat("injected fault (TANDEM_FAULT): the kernel of function call ", runs_, " faulted")));
  }
  // The inputs' bytes are those of the stream's earlier work (a receive's
  // copies, the producer's uploads): the kernels run after it, as a kernel
  // launched on the stream would.
  if (absl::Status status = memory_->SynchronizeStream(absl::Now() + options_.wait_timeout); !status.ok()) {
    return status;
  }
  ir::TensorMap host_inputs;
  for (const auto& [name, handle] : inputs) {
    if (!handle.on_device() || &handle.device().storage->memory() != memory_.get()) {
      return absl::InvalidArgumentError(absl::StrCat("fake-cuda: input '", name, "' is not in this device's memory"));
    }
    // The kernels read the device memory in place: a host view that keeps
    // the allocation alive.
    const backends::DeviceTensor& tensor = handle.device();
    std::shared_ptr<std::byte[]> view(tensor.storage, reinterpret_cast<std::byte*>(tensor.address()));
    host_inputs.emplace(name, ir::HostTensor::Borrow(tensor.type, std::move(view)));
  }
  absl::StatusOr<ir::TensorMap> results = cpu::RunGraph(graph, plan, host_inputs);
  if (!results.ok()) return results.status();
  backends::HandleMap outputs;
  for (auto& [name, tensor] : *results) {
    absl::StatusOr<backends::TensorHandle> uploaded = Upload(tensor);
    if (!uploaded.ok()) return uploaded.status();
    outputs.emplace(name, *std::move(uploaded));
  }
  return outputs;
}

}  // namespace tandem::fake
