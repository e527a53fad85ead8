#include "actor/executor.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "ir/all_reduce.h"

namespace tandem::actor {
namespace {

using ir::BufferId;
using ir::BufferKind;
using ir::HostTensor;
using ir::Instruction;
using ir::InstructionKind;

}  // namespace

int64_t Executor::SteadyNowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

absl::StatusOr<std::unique_ptr<Executor>> Executor::Create(ir::ActorProgram program,
                                                           std::shared_ptr<backends::Device> device, int32_t replica) {
  if (absl::Status status = ir::VerifyActorProgram(program); !status.ok()) return status;
  if (device == nullptr) return absl::InvalidArgumentError("Executor::Create: no device");
  if (replica < 0 || replica >= program.num_replicas) {
    return absl::InvalidArgumentError(absl::StrCat("replica ", replica, " of a program for ", program.num_replicas,
                                                   " replicas"));
  }
  std::unique_ptr<Executor> executor(new Executor(std::move(program), std::move(device), replica));
  for (const ir::Function& function : executor->program_.functions) {
    absl::StatusOr<std::unique_ptr<backends::Executable>> compiled = executor->device_->Compile(function.graph);
    if (!compiled.ok()) {
      return absl::Status(compiled.status().code(), absl::StrCat("function ", function.name, " on ",
                                                                 executor->device_->name(), ": ",
                                                                 compiled.status().message()));
    }
    executor->executables_.push_back(*std::move(compiled));
  }
  return executor;
}

Executor::Executor(ir::ActorProgram program, std::shared_ptr<backends::Device> device, int32_t replica)
    : program_(std::move(program)), device_(std::move(device)), replica_(replica), memory_(device_->memory()),
      buffers_(program_.buffers.size()) {
  if (memory_ != nullptr) {
    inputs_ = std::make_unique<InputStaging>(*memory_);
    emits_ = std::make_unique<EmitStaging>(*memory_);
    device_reduce_ = std::make_unique<DeviceAllReduce>(*device_);
  }
  device_->set_deferred_checks(true);  // settled at every step's end
  for (const ir::Function& function : program_.functions) {
    std::vector<std::string>& names = input_names_.emplace_back();
    for (ir::ValueId id : function.graph.Inputs()) {
      names.push_back(function.graph.node(id).attributes.GetString("name"));
    }
  }
}

Executor::~Executor() = default;

std::string Executor::BufferName(BufferId id) const {
  return absl::StrCat("buffer ", id, " (", program_.buffers[id].name, ")");
}

absl::StatusOr<HostTensor> Executor::ReadBuffer(const std::string& name) const {
  for (BufferId id = 0; id < static_cast<BufferId>(program_.buffers.size()); ++id) {
    const ir::Buffer& buffer = program_.buffers[id];
    if (buffer.name != name && !(buffer.kind == ir::BufferKind::kState && buffer.binding == name)) continue;
    if (!buffers_[id].defined()) {
      // Say when it does hold something: between the instruction that fills
      // it and the one that frees it.
      int32_t filled = -1, freed = -1;
      for (int32_t i = 0; i < static_cast<int32_t>(program_.instructions.size()); ++i) {
        const ir::Instruction& instruction = program_.instructions[i];
        const std::vector<BufferId>& written =
            instruction.kind == ir::InstructionKind::kRun ? instruction.outputs : instruction.buffers;
        const bool writes = instruction.kind == ir::InstructionKind::kRun ||
                            instruction.kind == ir::InstructionKind::kReceive ||
                            instruction.kind == ir::InstructionKind::kAccumulate;
        if (filled < 0 && writes && std::find(written.begin(), written.end(), id) != written.end()) filled = i;
        if (instruction.kind == ir::InstructionKind::kFree &&
            std::find(instruction.buffers.begin(), instruction.buffers.end(), id) != instruction.buffers.end()) {
          freed = i;
        }
      }
      const std::string where = phase_ == Phase::kInStep ? absl::StrCat("the actor is at instruction ", next_instruction_)
                                                         : "the actor is between steps";
      std::string when = "it is never filled";
      if (filled >= 0) {
        when = absl::StrCat("it lives from instruction ", filled, " (", program_.instructions[filled].task.ToString(),
                            ")");
        if (freed >= 0) absl::StrAppend(&when, " to instruction ", freed, " (", program_.instructions[freed].task.ToString(), ")");
      }
      return absl::FailedPreconditionError(absl::StrCat("actor ", program_.actor, ": buffer ", name,
                                                        " holds nothing now: ", when, "; ", where));
    }
    return device_->Download(buffers_[id]);
  }
  return absl::NotFoundError(absl::StrCat("actor ", program_.actor, " has no buffer named ", name));
}

absl::StatusOr<const backends::TensorHandle*> Executor::Read(BufferId id) const {
  if (!buffers_[id].defined()) return absl::InternalError(absl::StrCat(BufferName(id), " is empty"));
  return &buffers_[id];
}

absl::Status Executor::Write(BufferId id, backends::TensorHandle tensor) {
  const ir::TensorType& type = program_.buffers[id].type;
  if (!tensor.defined() || tensor.type() != type) {
    return absl::InternalError(absl::StrCat(BufferName(id), " is ", ir::TypeToString(type), " but got ",
                                            tensor.defined() ? ir::TypeToString(tensor.type()) : "no tensor"));
  }
  if (tensor.on_device() != (memory_ != nullptr)) {
    return absl::InternalError(absl::StrCat(BufferName(id), " got a ", tensor.on_device() ? "device" : "host",
                                            " tensor on ", device_->name()));
  }
  Release(id);
  live_bytes_ += tensor.num_bytes();
  buffers_[id] = std::move(tensor);
  return absl::OkStatus();
}

void Executor::Release(BufferId id) {
  if (!buffers_[id].defined()) return;
  live_bytes_ -= buffers_[id].num_bytes();
  buffers_[id] = backends::TensorHandle();
}

void Executor::ReleaseAll() {
  for (BufferId id = 0; id < static_cast<BufferId>(buffers_.size()); ++id) Release(id);
}

absl::Status Executor::LoadState(const ir::TensorMap& state) {
  if (phase_ == Phase::kInStep) return absl::FailedPreconditionError("LoadState inside a step");
  ReleaseAll();
  phase_ = Phase::kNeedsState;
  for (BufferId id = 0; id < static_cast<BufferId>(buffers_.size()); ++id) {
    const ir::Buffer& buffer = program_.buffers[id];
    if (buffer.kind != BufferKind::kState) continue;
    auto it = state.find(buffer.binding);
    if (it == state.end()) {
      ReleaseAll();
      return absl::InvalidArgumentError(
          absl::StrCat("actor ", actor(), ": no state tensor '", buffer.binding, "' for ", BufferName(id)));
    }
    if (it->second.type() != buffer.type) {
      ReleaseAll();
      return absl::InvalidArgumentError(absl::StrCat("actor ", actor(), ": state tensor '", buffer.binding,
                                                     "' is ", ir::TypeToString(it->second.type()), " but ",
                                                     BufferName(id), " is ", ir::TypeToString(buffer.type)));
    }
    absl::StatusOr<backends::TensorHandle> uploaded = device_->Upload(it->second);
    if (!uploaded.ok()) {
      ReleaseAll();
      return absl::Status(uploaded.status().code(), absl::StrCat("actor ", actor(), ": uploading state tensor '",
                                                                 buffer.binding, "': ", uploaded.status().message()));
    }
    live_bytes_ += it->second.num_bytes();
    buffers_[id] = *std::move(uploaded);
  }
  phase_ = Phase::kIdle;
  return absl::OkStatus();
}

absl::StatusOr<ir::TensorMap> Executor::State() const {
  ir::TensorMap state;
  for (BufferId id = 0; id < static_cast<BufferId>(buffers_.size()); ++id) {
    if (program_.buffers[id].kind == BufferKind::kState && buffers_[id].defined()) {
      absl::StatusOr<HostTensor> tensor = device_->Download(buffers_[id]);
      if (!tensor.ok()) {
        return absl::Status(tensor.status().code(), absl::StrCat("actor ", actor(), ": downloading state tensor '",
                                                                 program_.buffers[id].binding,
                                                                 "': ", tensor.status().message()));
      }
      state[program_.buffers[id].binding] = *std::move(tensor);
    }
  }
  return state;
}

bool Executor::HoldsState(const std::string& binding) const {
  return std::any_of(program_.buffers.begin(), program_.buffers.end(), [&binding](const ir::Buffer& buffer) {
    return buffer.kind == BufferKind::kState && buffer.binding == binding;
  });
}

void Executor::SampleDevicePeak() {
  if (memory_ == nullptr) return;
  outputs_.device_peak_bytes = std::max(outputs_.device_peak_bytes, memory_->allocated_bytes() - device_baseline_);
}

std::string Executor::InstructionContext(int32_t index) const {
  const Instruction& instruction = program_.instructions[index];
  std::string what = absl::StrCat(instruction.task.ToString(), " ", ir::InstructionKindName(instruction.kind));
  switch (instruction.kind) {
    case InstructionKind::kRun:
      absl::StrAppend(&what, " ", program_.functions[instruction.function].name);
      break;
    case InstructionKind::kSend:
      absl::StrAppend(&what, " -> actor ", Peer(instruction), " tag ", instruction.tag);
      break;
    case InstructionKind::kReceive:
      absl::StrAppend(&what, " <- actor ", Peer(instruction), " tag ", instruction.tag);
      break;
    case InstructionKind::kAccumulate:
      absl::StrAppend(&what, " ", program_.buffers[instruction.buffers[0]].name);
      break;
    case InstructionKind::kEmit:
      absl::StrAppend(&what, " ", instruction.result, "[", instruction.microbatch, "]");
      break;
    case InstructionKind::kFree:
      break;
    case InstructionKind::kAllReduceStart:
    case InstructionKind::kAllReduceWait: {
      absl::StrAppend(&what, " tag ", instruction.tag, ", replica ", replica_, " of ", DescribeGroup(instruction.group));
      break;
    }
    case InstructionKind::kFill:
      absl::StrAppend(&what, " ", program_.functions[instruction.function].name);
      break;
  }
  return absl::StrCat("actor ", actor(), ", step ", step_, ", instruction ", index, " (", what, "): ");
}

absl::Status Executor::Fail(absl::Status status) {
  // The state may be half-updated: keep it for inspection (State()), but
  // demand a LoadState before the next step.
  for (BufferId id = 0; id < static_cast<BufferId>(buffers_.size()); ++id) {
    if (program_.buffers[id].kind != BufferKind::kState) Release(id);
  }
  claimed_.clear();
  phase_ = Phase::kNeedsState;
  return status;
}

absl::Status Executor::RunRange(int32_t begin, int32_t end, Transport& transport, absl::Duration receive_timeout) {
  if (phase_ != Phase::kInStep) {
    return absl::FailedPreconditionError(absl::StrCat("actor ", actor(), ": RunRange outside a step"));
  }
  step_wait_ = receive_timeout;
  const auto size = static_cast<int32_t>(program_.instructions.size());
  if (begin != next_instruction_ || end < begin || end > size) {
    return absl::FailedPreconditionError(absl::StrCat("actor ", actor(), ", step ", step_, ": RunRange [",
                                                      begin, ", ", end, ") but the next instruction is ",
                                                      next_instruction_, " of ", size));
  }
  for (int32_t index = begin; index < end; ++index) {
    const int64_t start_ns = SteadyNowNs();
    absl::Status status = Execute(index, transport, receive_timeout);
    last_instruction_end_ns_ = SteadyNowNs();
    outputs_.timings.push_back({index, start_ns - outputs_.origin_ns, last_instruction_end_ns_ - start_ns});
    if (!status.ok()) {
      return Fail(absl::Status(status.code(), absl::StrCat(InstructionContext(index), status.message())));
    }
    outputs_.peak_live_bytes = std::max(outputs_.peak_live_bytes, live_bytes_);
    SampleDevicePeak();
    next_instruction_ = index + 1;
  }
  return absl::OkStatus();
}

absl::Status Executor::Execute(int32_t index, Transport& transport, absl::Duration receive_timeout) {
  const Instruction& instruction = program_.instructions[index];
  switch (instruction.kind) {
    case InstructionKind::kRun:
      return Run(index);
    case InstructionKind::kSend: {
      std::vector<backends::TensorHandle> tensors;
      tensors.reserve(instruction.buffers.size());
      for (BufferId id : instruction.buffers) {
        absl::StatusOr<const backends::TensorHandle*> tensor = Read(id);
        if (!tensor.ok()) return tensor.status();
        tensors.push_back(**tensor);
      }
      return SendHandles(transport, Peer(instruction), instruction.tag, std::move(tensors));
    }
    case InstructionKind::kReceive:
      return Receive(instruction, transport, receive_timeout);
    case InstructionKind::kAccumulate:
      return Accumulate(instruction);
    case InstructionKind::kFree:
      for (BufferId id : instruction.buffers) {
        if (!buffers_[id].defined()) return absl::InternalError(absl::StrCat("frees ", BufferName(id), ", which is empty"));
        Release(id);
      }
      return absl::OkStatus();
    case InstructionKind::kEmit:
      return Emit(instruction);
    case InstructionKind::kAllReduceStart:
      return AllReduceStart(index, transport, receive_timeout);
    case InstructionKind::kAllReduceWait:
      return AllReduceWait(instruction, transport, receive_timeout);
    case InstructionKind::kFill:
      return Fill(index, transport);
  }
  return absl::InternalError("unknown instruction kind");
}

absl::Status Executor::Run(int32_t index) {
  const Instruction& instruction = program_.instructions[index];
  const ir::Function& function = program_.functions[instruction.function];
  const std::vector<std::string>& names = input_names_[instruction.function];
  backends::HandleMap inputs;
  for (size_t k = 0; k < names.size(); ++k) {
    absl::StatusOr<const backends::TensorHandle*> tensor = Read(instruction.inputs[k]);
    if (!tensor.ok()) return tensor.status();
    inputs.emplace(names[k], **tensor);
  }
  run_instructions_.push_back(index);
  absl::StatusOr<backends::HandleMap> results = executables_[instruction.function]->Run(inputs);
  if (!results.ok()) return results.status();
  const std::vector<ir::GraphOutput>& outputs = function.graph.outputs();
  for (size_t k = 0; k < outputs.size(); ++k) {
    auto it = results->find(outputs[k].name);
    if (it == results->end()) {
      return absl::InternalError(absl::StrCat(function.name, " returned no output '", outputs[k].name, "'"));
    }
    if (absl::Status status = Write(instruction.outputs[k], it->second); !status.ok()) return status;
  }
  return absl::OkStatus();
}

absl::Status Executor::Receive(const Instruction& instruction, Transport& transport,
                               absl::Duration receive_timeout) {
  absl::StatusOr<std::vector<backends::TensorHandle>> tensors;
  auto claimed = claimed_.find({Peer(instruction), instruction.tag});
  if (claimed != claimed_.end()) {
    tensors = std::move(claimed->second);
    claimed_.erase(claimed);
  } else {
    tensors = ReceiveHandles(transport, Peer(instruction), instruction.tag, absl::Now() + receive_timeout);
  }
  if (!tensors.ok()) return tensors.status();
  if (tensors->size() != instruction.buffers.size()) {
    return absl::InvalidArgumentError(absl::StrCat("the message from actor ", Peer(instruction), " with tag ",
                                                   instruction.tag, " has ", tensors->size(), " tensors, expected ",
                                                   instruction.buffers.size()));
  }
  for (size_t k = 0; k < tensors->size(); ++k) {
    const BufferId id = instruction.buffers[k];
    const backends::TensorHandle& tensor = (*tensors)[k];
    if (!tensor.defined() || tensor.type() != program_.buffers[id].type) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor ", k, " of the message from actor ", Peer(instruction), " with tag ", instruction.tag, " is ",
          tensor.defined() ? ir::TypeToString(tensor.type()) : "missing", " but ", BufferName(id), " is ",
          ir::TypeToString(program_.buffers[id].type)));
    }
  }
  for (size_t k = 0; k < tensors->size(); ++k) {
    if (absl::Status status = Write(instruction.buffers[k], std::move((*tensors)[k])); !status.ok()) return status;
  }
  return absl::OkStatus();
}

absl::Status Executor::Accumulate(const Instruction& instruction) {
  const BufferId acc = instruction.buffers[0];
  const BufferId grad = instruction.buffers[1];
  absl::StatusOr<const backends::TensorHandle*> gradient = Read(grad);
  if (!gradient.ok()) return gradient.status();
  backends::TensorHandle sum = **gradient;
  if (buffers_[acc].defined()) {
    absl::StatusOr<backends::TensorHandle> added = device_->Accumulate(buffers_[acc], **gradient);
    if (!added.ok()) {
      return absl::Status(added.status().code(),
                          absl::StrCat("accumulating into ", BufferName(acc), ": ", added.status().message()));
    }
    sum = *std::move(added);
  }
  Release(grad);
  return Write(acc, std::move(sum));
}

absl::Status Executor::SendHandles(Transport& transport, int32_t peer, uint64_t tag,
                                   std::vector<backends::TensorHandle> tensors) {
  if (memory_ == nullptr) {
    std::vector<HostTensor> host;
    host.reserve(tensors.size());
    for (const backends::TensorHandle& tensor : tensors) host.push_back(tensor.host());
    return transport.Send(peer, tag, std::move(host));
  }
  std::vector<backends::DeviceTensor> device;
  device.reserve(tensors.size());
  for (const backends::TensorHandle& tensor : tensors) device.push_back(tensor.device());
  return transport.SendDevice(peer, tag, std::move(device));
}

absl::StatusOr<std::vector<backends::TensorHandle>> Executor::ReceiveHandles(Transport& transport, int32_t peer,
                                                                             uint64_t tag, absl::Time deadline) {
  std::vector<backends::TensorHandle> handles;
  if (memory_ == nullptr) {
    absl::StatusOr<std::vector<HostTensor>> host = transport.Receive(peer, tag, deadline);
    if (!host.ok()) return host.status();
    for (HostTensor& tensor : *host) handles.emplace_back(std::move(tensor));
  } else {
    absl::StatusOr<std::vector<backends::DeviceTensor>> device = transport.ReceiveDevice(peer, tag, deadline);
    if (!device.ok()) return device.status();
    for (backends::DeviceTensor& tensor : *device) handles.emplace_back(std::move(tensor));
  }
  return handles;
}

absl::Status Executor::Emit(const Instruction& instruction) {
  absl::StatusOr<const backends::TensorHandle*> tensor = Read(instruction.buffers[0]);
  if (!tensor.ok()) return tensor.status();
  return Report(instruction, **tensor);
}

absl::Status Executor::Report(const Instruction& instruction, const backends::TensorHandle& tensor) {
  if (tensor.on_device() && emits_ != nullptr) {
    // Copied into pinned staging on the stream; FinishStep collects it.
    return emits_->Stage(instruction.result, instruction.microbatch, tensor.device());
  }
  absl::StatusOr<HostTensor> host = device_->Download(tensor);
  if (!host.ok()) return host.status();
  auto [it, inserted] = outputs_.results[instruction.result].emplace(instruction.microbatch, *std::move(host));
  if (!inserted) {
    return absl::InternalError(
        absl::StrCat("result '", instruction.result, "' of microbatch ", instruction.microbatch, " emitted twice"));
  }
  return absl::OkStatus();
}

absl::Status Executor::Fill(int32_t index, Transport& transport) {
  const Instruction& instruction = program_.instructions[index];
  bool skip = false;
  if (instruction.peer >= 0) {
    const std::pair<int32_t, uint64_t> key{Peer(instruction), instruction.tag};
    if (claimed_.count(key) > 0) {
      skip = true;
    } else {
      // A deadline already past: the message if it is there, at once.
      absl::StatusOr<std::vector<backends::TensorHandle>> arrived =
          ReceiveHandles(transport, key.first, key.second, absl::InfinitePast());
      if (arrived.ok()) {
        claimed_.emplace(key, *std::move(arrived));
        skip = true;
      } else if (!absl::IsDeadlineExceeded(arrived.status())) {
        return arrived.status();
      }
    }
  }
  if (!skip) {
    if (absl::Status status = Run(index); !status.ok()) return status;
    outputs_.peak_live_bytes = std::max(outputs_.peak_live_bytes, live_bytes_);
    SampleDevicePeak();
    if (absl::Status status = Report(instruction, buffers_[instruction.outputs[0]]); !status.ok()) return status;
    // Its state outputs (a training piece's) stay: they are the job's state.
    for (BufferId id : instruction.outputs) {
      if (program_.buffers[id].kind != BufferKind::kState) Release(id);
    }
  }
  for (BufferId id : instruction.buffers) Release(id);
  return absl::OkStatus();
}

int64_t Executor::StagingBytes(const Instruction& instruction) const {
  int64_t elements = 0;
  for (BufferId id : instruction.buffers) elements += program_.buffers[id].type.num_elements();
  return ir::AllReduceStagingBytes(elements, static_cast<int32_t>(instruction.group.size()));
}

absl::Status Executor::AllReduceStart(int32_t index, Transport& transport, absl::Duration receive_timeout) {
  const Instruction& instruction = program_.instructions[index];
  if (absl::Status status = memory_ != nullptr ? StartOnDevice(instruction, transport)
                                               : StartOnReducer(instruction, receive_timeout);
      !status.ok()) {
    return status;
  }
  live_bytes_ += StagingBytes(instruction);
  // RunRange appends this instruction's timing next; a Reducer's wait
  // rewrites it with the reduction's span.
  reducing_[instruction.tag] = outputs_.timings.size();
  return absl::OkStatus();
}

absl::Status Executor::StartOnDevice(const Instruction& instruction, Transport& transport) {
  // Device-resident gradients are reduced on the device, over the data
  // plane (device_all_reduce.h): no replica group, no host copies.
  std::vector<backends::DeviceTensor> bucket;
  for (BufferId id : instruction.buffers) {
    absl::StatusOr<const backends::TensorHandle*> handle = Read(id);
    if (!handle.ok()) return handle.status();
    bucket.push_back((*handle)->device());
  }
  return device_reduce_->Start(transport, instruction.tag, instruction.group, transport.actor(), bucket);
}

absl::Status Executor::StartOnReducer(const Instruction& instruction, absl::Duration receive_timeout) {
  if (reducer_ == nullptr) {
    return absl::FailedPreconditionError("the program all-reduces gradients but this actor has no replica group");
  }
  if (reducer_->group().actors() != instruction.group) {
    return absl::FailedPreconditionError(absl::StrCat("the program reduces over ", DescribeGroup(instruction.group),
                                                      " but this actor joined ",
                                                      DescribeGroup(reducer_->group().actors())));
  }
  // The bucket: the buffers' elements, concatenated in order.
  int64_t elements = 0;
  for (BufferId id : instruction.buffers) elements += program_.buffers[id].type.num_elements();
  std::vector<float> bucket;
  bucket.reserve(static_cast<size_t>(elements));
  for (BufferId id : instruction.buffers) {
    absl::StatusOr<const backends::TensorHandle*> handle = Read(id);
    if (!handle.ok()) return handle.status();
    absl::StatusOr<HostTensor> tensor = device_->Download(**handle);
    if (!tensor.ok()) return tensor.status();
    const float* data = tensor->f32();
    bucket.insert(bucket.end(), data, data + tensor->num_elements());
  }
  return reducer_->Start(instruction.tag, std::move(bucket), receive_timeout);
}

absl::Status Executor::AllReduceWait(const Instruction& instruction, Transport& transport,
                                     absl::Duration receive_timeout) {
  if (memory_ != nullptr) {
    absl::StatusOr<std::vector<backends::DeviceTensor>> reduced =
        device_reduce_->Finish(transport, instruction.tag, absl::Now() + receive_timeout);
    if (!reduced.ok()) return reduced.status();
    for (size_t k = 0; k < instruction.buffers.size(); ++k) {
      if (absl::Status status = Write(instruction.buffers[k], backends::TensorHandle((*reduced)[k])); !status.ok()) {
        return status;
      }
    }
    live_bytes_ -= StagingBytes(instruction);
    // Its timing is the start instruction's own (issued there, on the data
    // plane's streams since).
    reducing_.erase(instruction.tag);
    return absl::OkStatus();
  }
  if (reducer_ == nullptr) return absl::FailedPreconditionError("this actor has no replica group");
  absl::StatusOr<Reducer::Result> result = reducer_->Wait(instruction.tag, absl::Now() + receive_timeout);
  if (!result.ok()) return result.status();
  size_t offset = 0;
  for (BufferId id : instruction.buffers) {
    absl::StatusOr<HostTensor> tensor = HostTensor::Allocate(program_.buffers[id].type);
    if (!tensor.ok()) return tensor.status();
    const auto count = static_cast<size_t>(tensor->num_elements());
    std::copy_n(result->bucket.data() + offset, count, tensor->f32());
    offset += count;
    absl::StatusOr<backends::TensorHandle> uploaded = device_->Upload(*tensor);
    if (!uploaded.ok()) return uploaded.status();
    if (absl::Status status = Write(id, *std::move(uploaded)); !status.ok()) return status;
  }
  live_bytes_ -= StagingBytes(instruction);
  auto started = reducing_.find(instruction.tag);
  if (started != reducing_.end()) {
    if (started->second < outputs_.timings.size()) {
      ir::InstructionTiming& timing = outputs_.timings[started->second];
      timing.start_ns = result->issued_ns - outputs_.origin_ns;
      timing.duration_ns = result->end_ns - result->issued_ns;
    }
    reducing_.erase(started);
  }
  return absl::OkStatus();
}

}  // namespace tandem::actor
