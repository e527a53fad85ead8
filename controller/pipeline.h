// Pipeline: the driver of a compiled training step on a set of actors.
//
// It compiles once, starts the actors through a Launcher with their share of
// the state, and then runs steps: it routes each microbatch's data to the
// actors that use it and collects the losses. Owns the launcher. Not
// thread-safe: one controller thread drives it.
#ifndef TANDEM_CONTROLLER_PIPELINE_H_
#define TANDEM_CONTROLLER_PIPELINE_H_

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "controller/compiler.h"
#include "controller/fill.h"
#include "controller/launcher.h"
#include "ir/host_tensor.h"
#include "ir/state_source.h"
#include "ir/train_step.h"
#include "schedules/schedule.h"

namespace tandem::controller {

struct StepReport {
  int64_t step = 0;
  std::vector<float> losses;            // per microbatch (empty for forward-only)
  std::vector<ir::HostTensor> outputs;  // per microbatch, forward-only steps
  // By stage: its sum of squared averaged gradients, in a step that
  // computes them (cpu::StepResult's, as the stage's actor reported it).
  std::map<int32_t, float> gradient_squares;
  std::vector<int64_t> peak_live_bytes; // measured, per actor
  std::vector<int64_t> device_peak_bytes;  // measured on device memory, per actor (0: host-resident)
  // Per actor: time spent in run instructions (compute), and every
  // instruction's timing as the actor reported it.
  std::vector<int64_t> busy_ns;
  std::vector<std::vector<ir::InstructionTiming>> timings;
  std::vector<int64_t> origin_ns;  // the zero of each actor's timings (ir::StepOutputs)
  // Per actor: its time on the step outside its instructions, before them
  // (taking the inputs in) and after (settling), as ir::StepOutputs says.
  std::vector<int64_t> inputs_ns;
  std::vector<int64_t> settle_ns;
  // Dispatch calls (RPCs to actor processes) the step took, over all actors:
  // one per actor when fused.
  int64_t rpcs = 0;
  // With a fill job (controller/fill.h): per actor, time spent in fill
  // pieces; the output of every fill slot whose piece ran, by slot.
  std::vector<int64_t> fill_busy_ns;
  std::map<int32_t, ir::HostTensor> fill_outputs;
  // Set by a Session's fill: the item each fill slot was given (-1: none
  // left), the job's items finished in this step with their outputs, and
  // the pieces that gave way to the pipeline.
  std::vector<int64_t> fill_items;
  std::map<int64_t, ir::HostTensor> fill_done;
  int64_t fill_skipped = 0;
};

// A fill job and where its pieces go (controller/fill.h).
struct PipelineFill {
  std::shared_ptr<const FillJob> job;
  std::vector<FillSlot> slots;
  int64_t pieces() const { return TotalPieces(slots); }
};

class Pipeline {
 public:
  // Compiles `step` for `schedule` and starts the actors from `state`, the
  // source of every state tensor (ir/state_source.h): ir::SeedSources(step)
  // to start afresh (each actor generates its share), a checkpoint's files
  // after `steps_done` steps (numbering then goes on from there, as the
  // optimizer needs; each actor reads its share), or tensors held here
  // (ir::TensorSources).
  // With `fill`, the programs also run the fill job's pieces (AddFill) and
  // the actors start with its parameters too.
  static absl::StatusOr<std::unique_ptr<Pipeline>> Create(ir::TrainStep step, const schedules::Schedule& schedule,
                                                          const ir::StateSources& state,
                                                          std::unique_ptr<Launcher> launcher,
                                                          int64_t steps_done = 0,
                                                          const CompileOptions& options = {},
                                                          PipelineFill fill = {});

  // Another step over the same actors and their state, compiled for
  // `schedule` (the same actors) with the options the pipeline was created
  // with; returns its index for UseStep (the first step's is 0). Several
  // steps share one state: generation's prefill writes the caches its
  // decode step then reads and extends (controller/generation.h). Each
  // actor's program may bind only state the actor started with
  // (InvalidArgument naming the actor and the tensor); not with a fill job.
  absl::StatusOr<int32_t> AddStep(ir::TrainStep step, const schedules::Schedule& schedule);
  // Makes step `index` the one Step() runs from now on (the launcher hands
  // the actors its programs: Launcher::UsePrograms).
  absl::Status UseStep(int32_t index);

  // Runs the next step (numbered from 1, or from steps_done + 1) on
  // `microbatches`, each holding that microbatch's data and labels by name.
  // With a fill job, `fill_inputs[slot]` holds the data of each fill slot
  // (fill_pieces() of them).
  absl::StatusOr<StepReport> Step(const std::vector<ir::TensorMap>& microbatches, Dispatch dispatch = Dispatch::kFused,
                                  const std::vector<ir::TensorMap>& fill_inputs = {});

  // The pieces of Step(), for drivers that run a step another way (the
  // debugger, task by task): the inputs of the next step per actor, and the
  // report of that step from every actor's results, which counts it as run.
  absl::StatusOr<std::vector<ir::StepInputs>> NextInputs(const std::vector<ir::TensorMap>& microbatches,
                                                         const std::vector<ir::TensorMap>& fill_inputs = {}) const;
  absl::StatusOr<StepReport> FinishStep(std::vector<ir::StepOutputs> results);
  Launcher& launcher() { return *launcher_; }

  // The state gathered from the actors (the fill job's not included). A
  // parameter held by several actors must be bit-identical on all of them
  // (Internal error otherwise).
  absl::StatusOr<ir::TensorMap> State();
  // The fill job's state on each actor, by the job's names (empty for an
  // actor without pieces): a training job's model as its pieces left it.
  absl::StatusOr<std::vector<ir::TensorMap>> FillState();
  // Has each actor write its state to paths[actor] behind the next steps
  // (Launcher::SnapshotState), and the files once written (AwaitState).
  absl::Status SnapshotState(const std::vector<std::string>& paths) { return launcher_->SnapshotState(paths); }
  absl::StatusOr<std::optional<std::vector<SavedStateFile>>> AwaitState(const std::vector<std::string>& paths,
                                                                        bool wait) {
    return launcher_->AwaitState(paths, wait);
  }

  // Steps run so far, counting those before a checkpoint it started from.
  int64_t steps_done() const { return steps_run_; }

  const CompiledStep& compiled() const { return steps_[current_].compiled; }
  const ir::TrainStep& step() const { return steps_[current_].step; }
  const PipelineFill& fill() const { return fill_; }
  int64_t fill_pieces() const { return fill_.pieces(); }

 private:
  Pipeline(ir::TrainStep step, CompiledStep compiled, std::unique_ptr<Launcher> launcher, int64_t steps_done,
           PipelineFill fill, CompileOptions options, std::vector<std::set<std::string>> started_state)
      : launcher_(std::move(launcher)), steps_run_(steps_done), fill_(std::move(fill)), options_(std::move(options)),
        started_state_(std::move(started_state)) {
    steps_.push_back({std::move(step), std::move(compiled)});
  }

  struct CompiledAlternative {
    ir::TrainStep step;
    CompiledStep compiled;
  };
  std::vector<CompiledAlternative> steps_;  // AddStep's; the first is Create's
  size_t current_ = 0;                      // the one Step() runs
  std::unique_ptr<Launcher> launcher_;
  int64_t steps_run_ = 0;
  PipelineFill fill_;
  CompileOptions options_;
  std::vector<std::set<std::string>> started_state_;  // by actor: the state it was started with
};

}  // namespace tandem::controller

#endif  // TANDEM_CONTROLLER_PIPELINE_H_
