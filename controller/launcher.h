// Launcher: how the driver reaches its actors, whatever they are (threads in
// this process now; processes on this host or across hosts with the runtime).
#ifndef TANDEM_CONTROLLER_LAUNCHER_H_
#define TANDEM_CONTROLLER_LAUNCHER_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "ir/actor_program.h"
#include "ir/interpreter.h"

namespace tandem::controller {

// One actor's inputs for a step, by (binding, microbatch): the microbatches'
// data and labels it uses, and ("step", -1).
using ActorInputs = std::map<std::pair<std::string, int32_t>, ir::HostTensor>;

// When one instruction of an actor's program ran, relative to the actor's
// ActorStepResult::origin_ns.
struct InstructionTime {
  int32_t instruction = 0;
  int64_t start_ns = 0;
  int64_t duration_ns = 0;
};

// What one actor reports after a step.
struct ActorStepResult {
  // Emitted results by name and microbatch, e.g. results["loss"][3].
  std::map<std::string, std::map<int32_t, ir::HostTensor>> results;
  int64_t peak_live_bytes = 0;  // measured over the step's buffers
  // Every instruction that ran, in program order.
  std::vector<InstructionTime> timings;
  // The zero of `timings` on the actor's monotonic clock (CLOCK_MONOTONIC,
  // nanoseconds): comparable between the actors of one host.
  int64_t origin_ns = 0;
};

// One state file an actor wrote (Launcher::SaveState).
struct SavedStateFile {
  std::string path;
  uint64_t bytes = 0;
  std::string checksum;  // ir::StateChecksum of the file
};

// Instructions [begin, end) of an actor's program.
struct InstructionRange {
  int32_t begin = 0;
  int32_t end = 0;
};

// How dispatches are cut: the whole step in one call per actor, or one call
// per schedule task (only to measure what fusion saves).
enum class Dispatch : uint8_t { kFused, kPerTask };

// Starts actors and runs steps on them. Implementations say which threads
// they use; calls come from one controller thread, one at a time.
class Launcher {
 public:
  virtual ~Launcher() = default;
  // Hands each actor its program (cached under its hash) and first state.
  virtual absl::Status Start(const std::vector<ir::ActorProgram>& programs,
                             const std::vector<ir::TensorMap>& states) = 0;
  // Runs one step on every actor; returns when all are done, or the first
  // error naming the actor, the instruction and the step.
  virtual absl::StatusOr<std::vector<ActorStepResult>> RunStep(int64_t step, const std::vector<ActorInputs>& inputs,
                                                               Dispatch dispatch) = 0;
  // Debugging (controller/debugger.h): runs instructions [begin, end) of
  // each listed actor's program within step `step`, all listed actors at
  // once, and returns when all are done. Ranges of one actor follow each
  // other in program order; its first (begin 0) carries inputs[actor], and
  // the one that ends its program returns its step's results (the others
  // return empty ones).
  virtual absl::StatusOr<std::map<int32_t, ActorStepResult>> RunRanges(
      int64_t step, const std::map<int32_t, InstructionRange>& ranges, const std::vector<ActorInputs>& inputs) = 0;
  // Debugging: the current tensor of buffer `name` (a state binding or any
  // buffer of the program, e.g. "%26@0") on `actor`, between steps or
  // between RunRanges calls. NotFound for no such buffer,
  // FailedPrecondition for one that holds nothing now.
  virtual absl::StatusOr<ir::HostTensor> ReadBuffer(int32_t actor, const std::string& name) = 0;
  // Where an actor runs, for people: "pid 1234", "thread".
  virtual std::string DescribeActor(int32_t actor) const = 0;
  // Each actor's state tensors by name.
  virtual absl::StatusOr<std::vector<ir::TensorMap>> ReadState() = 0;
  // Writes each actor's state to paths[actor] as a state file
  // (ir/state_file.h), atomically. Launchers whose actors can reach the
  // files write them there (no state crosses the control plane); this
  // default reads the state and writes the files from the controller.
  virtual absl::StatusOr<std::vector<SavedStateFile>> SaveState(const std::vector<std::string>& paths);
};

}  // namespace tandem::controller

#endif  // TANDEM_CONTROLLER_LAUNCHER_H_
