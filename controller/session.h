// Session: the controller API a training script uses (see <tandem/tandem.h>).
//
//   absl::StatusOr<ir::TrainStep> step = tandem::TraceTrainStep("mlp", Model, tandem::Adam({.learning_rate = 1e-3}), {.num_microbatches = 8});
//   absl::StatusOr<schedules::Schedule> schedule = schedules::ResolveSchedule("1f1b", 4, 8);
//   absl::StatusOr<std::unique_ptr<tandem::Session>> session = tandem::Session::Start(*step, *schedule);
//   for (...) report = (*session)->Step(microbatches);   // report->losses
//   (*session)->SaveCheckpoint("ck");
//
// A session compiles the traced step for the schedule, starts one actor per
// schedule actor (by default as `tandem-actor` processes on this host: the
// local launcher), hands them their programs and state, and runs steps.
// It can save and resume checkpoints (controller/checkpoint.h) and switch to
// another schedule mid-run, carrying the parameters and the step count over.
// With SessionOptions::max_restarts it also outlives lost actors: it starts
// them again from the newest checkpoint it saved and redoes the steps since
// then, so that the caller sees a slower call and the same results.
// Owns its actors: destroying the session shuts them down. Not thread-safe:
// one controller thread drives it.
#ifndef TANDEM_CONTROLLER_SESSION_H_
#define TANDEM_CONTROLLER_SESSION_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "controller/checkpoint.h"
#include "controller/compiler.h"
#include "controller/debugger.h"
#include "controller/fill.h"
#include "controller/generation.h"
#include "controller/launcher.h"
#include "controller/pipeline.h"
#include "ir/data_plane_kind.h"
#include "ir/host_tensor.h"
#include "ir/state_source.h"
#include "ir/train_step.h"
#include "rpc/control_plane_kind.h"
#include "schedules/plan_file.h"
#include "schedules/schedule.h"

namespace tandem {

// One restart of a session's actors after one was lost (SessionOptions::max_restarts).
struct SessionRestart {
  int32_t number = 0;        // 1, 2, ... in the session's life
  int32_t max_restarts = 0;  // SessionOptions::max_restarts
  std::string during;        // what failed: "step 7", "the checkpoint after step 20", "reading the state"
  absl::Status fault;        // the launcher's error, naming the actor and what happened to it
  std::string checkpoint;    // the checkpoint restarted from; "" for the state the session started from
  int64_t resumed_after = 0;  // the steps done in that state
  int64_t steps_redone = 0;   // steps run again to get back to where the fault struck
  double seconds_lost = 0;    // from the failed call's start until the session was back there
  // "restart 1 of 3 during step 7: <fault>; from <checkpoint> (after step
  // 5), 1 step redone, 2.4 s lost".
  std::string Describe() const;
};

struct SessionOptions {
  // The actor executable; empty: FindActorBinary().
  std::string actor_binary;
  // How the local actors reach the controller (a Unix socket, or TCP on
  // loopback: the TCP control plane needs the TCP data plane).
  rpc::ControlPlaneKind control_plane = rpc::ControlPlaneKind::kUnix;
  // The data plane between the local actors.
  ir::DataPlaneKind data_plane = ir::DataPlaneKind::kShm;
  // One dispatch per actor per step, or one per task (for measurement).
  controller::Dispatch dispatch = controller::Dispatch::kFused;
  // By stage (empty: none): the stage recomputes its forward inside its
  // backward, keeping only its inputs in between (`--remat stage` is every
  // stage: controller::RematEveryStage; a plan names its own).
  std::vector<bool> remat;
  // The deadline of every data-plane receive, and of one whole step.
  absl::Duration receive_timeout = absl::Seconds(30);
  absl::Duration step_timeout = absl::Minutes(10);
  // Where the actors' output lines go, prefixed "[actor N]" (default:
  // stderr).
  std::function<void(const std::string& line)> actor_output;
  // Another kind of actors instead of local processes: called at every
  // (re)start for a fresh, unstarted launcher.
  std::function<std::unique_ptr<controller::Launcher>()> launcher;
  // Where SaveCheckpoint will write, if known at the start: the session
  // then proves it writable (controller::PrepareCheckpointRoot) before any
  // actor starts, instead of failing at the first save.
  std::string checkpoint_root;
  // Restarts after a lost actor (controller::IsActorLost: it died, was
  // killed or stopped, went silent, or its node went away), at most this
  // many in the session's life. A step, a checkpoint or a read of the state
  // that loses an actor ends every actor, starts them again through a fresh
  // launcher (under Slurm, a new srun step in the same allocation) from the
  // newest checkpoint this session saved (or the state it started from),
  // redoes the steps since then on the microbatches it kept for that (a
  // redone step's losses must equal its first run's bit for bit, or the
  // call fails with Internal), and runs the failed call again: the caller
  // sees a slower call, and the results of a run that never failed. Other
  // errors, a fault while no state to restart from is known (after
  // SetSchedule or Recompile, until the next checkpoint), and a fault with
  // no restart left fail the call as before. The session keeps every
  // step's microbatches since its last checkpoint: save checkpoints to
  // bound them. Fill jobs do not go with restarts (StartFill refuses).
  int32_t max_restarts = 0;
  // Told of each restart once the session is back where the fault struck
  // (default: a line on stderr).
  std::function<void(const SessionRestart&)> on_restart;
  // The most bytes of microbatches kept to redo the steps since the last
  // checkpoint: past it, the session keeps none and makes no restart until
  // the next checkpoint (a fault then fails the call, saying so).
  int64_t max_kept_bytes = int64_t{1} << 30;
};

class Session {
 public:
  // Compiles `step` for `schedule` and starts its actors from the step's
  // initial parameters (ir::SeedSources: each actor generates its own).
  static absl::StatusOr<std::unique_ptr<Session>> Start(ir::TrainStep step, schedules::Schedule schedule,
                                                        SessionOptions options = {});
  // The same, from a checkpoint: a checkpoint directory or a root holding
  // several (its newest), checked against `step` (controller/checkpoint.h).
  // Step numbering goes on after the checkpoint's step.
  static absl::StatusOr<std::unique_ptr<Session>> Resume(ir::TrainStep step, schedules::Schedule schedule,
                                                         const std::string& checkpoint, SessionOptions options = {});
  // Runs `plan` (schedules/plan_file.h, from `tandem plan`): its schedule,
  // and its stages' rematerialisation in place of options.remat. `step`
  // must be traced as the plan cuts it: plan.microbatches microbatches of
  // plan.microbatch_size, and a pipeline_yield before the first layer of
  // each stage (plan.SegmentStages()); InvalidArgument otherwise.
  static absl::StatusOr<std::unique_ptr<Session>> Start(ir::TrainStep step, const schedules::Plan& plan,
                                                        SessionOptions options = {});
  // The same from `state`, the sources of the parameters and optimizer
  // slots after `steps_done` steps (a checkpoint loaded with
  // controller::LoadCheckpoint, whose files the actors read; tensors held
  // here as ir::TensorSources(map)): step numbering goes on from there.
  static absl::StatusOr<std::unique_ptr<Session>> StartFrom(ir::TrainStep step, schedules::Schedule schedule,
                                                            const ir::StateSources& state, int64_t steps_done,
                                                            SessionOptions options = {});
  ~Session();

  // Runs the next step on `microbatches` (one TensorMap of inputs and labels
  // per microbatch, by the names the model declared). The report holds each
  // microbatch's loss, or its output for a forward-only step; with a fill
  // job, also the items it finished (StepReport::fill_done).
  absl::StatusOr<controller::StepReport> Step(const std::vector<ir::TensorMap>& microbatches);

  // Fill jobs (controller/fill.h): from the next step on, the actors also
  // run `job`'s pieces where `slots` put them (e.g. controller::PlanFill's,
  // packed into the bubbles of this session's compiled() step under costs
  // calibrated on its steps). Restarts the actors from the current state,
  // as Recompile does; the pipeline's results stay bit-identical. On
  // failure the session keeps running as before. SetSchedule and Recompile
  // drop the fill job (its slots belong to the old programs).
  absl::Status StartFill(std::shared_ptr<const controller::FillJob> job, std::vector<controller::FillSlot> slots);
  // The running fill job's queue, or null.
  const controller::FillQueue* fill_queue() const { return fill_queue_.get(); }
  // The fill job's state on each actor (controller::Pipeline::FillState).
  absl::StatusOr<std::vector<ir::TensorMap>> FillState() { return pipeline_->FillState(); }

  // Every parameter and optimizer slot, gathered from the actors.
  absl::StatusOr<ir::TensorMap> State();
  // Writes a checkpoint of the state after steps_done() under `root`
  // (root/step-NNNNNNNN/), waiting for it; returns its directory.
  absl::StatusOr<std::string> SaveCheckpoint(const std::string& root);
  // The same behind the steps: the actors take their state now and write
  // it while the next steps run (after finishing the checkpoint begun
  // before, if any). FinishCheckpoint puts it in place once every file is
  // durable: with `wait`, waiting for them; without, only if they are
  // (else ""). Its directory, or "" when none is pending. Until then the
  // checkpoint before it stays the newest (and what a restart starts
  // from); a restart that redoes its step writes it again. Destroying the
  // session finishes a pending checkpoint.
  absl::Status BeginCheckpoint(const std::string& root);
  absl::StatusOr<std::string> FinishCheckpoint(bool wait = true);
  // The step of the checkpoint being written behind the steps, if any.
  std::optional<int64_t> pending_checkpoint() const {
    return pending_.has_value() ? std::optional<int64_t>(pending_->step) : std::nullopt;
  }

  // Evaluation through the pipeline: runs `forward` (the model traced
  // without backward or update, with this step's stages, microbatches and
  // replicas, e.g. ExampleJob::forward_step; its state among this step's)
  // on batches 0 .. count - 1 (`batch(i)`: one TensorMap per microbatch)
  // through a pipeline of its own, on this schedule's forwards
  // (controller::ForwardOnly), from the state after steps_done(): the
  // actors write it under `scratch` as a checkpoint, the evaluating actors
  // read their parameters there, and it is removed after. Each batch's
  // outputs, one per microbatch. The controller never holds the model; the
  // evaluating actors run beside the training ones while it lasts.
  absl::StatusOr<std::vector<std::vector<ir::HostTensor>>> Evaluate(
      const ir::TrainStep& forward, int64_t count,
      const std::function<absl::StatusOr<std::vector<ir::TensorMap>>(int64_t index)>& batch,
      const std::string& scratch);

  // Generation through a pipeline with KV caches (controller/generation.h):
  // extends each of `prompts` by `tokens` ids chosen by `pick`, with
  // `steps` (the model's prefill and decode, traced with this step's stages
  // and microbatches; their parameters among this step's), on this
  // schedule's forwards, from the state after steps_done(), read from a
  // scratch checkpoint under `scratch` as Evaluate does. The controller
  // never holds the model.
  absl::StatusOr<controller::GenerationReport> Generate(const controller::GenerationSteps& steps,
                                                        const std::vector<std::vector<int32_t>>& prompts,
                                                        int64_t tokens, const controller::TokenPicker& pick,
                                                        const std::string& scratch);

  // Recompiles for `schedule` (any valid schedule with the step's stages
  // and microbatches) and restarts the actors from the current state; the
  // step count carries on. On failure the session keeps running as before.
  absl::Status SetSchedule(schedules::Schedule schedule);
  // The same with a re-traced step, e.g. for another microbatch count (the
  // update's 1/M is part of the traced step). Its parameters and optimizer
  // slots must be the running step's, and its stages those options.remat
  // names, if any (InvalidArgument otherwise).
  absl::Status Recompile(ir::TrainStep step, schedules::Schedule schedule);

  int64_t steps_done() const { return pipeline_->steps_done(); }
  const ir::TrainStep& train_step() const { return pipeline_->step(); }
  const schedules::Schedule& schedule() const { return schedule_; }
  const controller::CompiledStep& compiled() const { return pipeline_->compiled(); }
  // Runs steps task by task with breakpoints (controller/debugger.h), over
  // whichever pipeline the session runs now (it follows SetSchedule and
  // Recompile).
  controller::Debugger& debugger() { return *debugger_; }
  // Where an actor runs, for people: "pid 1234", "thread".
  std::string DescribeActor(ActorId actor) const;
  // Peers the current launcher refused because they could not prove they
  // belong to the job (controller/launcher.h).
  controller::RefusalCounts Refusals() { return pipeline_->launcher().Refusals(); }
  // Launcher::DescribeDataPlane.
  std::string DescribeDataPlane() { return pipeline_->launcher().DescribeDataPlane(); }
  // "local launcher (one process per actor, shm data plane)", or "custom launcher".
  const std::string& launcher_description() const { return launcher_description_; }
  // The restarts so far (SessionOptions::max_restarts), oldest first.
  const std::vector<SessionRestart>& restarts() const { return restarts_; }

 private:
  Session(schedules::Schedule schedule, SessionOptions options)
      : schedule_(std::move(schedule)), options_(std::move(options)) {}
  // A fresh launcher for options_, and its description.
  absl::StatusOr<std::unique_ptr<controller::Launcher>> MakeLauncher();
  // What this session compiles with.
  controller::CompileOptions CompileOptionsFor() const;
  // The state after steps_done(), written by the actors as a checkpoint
  // under `scratch` for the actors of another pipeline to read (Evaluate,
  // Generate, `purpose` naming it): where each of `names` is there. The
  // checkpoint is removed with the result.
  struct ScratchState {
    ir::StateSources sources;
    std::string path;
    ~ScratchState();
  };
  absl::StatusOr<std::unique_ptr<ScratchState>> SaveScratch(const std::string& scratch, const std::string& purpose,
                                                            const std::vector<std::string>& names);
  // Runs `call`; when it loses an actor, restarts (Restart) and runs it
  // again. `during` names it in the restart's record.
  template <typename T>
  absl::StatusOr<T> Recovering(const std::string& during, const std::function<absl::StatusOr<T>()>& call);
  // After `fault` in the call that began at `call_started` (or whose last
  // restart ended then): new actors from
  // the restart point, the kept steps redone, within the restart budget.
  // The fault (with why there is no restart) when there is none to make.
  absl::Status Restart(const absl::Status& fault, const std::string& during, absl::Time call_started);
  // One restart's attempt: a fresh pipeline from the restart point, then
  // the kept steps again.
  absl::Status StartAgainAndRedo(SessionRestart& restart);
  // The pipeline's step, under fill when there is a fill job.
  absl::StatusOr<controller::StepReport> StepOnce(const std::vector<ir::TensorMap>& microbatches);
  // Forgets the restart point (the state changed under another step).
  void DropRestartPoint(absl::string_view why);

  schedules::Schedule schedule_;
  SessionOptions options_;
  std::string launcher_description_;
  std::unique_ptr<controller::Pipeline> pipeline_;
  std::unique_ptr<controller::Debugger> debugger_;  // borrows *pipeline_
  std::unique_ptr<controller::FillQueue> fill_queue_;  // borrows pipeline_->fill().job

  // Where a restart starts (max_restarts > 0): the checkpoint this session
  // saved last, else the state it started from; with every step since, its
  // microbatches and losses. Neither known after SetSchedule or Recompile
  // until the next checkpoint: `no_restart_point_` says why.
  struct KeptStep {
    int64_t step = 0;
    std::vector<ir::TensorMap> microbatches;
    std::vector<float> losses;
  };
  std::string restart_checkpoint_;
  std::optional<ir::StateSources> restart_state_;
  int64_t restart_steps_done_ = 0;
  std::vector<KeptStep> kept_steps_;
  int64_t kept_bytes_ = 0;  // their microbatches' bytes
  std::string no_restart_point_;
  std::vector<SessionRestart> restarts_;
  // The checkpoint being written behind the steps (BeginCheckpoint).
  std::optional<controller::PendingCheckpoint> pending_;
  // A checkpoint is in place: it becomes the restart point.
  void Checkpointed(const std::string& path, int64_t step);
  // Writes the pending checkpoint now if the pipeline is at its step (a
  // restart's redo passes it).
  absl::Status SavePendingHere();
};

// Where `tandem-actor` is: $TANDEM_ACTOR_BINARY if set; else beside the
// running program; else in the bin/ directory beside the lib/ directory of
// the library holding this code (an installed Tandem); else beside that
// library (a build tree). "tandem-actor" (searched on PATH) if none exists.
std::string FindActorBinary();

}  // namespace tandem

#endif  // TANDEM_CONTROLLER_SESSION_H_
