// Debugger: runs a pipeline's step task by task, pausing actors at
// breakpoints, for the controller REPL (`tandem repl`: break, continue,
// where, inspect).
//
// How it runs a step. Each actor's program is cut into its schedule tasks
// (ir::DispatchBounds). A task is ready when every task whose sends it
// receives has run. The debugger runs waves: every actor whose next task is
// ready runs it (Launcher::RunRanges, all of the wave at once), until every
// actor finished the step, or no actor can go on because some are paused.
// Because a task only runs once its inputs were sent, no actor ever blocks
// in a receive: an actor that waits for a paused one simply gets no work,
// so a pause may last as long as the person at the prompt likes, with no
// deadline running out. The losses and parameters are the same bits as a
// fused step's (the programs are the same; only the dispatch differs).
//
// Data-parallel replicas. Actor a runs its pipeline position's program as
// replica a / actors_per_replica. A task that starts an all-reduce (the one
// holding its stage's last backward) runs only together with the same task
// of every other replica of its group, in one wave: a collective whose
// members are all issued finishes within its timeout, so a replica paused
// at a breakpoint holds the others before their all-reduce instead of
// leaving them in it.
//
// Breakpoints name an actor (or every actor) and a task ("B2.0", Tandem's
// notation: kind, stage, '.', microbatch; "update" for the optimizer step).
// An actor pauses before a task with a breakpoint; Continue() lets every
// paused actor run that task and goes on to the next pause or the step's
// end. A breakpoint stays until deleted and pauses again in later steps.
//
// Borrows the Pipeline (which must outlive it; after the pipeline is
// replaced, e.g. by a new schedule, call Reset). Not thread-safe.
#ifndef TANDEM_CONTROLLER_DEBUGGER_H_
#define TANDEM_CONTROLLER_DEBUGGER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "controller/pipeline.h"
#include "ir/host_tensor.h"

namespace tandem::controller {

struct Breakpoint {
  int32_t id = 0;
  int32_t actor = -1;  // -1: every actor
  std::string task;    // "B2.0", "update"
};

// Where one actor stands in the step in progress.
struct ActorPosition {
  enum class State : uint8_t { kReady, kWaiting, kPaused, kDone };
  int32_t actor = 0;
  State state = State::kReady;
  int32_t next_task = 0;  // index into the actor's tasks
  int32_t num_tasks = 0;
  std::string task;        // the next task's name ("" when done)
  int32_t breakpoint = 0;  // kPaused: the breakpoint's id
  // kWaiting: the tasks (on other actors) whose sends it still needs, e.g.
  // {2, "B2.0"}, and the replicas that must run its task with it (an
  // all-reduce), e.g. {3, "B1.3"}.
  std::vector<std::pair<int32_t, std::string>> waits_for;
};

class Debugger {
 public:
  explicit Debugger(Pipeline* pipeline) { Reset(pipeline); }

  // Follows a new pipeline (after a recompile). Drops a step in progress;
  // keeps the breakpoints.
  void Reset(Pipeline* pipeline);

  // Adds a breakpoint; its id. InvalidArgument, saying where the task runs,
  // when the actor (or, for -1, no actor) runs no such task.
  absl::StatusOr<int32_t> AddBreakpoint(int32_t actor, const std::string& task);
  // NotFound for an unknown id.
  absl::Status DeleteBreakpoint(int32_t id);
  void DeleteAllBreakpoints() { breakpoints_.clear(); }
  const std::vector<Breakpoint>& breakpoints() const { return breakpoints_; }
  // Breakpoints that match no task of the current programs.
  std::vector<Breakpoint> UnmatchedBreakpoints() const;

  // Whether a step is in progress (paused).
  bool in_step() const { return step_.has_value(); }
  // FailedPrecondition ("step 3 is paused: continue it first") while a step
  // is in progress: what refuses work that needs a step boundary.
  absl::Status CheckNoStepInProgress() const;

  // Starts the next step on `microbatches` and runs it until a breakpoint
  // pauses an actor (nullopt) or the step ends (its report).
  // FailedPrecondition while a step is in progress.
  absl::StatusOr<std::optional<StepReport>> Start(const std::vector<ir::TensorMap>& microbatches);
  // Lets the paused actors go on; the same result as Start().
  // FailedPrecondition without a step in progress.
  absl::StatusOr<std::optional<StepReport>> Continue();

  // Every actor's position in the step in progress (empty without one).
  std::vector<ActorPosition> Where() const;
  // The step in progress, e.g. 3.
  int64_t step_number() const { return step_.has_value() ? step_->number : 0; }

  // The current tensor of buffer `name` on `actor` (Launcher::ReadBuffer).
  absl::StatusOr<ir::HostTensor> Inspect(int32_t actor, const std::string& name);

 private:
  // One schedule task of one actor's program.
  struct Task {
    std::string name;
    InstructionRange range;
    // The (actor, task index) whose sends this task receives.
    std::vector<std::pair<int32_t, int32_t>> needs;
    // The other replicas that must run this same task in the same wave
    // (it starts an all-reduce among them); empty for most tasks.
    std::vector<int32_t> gang;
  };
  struct StepState {
    int64_t number = 0;
    std::vector<ir::StepInputs> inputs;
    std::vector<int32_t> next;            // by actor: next task index
    std::vector<int32_t> paused;          // by actor: breakpoint id, 0 if not paused
    std::vector<bool> released;           // by actor: passes its current breakpoint
    std::vector<ir::StepOutputs> results;  // by actor, from its last task
  };

  // Whether the sends `actor`'s next task receives were all made.
  bool InputsArrived(const StepState& step, int32_t actor) const;
  // Whether a breakpoint not yet passed stops `actor` before its next task.
  bool HeldAtBreakpoint(const StepState& step, int32_t actor) const;
  // The gang members of `actor`'s next task that could not run it now.
  std::vector<int32_t> GangNotReady(const StepState& step, int32_t actor) const;
  bool Ready(const StepState& step, int32_t actor) const;
  // The breakpoint that stops `actor` before task `task`, or 0.
  int32_t BreakpointAt(int32_t actor, const std::string& task) const;
  absl::StatusOr<std::optional<StepReport>> Advance();

  Pipeline* pipeline_ = nullptr;
  std::vector<std::vector<Task>> tasks_;  // by actor
  std::vector<Breakpoint> breakpoints_;
  int32_t next_breakpoint_id_ = 1;
  std::optional<StepState> step_;
};

}  // namespace tandem::controller

#endif  // TANDEM_CONTROLLER_DEBUGGER_H_
