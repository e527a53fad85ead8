// Executor's step boundaries (executor.h): BeginStep takes the step's
// inputs, FinishStep checks what the step left, settles what the device
// deferred (its checks, its emitted results) and hands the outputs over.
#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "actor/executor.h"

namespace tandem::actor {

using ir::BufferId;
using ir::BufferKind;

absl::Status Executor::BeginStep(int64_t step, const ir::StepInputs& inputs) {
  const int64_t begun_ns = SteadyNowNs();
  if (phase_ == Phase::kNeedsState) {
    return absl::FailedPreconditionError(
        absl::StrCat("actor ", actor(), ": step ", step, " needs LoadState first (no state, or a step failed)"));
  }
  if (phase_ == Phase::kInStep) {
    return absl::FailedPreconditionError(
        absl::StrCat("actor ", actor(), ": step ", step, " begun while step ", step_, " is running"));
  }
  // The step's inputs, by buffer, all checked before any is uploaded.
  std::vector<BufferId> ids;
  std::vector<const ir::HostTensor*> tensors;
  for (BufferId id = 0; id < static_cast<BufferId>(buffers_.size()); ++id) {
    const ir::Buffer& buffer = program_.buffers[id];
    if (buffer.kind != BufferKind::kInput) continue;
    auto it = inputs.find(ir::InputKey{buffer.binding, buffer.microbatch});
    if (it == inputs.end()) {
      return absl::InvalidArgumentError(absl::StrCat("actor ", actor(), ", step ", step, ": no input '", buffer.binding,
                                                     "' for microbatch ", buffer.microbatch, " for ", BufferName(id)));
    }
    if (it->second.type() != buffer.type) {
      return absl::InvalidArgumentError(absl::StrCat(
          "actor ", actor(), ", step ", step, ": input '", buffer.binding, "' of microbatch ", buffer.microbatch,
          " is ", ir::TypeToString(it->second.type()), " but ", BufferName(id), " is ", ir::TypeToString(buffer.type)));
    }
    ids.push_back(id);
    tensors.push_back(&it->second);
  }
  std::vector<backends::TensorHandle> uploaded;
  uploaded.reserve(tensors.size());
  if (inputs_ != nullptr) {
    absl::StatusOr<std::vector<backends::DeviceTensor>> staged = inputs_->Upload(tensors, absl::Now() + step_wait_);
    if (!staged.ok()) {
      return absl::Status(staged.status().code(), absl::StrCat("actor ", actor(), ", step ", step,
                                                               ": uploading its inputs: ", staged.status().message()));
    }
    for (backends::DeviceTensor& tensor : *staged) uploaded.emplace_back(std::move(tensor));
  } else {
    for (size_t k = 0; k < tensors.size(); ++k) {
      absl::StatusOr<backends::TensorHandle> handle = device_->Upload(*tensors[k]);
      if (!handle.ok()) {
        return absl::Status(handle.status().code(),
                            absl::StrCat("actor ", actor(), ", step ", step, ": uploading input '",
                                         program_.buffers[ids[k]].binding, "': ", handle.status().message()));
      }
      uploaded.push_back(*std::move(handle));
    }
  }
  for (size_t k = 0; k < ids.size(); ++k) {
    live_bytes_ += tensors[k]->num_bytes();
    buffers_[ids[k]] = std::move(uploaded[k]);
  }
  phase_ = Phase::kInStep;
  next_instruction_ = 0;
  step_ = step;
  outputs_ = ir::StepOutputs();
  if (emits_ != nullptr) emits_->Discard();  // what a failed step left
  if (!run_instructions_.empty()) {
    // A failed step's deferred checks: its error was reported already.
    device_->SettleRuns(absl::Now() + step_wait_).IgnoreError();
    run_instructions_.clear();
  }
  reducing_.clear();
  claimed_.clear();
  outputs_.origin_ns = SteadyNowNs();
  outputs_.inputs_ns = outputs_.origin_ns - begun_ns;
  last_instruction_end_ns_ = outputs_.origin_ns;
  outputs_.timings.reserve(program_.instructions.size());
  outputs_.peak_live_bytes = live_bytes_;
  if (memory_ != nullptr) {
    device_baseline_ = memory_->allocated_bytes() - live_bytes_;
    outputs_.device_peak_bytes = live_bytes_;
  }
  return absl::OkStatus();
}

absl::StatusOr<ir::StepOutputs> Executor::FinishStep() {
  if (phase_ != Phase::kInStep) {
    return absl::FailedPreconditionError(absl::StrCat("actor ", actor(), ": FinishStep outside a step"));
  }
  const auto size = static_cast<int32_t>(program_.instructions.size());
  if (next_instruction_ != size) {
    return absl::FailedPreconditionError(absl::StrCat("actor ", actor(), ", step ", step_,
                                                      ": FinishStep after ", next_instruction_, " of ", size,
                                                      " instructions"));
  }
  for (BufferId id = 0; id < static_cast<BufferId>(buffers_.size()); ++id) {
    if (program_.buffers[id].kind == BufferKind::kTemporary && buffers_[id].defined()) {
      return Fail(absl::InternalError(absl::StrCat("actor ", actor(), ", step ", step_,
                                                   ": temporary ", BufferName(id), " still holds a tensor at the end of the step")));
    }
    if (program_.buffers[id].kind == BufferKind::kInput) Release(id);
  }
  if (!claimed_.empty()) {
    return Fail(absl::InternalError(absl::StrCat("actor ", actor(), ", step ", step_, ": the message from actor ",
                                                 claimed_.begin()->first.first, " with tag ",
                                                 claimed_.begin()->first.second,
                                                 " was claimed for a receive that never came")));
  }
  if (!run_instructions_.empty()) {
    // The checks the device left to the step's end (CUDA's range checks),
    // named by the instruction whose run failed.
    absl::StatusOr<std::optional<backends::DeferredFailure>> failure =
        device_->SettleRuns(absl::Now() + step_wait_);
    std::vector<int32_t> runs = std::move(run_instructions_);
    run_instructions_.clear();
    if (!failure.ok()) {
      return Fail(absl::Status(failure.status().code(), absl::StrCat("actor ", actor(), ", step ", step_,
                                                                     ", settling its runs: ",
                                                                     failure.status().message())));
    }
    if (failure->has_value()) {
      const backends::DeferredFailure& failed = **failure;
      const std::string where = failed.run >= 0 && failed.run < static_cast<int64_t>(runs.size())
                                    ? InstructionContext(runs[static_cast<size_t>(failed.run)])
                                    : absl::StrCat("actor ", actor(), ", step ", step_, ", run ", failed.run, ": ");
      return Fail(absl::Status(failed.status.code(),
                               absl::StrCat(where, failed.status.message(), " (found at the step's end)")));
    }
  }
  if (emits_ != nullptr) {
    // The step's one wait for the device: its emitted results.
    absl::StatusOr<std::vector<EmitStaging::Result>> emitted = emits_->Collect(absl::Now() + step_wait_);
    if (!emitted.ok()) {
      return Fail(absl::Status(emitted.status().code(), absl::StrCat("actor ", actor(), ", step ", step_,
                                                                     ", collecting its emitted results: ",
                                                                     emitted.status().message())));
    }
    for (EmitStaging::Result& result : *emitted) {
      outputs_.results[result.result].emplace(result.microbatch, std::move(result.tensor));
    }
  }
  phase_ = Phase::kIdle;
  outputs_.settle_ns = SteadyNowNs() - last_instruction_end_ns_;
  return std::move(outputs_);
}

absl::StatusOr<ir::StepOutputs> Executor::RunStep(int64_t step, const ir::StepInputs& inputs, Transport& transport,
                                              absl::Duration receive_timeout) {
  if (absl::Status status = BeginStep(step, inputs); !status.ok()) return status;
  const auto size = static_cast<int32_t>(program_.instructions.size());
  if (absl::Status status = RunRange(0, size, transport, receive_timeout); !status.ok()) return status;
  // Nothing of this step stays held by the data plane into the next.
  if (absl::Status status = transport.SettleDeviceSends(absl::Now() + receive_timeout); !status.ok()) {
    return Fail(absl::Status(status.code(), absl::StrCat("actor ", actor(), ", step ", step_,
                                                         ", settling its device sends: ", status.message())));
  }
  return FinishStep();
}

}  // namespace tandem::actor
