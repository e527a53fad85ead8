// What a training step hands an actor and what the actor hands back: the
// one definition that the controller's launchers, the actor's executor and
// service, and the control plane's codecs (rpc/step_codec.h) all use.
// Value types; not synchronized.
#ifndef TANDEM_IR_STEP_IO_H_
#define TANDEM_IR_STEP_IO_H_

#include <compare>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ir/host_tensor.h"

namespace tandem::ir {

// Which step input fills an actor's kInput buffer: its binding (a data
// input's name, or "step") and microbatch (-1 for per-step inputs such as
// "step").
struct InputKey {
  std::string binding;
  int32_t microbatch = -1;
  friend auto operator<=>(const InputKey&, const InputKey&) = default;
  friend bool operator==(const InputKey&, const InputKey&) = default;
};

// A step's inputs for an actor. An executor takes the entries its input
// buffers bind and ignores the rest, so one map may serve several actors.
using StepInputs = std::map<InputKey, HostTensor>;

// What a step emitted (kEmit), by name, then microbatch: results["loss"][3].
using StepResults = std::map<std::string, std::map<int32_t, HostTensor>>;

// When one instruction of an actor's program ran, relative to
// StepOutputs::origin_ns.
struct InstructionTiming {
  int32_t instruction = 0;
  int64_t start_ns = 0;
  int64_t duration_ns = 0;
  friend bool operator==(const InstructionTiming&, const InstructionTiming&) = default;
};

// What an actor reports after a step, or after a range of its program (then
// `results` hold what the range emitted).
struct StepOutputs {
  StepResults results;
  // The most bytes its buffers held at once, measured on the real tensors:
  // the rule of ActorProgram::static_peak_bytes.
  int64_t peak_live_bytes = 0;
  // On a device-resident actor, the device bytes its buffers took at most,
  // measured on the device memory's allocations; 0 elsewhere.
  int64_t device_peak_bytes = 0;
  // Every instruction that ran, in program order.
  std::vector<InstructionTiming> timings;
  // The zero of `timings`: when the step began on the actor, on its
  // monotonic clock (CLOCK_MONOTONIC nanoseconds, as std::chrono's
  // steady_clock): comparable between the actors of one host.
  int64_t origin_ns = 0;
  // What the actor spent on the step outside its instructions: taking its
  // inputs in (on a device, uploading them), before origin_ns; and settling
  // it after the last instruction (waiting for its device sends, its
  // deferred checks and its emitted results). 0 for a range that neither
  // begins nor ends the step.
  int64_t inputs_ns = 0;
  int64_t settle_ns = 0;
  // The dispatch calls these outputs took, as the launcher counted them: 1
  // for a fused step, one per task when dispatched per task.
  int32_t calls = 0;
};

}  // namespace tandem::ir

#endif  // TANDEM_IR_STEP_IO_H_
