#include "controller/session.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "controller/checkpoint.h"
#include "controller/local_launcher.h"

namespace tandem {
namespace {

namespace fs = std::filesystem;

bool IsExecutable(const fs::path& path) { return access(path.c_str(), X_OK) == 0 && fs::is_regular_file(path); }

}  // namespace

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
  return StartFrom(std::move(step), std::move(schedule), loaded->state, loaded->step, std::move(options));
}

Session::~Session() = default;

controller::CompileOptions Session::CompileOptionsFor() const { return {.remat = options_.remat}; }

absl::StatusOr<controller::StepReport> Session::Step(const std::vector<ir::TensorMap>& microbatches) {
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

absl::StatusOr<ir::TensorMap> Session::State() { return pipeline_->State(); }

std::string Session::DescribeActor(ActorId actor) const { return pipeline_->launcher().DescribeActor(actor); }

absl::StatusOr<std::string> Session::SaveCheckpoint(const std::string& root) {
  return controller::SaveCheckpoint(*pipeline_, root);
}

absl::Status Session::SetSchedule(schedules::Schedule schedule) {
  return Recompile(pipeline_->step(), std::move(schedule));
}

absl::Status Session::Recompile(ir::TrainStep step, schedules::Schedule schedule) {
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
  return absl::OkStatus();
}

}  // namespace tandem
