#include "controller/session.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "controller/checkpoint.h"
#include "ir/bitwise.h"
#include "controller/local_launcher.h"

namespace tandem {
namespace {

namespace fs = std::filesystem;

bool IsExecutable(const fs::path& path) { return access(path.c_str(), X_OK) == 0 && fs::is_regular_file(path); }

}  // namespace

std::string SessionRestart::Describe() const {
  return absl::StrFormat("restart %d of %d during %s: %s; from %s (after step %d), %d %s redone, %.1f s lost", number,
                         max_restarts, during, fault.message(),
                         checkpoint.empty() ? std::string("the state the session started from") : checkpoint,
                         resumed_after, steps_redone, steps_redone == 1 ? "step" : "steps", seconds_lost);
}

std::string FindActorBinary() {
  if (const char* path = std::getenv("TANDEM_ACTOR_BINARY"); path != nullptr && path[0] != '\0') return path;
  std::vector<fs::path> candidates;
  std::error_code error;
  const fs::path self = fs::read_symlink("/proc/self/exe", error);
  if (!error) candidates.push_back(self.parent_path() / "tandem-actor");
  // The file this function is in: libtandem.so when a script links the
  // library, else the running program itself.
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&FindActorBinary), &info) != 0 && info.dli_fname != nullptr) {
    const fs::path library = fs::weakly_canonical(info.dli_fname, error);
    if (!error) {
      // <prefix>/lib/libtandem.so or <prefix>/lib/<multiarch>/libtandem.so.
      candidates.push_back(library.parent_path() / "tandem-actor");
      for (fs::path dir = library.parent_path(); dir.has_relative_path(); dir = dir.parent_path()) {
        candidates.push_back(dir.parent_path() / "bin" / "tandem-actor");
        if (candidates.size() > 5) break;
      }
    }
  }
  for (const fs::path& candidate : candidates) {
    if (IsExecutable(candidate)) return candidate.string();
  }
  return "tandem-actor";
}

absl::StatusOr<std::unique_ptr<controller::Launcher>> Session::MakeLauncher() {
  if (options_.launcher) {
    launcher_description_ = "custom launcher";
    std::unique_ptr<controller::Launcher> launcher = options_.launcher();
    if (launcher == nullptr) return absl::InvalidArgumentError("SessionOptions::launcher returned no launcher");
    return launcher;
  }
  controller::LocalLauncherOptions local;
  local.actor_binary = options_.actor_binary.empty() ? FindActorBinary() : options_.actor_binary;
  local.control_plane = options_.control_plane;
  local.data_plane = options_.data_plane;
  local.receive_timeout = options_.receive_timeout;
  local.step_timeout = options_.step_timeout;
  if (options_.actor_output) {
    local.output = [sink = options_.actor_output](absl::string_view line) { sink(std::string(line)); };
  }
  launcher_description_ = absl::StrCat(
      "local launcher (one process per actor, ",
      options_.control_plane == rpc::ControlPlaneKind::kTcp ? "tcp control plane, " : "",
      ir::DataPlaneKindName(options_.data_plane), " data plane)");
  return std::make_unique<controller::LocalLauncher>(std::move(local));
}

absl::StatusOr<std::unique_ptr<Session>> Session::StartFrom(ir::TrainStep step, schedules::Schedule schedule,
                                                            const ir::StateSources& state, int64_t steps_done,
                                                            SessionOptions options) {
  if (!options.checkpoint_root.empty()) {
    if (absl::Status status = controller::PrepareCheckpointRoot(options.checkpoint_root); !status.ok()) return status;
  }
  std::unique_ptr<Session> session(new Session(schedule, std::move(options)));
  absl::StatusOr<std::unique_ptr<controller::Launcher>> launcher = session->MakeLauncher();
  if (!launcher.ok()) return launcher.status();
  absl::StatusOr<std::unique_ptr<controller::Pipeline>> pipeline =
      controller::Pipeline::Create(std::move(step), schedule, state, *std::move(launcher), steps_done,
                                   session->CompileOptionsFor());
  if (!pipeline.ok()) return pipeline.status();
  session->pipeline_ = *std::move(pipeline);
  session->debugger_ = std::make_unique<controller::Debugger>(session->pipeline_.get());
  if (session->options_.max_restarts > 0) {
    session->restart_state_ = state;
    session->restart_steps_done_ = steps_done;
  }
  return session;
}

absl::StatusOr<std::unique_ptr<Session>> Session::Start(ir::TrainStep step, schedules::Schedule schedule,
                                                        SessionOptions options) {
  const ir::StateSources state = ir::SeedSources(step);
  return StartFrom(std::move(step), std::move(schedule), state, 0, std::move(options));
}

absl::StatusOr<std::unique_ptr<Session>> Session::Start(ir::TrainStep step, const schedules::Plan& plan,
                                                        SessionOptions options) {
  if (step.num_stages != static_cast<int32_t>(plan.stages.size()) || step.num_microbatches != plan.microbatches) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the plan runs ", plan.stages.size(), " stages of ", plan.microbatches, " microbatches; the step is traced with ",
        step.num_stages, " stages of ", step.num_microbatches, " (trace it as the plan cuts it)"));
  }
  absl::StatusOr<schedules::Schedule> schedule = schedules::PlanSchedule(plan);
  if (!schedule.ok()) return schedule.status();
  options.remat = plan.RematByStage();
  return Start(std::move(step), *std::move(schedule), std::move(options));
}

absl::StatusOr<std::unique_ptr<Session>> Session::Resume(ir::TrainStep step, schedules::Schedule schedule,
                                                         const std::string& checkpoint, SessionOptions options) {
  absl::StatusOr<controller::LoadedCheckpoint> loaded = controller::LoadCheckpoint(checkpoint, step);
  if (!loaded.ok()) return loaded.status();
  absl::StatusOr<std::unique_ptr<Session>> session =
      StartFrom(std::move(step), std::move(schedule), loaded->state, loaded->step, std::move(options));
  if (session.ok() && (*session)->options_.max_restarts > 0) {
    (*session)->restart_checkpoint_ = loaded->path;
    (*session)->restart_state_.reset();
  }
  return session;
}

Session::~Session() {
  // A checkpoint begun behind the steps is put in place, if its files get
  // written; otherwise the one before it stays the newest.
  if (pending_.has_value()) (void)FinishCheckpoint(/*wait=*/true);
}

controller::CompileOptions Session::CompileOptionsFor() const { return {.remat = options_.remat}; }

template <typename T>
absl::StatusOr<T> Session::Recovering(const std::string& during, const std::function<absl::StatusOr<T>()>& call) {
  absl::Time since = absl::Now();  // the time a restart now would count as lost starts here
  while (true) {
    absl::StatusOr<T> result = call();
    if (result.ok() || options_.max_restarts <= 0 || !controller::IsActorLost(result.status())) return result;
    if (absl::Status restarted = Restart(result.status(), during, since); !restarted.ok()) return restarted;
    since = absl::Now();
  }
}

absl::Status Session::Restart(const absl::Status& fault, const std::string& during, absl::Time call_started) {
  SessionRestart restart{.max_restarts = options_.max_restarts, .during = during, .fault = fault};
  while (true) {
    if (!no_restart_point_.empty()) {
      return absl::Status(restart.fault.code(), absl::StrCat(restart.fault.message(), " (no restart: ",
                                                             no_restart_point_, ")"));
    }
    if (static_cast<int32_t>(restarts_.size()) >= options_.max_restarts) {
      return absl::Status(restart.fault.code(),
                          absl::StrCat(restart.fault.message(), " (no restart left: ", restarts_.size(), " of ",
                                       options_.max_restarts, " made)"));
    }
    restart.number = static_cast<int32_t>(restarts_.size()) + 1;
    absl::Status attempt = StartAgainAndRedo(restart);
    restart.seconds_lost = absl::ToDoubleSeconds(absl::Now() - call_started);
    call_started = absl::Now();
    restarts_.push_back(restart);
    if (attempt.ok()) {
      if (options_.on_restart) {
        options_.on_restart(restart);
      } else {
        std::cerr << "tandem: " << restart.Describe() << std::endl;
      }
      return absl::OkStatus();
    }
    // Losing an actor again while starting or redoing is another fault,
    // within the same budget; anything else ends the restart.
    if (!controller::IsActorLost(attempt)) {
      return absl::Status(attempt.code(), absl::StrCat("restart ", restart.number, " of ", options_.max_restarts,
                                                       " after ", restart.fault.message(), ": ", attempt.message()));
    }
    restart.during = absl::StrCat("restart ", restart.number);
    restart.fault = attempt;
  }
}

absl::Status Session::StartAgainAndRedo(SessionRestart& restart) {
  // The launcher stopped the lost actor's peers; end them all now, before
  // new ones start: their devices, their srun step and their memory are
  // what the new ones need.
  (void)pipeline_->launcher().Shutdown();
  ir::TrainStep step = pipeline_->step();
  ir::StateSources state;
  restart.checkpoint = restart_checkpoint_;
  if (!restart_checkpoint_.empty()) {
    absl::StatusOr<controller::LoadedCheckpoint> loaded = controller::LoadCheckpoint(restart_checkpoint_, step);
    if (!loaded.ok()) return loaded.status();
    state = std::move(loaded->state);
    restart.resumed_after = loaded->step;
  } else {
    state = *restart_state_;
    restart.resumed_after = restart_steps_done_;
  }
  restart.steps_redone = 0;
  absl::StatusOr<std::unique_ptr<controller::Launcher>> launcher = MakeLauncher();
  if (!launcher.ok()) return launcher.status();
  absl::StatusOr<std::unique_ptr<controller::Pipeline>> pipeline = controller::Pipeline::Create(
      std::move(step), schedule_, state, *std::move(launcher), restart.resumed_after, CompileOptionsFor());
  if (!pipeline.ok()) return pipeline.status();
  pipeline_ = *std::move(pipeline);
  debugger_->Reset(pipeline_.get());
  // The kept steps again, writing the pending checkpoint as its step
  // passes (which drops the kept steps up to it).
  for (size_t i = 0;; ++i) {
    const size_t kept_before = kept_steps_.size();
    if (absl::Status saved = SavePendingHere(); !saved.ok()) return saved;
    if (kept_steps_.size() != kept_before) i = 0;
    if (i >= kept_steps_.size()) break;
    const KeptStep& kept = kept_steps_[i];
    if (kept.step <= pipeline_->steps_done()) continue;  // in the state restarted from
    absl::StatusOr<controller::StepReport> report = pipeline_->Step(kept.microbatches, options_.dispatch);
    if (!report.ok()) return report.status();
    ++restart.steps_redone;
    if (!ir::BitwiseEqual(report->losses, kept.losses)) {
      return absl::InternalError(absl::StrCat("step ", report->step,
                                              " gave other losses when redone after the restart than its first run "
                                              "(a run is bitwise reproducible: this is a bug)"));
    }
  }
  return absl::OkStatus();
}

absl::Status Session::SavePendingHere() {
  if (!pending_.has_value() || pipeline_->steps_done() != pending_->step) return absl::OkStatus();
  absl::StatusOr<std::string> saved = controller::SaveCheckpoint(*pipeline_, pending_->root);
  if (!saved.ok()) return saved.status();
  const int64_t step = pending_->step;
  pending_.reset();
  Checkpointed(*saved, step);
  return absl::OkStatus();
}

void Session::Checkpointed(const std::string& path, int64_t step) {
  if (options_.max_restarts <= 0) return;
  restart_checkpoint_ = path;
  restart_state_.reset();
  no_restart_point_.clear();
  std::erase_if(kept_steps_, [step](const KeptStep& kept) { return kept.step <= step; });
  kept_bytes_ = 0;
  for (const KeptStep& kept : kept_steps_) {
    for (const ir::TensorMap& microbatch : kept.microbatches) {
      for (const auto& [name, tensor] : microbatch) kept_bytes_ += tensor.num_bytes();
    }
  }
}

void Session::DropRestartPoint(absl::string_view why) {
  if (options_.max_restarts <= 0) return;
  restart_checkpoint_.clear();
  restart_state_.reset();
  kept_steps_.clear();
  kept_bytes_ = 0;
  no_restart_point_ = absl::StrCat(why, " at step ", pipeline_->steps_done(),
                                   " and no checkpoint was saved since");
}

absl::StatusOr<controller::StepReport> Session::Step(const std::vector<ir::TensorMap>& microbatches) {
  absl::StatusOr<controller::StepReport> report = Recovering<controller::StepReport>(
      absl::StrCat("step ", pipeline_->steps_done() + 1), [&] { return StepOnce(microbatches); });
  if (report.ok() && options_.max_restarts > 0 && no_restart_point_.empty()) {
    int64_t bytes = 0;
    for (const ir::TensorMap& microbatch : microbatches) {
      for (const auto& [name, tensor] : microbatch) bytes += tensor.num_bytes();
    }
    if (kept_bytes_ + bytes > options_.max_kept_bytes) {
      DropRestartPoint(absl::StrCat("the microbatches since the last checkpoint passed ",
                                    ir::FormatBytes(options_.max_kept_bytes),
                                    " (SessionOptions::max_kept_bytes; checkpoint more often)"));
    } else {
      kept_steps_.push_back({report->step, microbatches, report->losses});
      kept_bytes_ += bytes;
    }
  }
  return report;
}

absl::StatusOr<controller::StepReport> Session::StepOnce(const std::vector<ir::TensorMap>& microbatches) {
  if (fill_queue_ == nullptr) return pipeline_->Step(microbatches, options_.dispatch);
  const std::vector<int64_t> items = fill_queue_->Take(pipeline_->fill_pieces());
  absl::StatusOr<controller::StepReport> report =
      pipeline_->Step(microbatches, options_.dispatch, fill_queue_->Inputs(items));
  if (!report.ok()) return report.status();
  const int64_t skipped_before = fill_queue_->skipped();
  report->fill_done = fill_queue_->Finish(items, report->fill_outputs);
  report->fill_items = items;
  report->fill_skipped = fill_queue_->skipped() - skipped_before;
  return report;
}

absl::Status Session::StartFill(std::shared_ptr<const controller::FillJob> job,
                                std::vector<controller::FillSlot> slots) {
  if (job == nullptr) return absl::InvalidArgumentError("StartFill: no fill job");
  if (options_.max_restarts > 0) {
    return absl::InvalidArgumentError("fill jobs do not go with restarts (SessionOptions::max_restarts) yet");
  }
  if (absl::StatusOr<std::string> finished = FinishCheckpoint(/*wait=*/true); !finished.ok()) return finished.status();
  absl::StatusOr<ir::TensorMap> state = pipeline_->State();
  if (!state.ok()) return state.status();
  absl::StatusOr<std::unique_ptr<controller::Launcher>> launcher = MakeLauncher();
  if (!launcher.ok()) return launcher.status();
  absl::StatusOr<std::unique_ptr<controller::Pipeline>> pipeline = controller::Pipeline::Create(
      pipeline_->step(), schedule_, ir::TensorSources(*state), *std::move(launcher), pipeline_->steps_done(),
      CompileOptionsFor(),
      controller::PipelineFill{std::move(job), std::move(slots)});
  if (!pipeline.ok()) return pipeline.status();
  pipeline_ = *std::move(pipeline);
  debugger_->Reset(pipeline_.get());
  fill_queue_ = std::make_unique<controller::FillQueue>(pipeline_->fill().job.get());
  return absl::OkStatus();
}

absl::StatusOr<ir::TensorMap> Session::State() {
  return Recovering<ir::TensorMap>("reading the state", [&] { return pipeline_->State(); });
}

std::string Session::DescribeActor(ActorId actor) const { return pipeline_->launcher().DescribeActor(actor); }

absl::StatusOr<std::string> Session::SaveCheckpoint(const std::string& root) {
  if (absl::Status begun = BeginCheckpoint(root); !begun.ok()) return begun;
  return FinishCheckpoint(/*wait=*/true);
}

absl::Status Session::BeginCheckpoint(const std::string& root) {
  if (absl::StatusOr<std::string> before = FinishCheckpoint(/*wait=*/true); !before.ok()) return before.status();
  absl::StatusOr<controller::PendingCheckpoint> pending = Recovering<controller::PendingCheckpoint>(
      absl::StrCat("the checkpoint after step ", pipeline_->steps_done()),
      [&] { return controller::BeginCheckpoint(*pipeline_, root); });
  if (!pending.ok()) return pending.status();
  pending_ = *std::move(pending);
  return absl::OkStatus();
}

absl::StatusOr<std::string> Session::FinishCheckpoint(bool wait) {
  if (!pending_.has_value()) return std::string();
  const int64_t step = pending_->step;
  // A restart on the way writes the pending checkpoint as its redo passes
  // its step (SavePendingHere); then there is nothing left to finish here.
  std::string finished;
  absl::StatusOr<std::optional<std::string>> saved = Recovering<std::optional<std::string>>(
      absl::StrCat("the checkpoint after step ", step), [&]() -> absl::StatusOr<std::optional<std::string>> {
        if (!pending_.has_value()) return std::optional<std::string>(restart_checkpoint_);
        return controller::FinishCheckpoint(*pipeline_, *pending_, wait);
      });
  if (!saved.ok()) {
    pending_.reset();  // its files are not all there; the one before stays the newest
    return saved.status();
  }
  if (!saved->has_value()) return std::string();
  if (pending_.has_value()) {
    pending_.reset();
    Checkpointed(**saved, step);
  }
  return **saved;
}

Session::ScratchState::~ScratchState() {
  std::error_code ignored;
  fs::remove_all(path, ignored);
}

absl::StatusOr<std::unique_ptr<Session::ScratchState>> Session::SaveScratch(const std::string& scratch,
                                                                             const std::string& purpose,
                                                                             const std::vector<std::string>& names) {
  if (absl::StatusOr<std::string> finished = FinishCheckpoint(/*wait=*/true); !finished.ok()) return finished.status();
  absl::StatusOr<std::string> saved =
      Recovering<std::string>(absl::StrCat("the state after step ", pipeline_->steps_done(), " for ", purpose),
                              [&] { return controller::SaveCheckpoint(*pipeline_, scratch); });
  if (!saved.ok()) return saved.status();
  auto state = std::make_unique<ScratchState>();
  state->path = *saved;
  absl::StatusOr<controller::LoadedCheckpoint> loaded = controller::LoadCheckpoint(*saved, pipeline_->step());
  if (!loaded.ok()) return loaded.status();
  for (const std::string& name : names) state->sources[name] = loaded->state.at(name);
  return state;
}

absl::StatusOr<std::vector<std::vector<ir::HostTensor>>> Session::Evaluate(
    const ir::TrainStep& forward, int64_t count,
    const std::function<absl::StatusOr<std::vector<ir::TensorMap>>(int64_t index)>& batch,
    const std::string& scratch) {
  if (!forward.forward_only()) {
    return absl::InvalidArgumentError("Evaluate runs a forward-only step (TraceForwardStep)");
  }
  for (const ir::StateSpec& spec : forward.state) {
    const ir::StateSpec* trained = pipeline_->step().FindState(spec.name);
    if (trained == nullptr || trained->type != spec.type) {
      return absl::InvalidArgumentError(absl::StrCat("the evaluated step's state '", spec.name,
                                                     "' is not the training step's (by name and type)"));
    }
  }
  std::vector<std::string> names;
  for (const ir::StateSpec& spec : forward.state) names.push_back(spec.name);
  absl::StatusOr<std::unique_ptr<ScratchState>> saved = SaveScratch(scratch, "an evaluation", names);
  if (!saved.ok()) return saved.status();
  SessionOptions options = options_;
  options.max_restarts = 0;
  options.remat.clear();
  options.checkpoint_root.clear();
  absl::StatusOr<std::unique_ptr<Session>> evaluating = StartFrom(
      forward, controller::ForwardOnly(schedule_), (*saved)->sources, pipeline_->steps_done(), std::move(options));
  if (!evaluating.ok()) return evaluating.status();
  std::vector<std::vector<ir::HostTensor>> outputs;
  for (int64_t index = 0; index < count; ++index) {
    absl::StatusOr<std::vector<ir::TensorMap>> microbatches = batch(index);
    if (!microbatches.ok()) return microbatches.status();
    absl::StatusOr<controller::StepReport> report = (*evaluating)->Step(*microbatches);
    if (!report.ok()) {
      return absl::Status(report.status().code(),
                          absl::StrCat("evaluating batch ", index, ": ", report.status().message()));
    }
    outputs.push_back(std::move(report->outputs));
  }
  return outputs;
}

absl::StatusOr<controller::GenerationReport> Session::Generate(const controller::GenerationSteps& steps,
                                                               const std::vector<std::vector<int32_t>>& prompts,
                                                               int64_t tokens, const controller::TokenPicker& pick,
                                                               const std::string& scratch) {
  if (absl::StatusOr<controller::GenerationShape> shape = controller::CheckGenerationSteps(steps); !shape.ok()) {
    return shape.status();
  }
  for (const ir::StateSpec& spec : steps.prefill.state) {
    if (spec.role != ir::StateRole::kParameter) continue;
    const ir::StateSpec* trained = pipeline_->step().FindState(spec.name);
    if (trained == nullptr || trained->type != spec.type) {
      return absl::InvalidArgumentError(
          absl::StrCat("the generation's parameter '", spec.name, "' is not the training step's (by name and type)"));
    }
  }
  std::vector<std::string> names;
  for (const ir::StateSpec& spec : steps.prefill.state) {
    if (spec.role == ir::StateRole::kParameter) names.push_back(spec.name);
  }
  absl::StatusOr<std::unique_ptr<ScratchState>> saved = SaveScratch(scratch, "a generation", names);
  if (!saved.ok()) return saved.status();
  absl::StatusOr<std::unique_ptr<controller::Launcher>> launcher = MakeLauncher();
  if (!launcher.ok()) return launcher.status();
  absl::StatusOr<std::unique_ptr<controller::Generator>> generator = controller::Generator::OnPipeline(
      steps, controller::ForwardOnly(schedule_), (*saved)->sources, *std::move(launcher));
  if (!generator.ok()) return generator.status();
  return (*generator)->Generate(prompts, tokens, pick);
}

absl::Status Session::SetSchedule(schedules::Schedule schedule) {
  return Recompile(pipeline_->step(), std::move(schedule));
}

absl::Status Session::Recompile(ir::TrainStep step, schedules::Schedule schedule) {
  // The actors writing a checkpoint are about to go.
  if (absl::StatusOr<std::string> finished = FinishCheckpoint(/*wait=*/true); !finished.ok()) return finished.status();
  if (step.state != pipeline_->step().state) {
    return absl::InvalidArgumentError(
        "the new step's parameters and optimizer slots differ from the running one's (names, types or initializers)");
  }
  absl::StatusOr<ir::TensorMap> state = pipeline_->State();
  if (!state.ok()) return state.status();
  // The new actors start before the old ones go, so that a failure leaves
  // the running pipeline as it was.
  absl::StatusOr<std::unique_ptr<controller::Launcher>> launcher = MakeLauncher();
  if (!launcher.ok()) return launcher.status();
  absl::StatusOr<std::unique_ptr<controller::Pipeline>> pipeline =
      controller::Pipeline::Create(std::move(step), schedule, ir::TensorSources(*state), *std::move(launcher),
                                   pipeline_->steps_done(), CompileOptionsFor());
  if (!pipeline.ok()) return pipeline.status();
  pipeline_ = *std::move(pipeline);
  debugger_->Reset(pipeline_.get());
  fill_queue_.reset();
  schedule_ = std::move(schedule);
  DropRestartPoint("the schedule or the step changed");
  return absl::OkStatus();
}

}  // namespace tandem
