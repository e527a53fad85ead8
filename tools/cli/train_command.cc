// `tandem train`: trains an example model, pipelined over actors (or on the
// single-process reference interpreter), and reports its losses.
//
// A run reads in order: check the options (CheckOptions), decide where
// training starts (StartingPoint: fresh, or after a checkpoint), build the
// trainer and the --verify reference (Trainers), run the steps (TrainLoop),
// and report (Report); the last two live in tools/cli/train_run.h.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <numeric>
#include <ostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "backends/cpu/interpreter.h"
#include "backends/cpu/kernels.h"
#include "controller/checkpoint.h"
#include "controller/memory_fit.h"
#include "controller/session.h"
#include "controller/step_trace.h"
#include "ir/device_spec.h"
#include "ir/safetensors.h"
#include "nlohmann/json.hpp"
#include "schedules/json_text.h"
#include "tools/cli/commands.h"
#include "tools/cli/fill_run.h"
#include "tools/cli/model_options.h"
#include "tools/cli/model_parameters.h"
#include "tools/cli/pipeline_options.h"
#include "tools/cli/plan_options.h"
#include "tools/cli/progress.h"
#include "tools/cli/trainer.h"
#include "tools/cli/train_run.h"

namespace tandem::cli {
namespace {

// --eval-batches: each is a forward step of the whole model.
constexpr int64_t kMaxEvalBatches = 65536;


void AddTrainOptions(CLI::App& train, TrainOptions& options) {
  AddModelOptions(train, options.model);
  AddScheduleOptions(train, options.schedule);
  AddLauncherOptions(train, options.launcher, {"reference"},
                     ", or reference (no pipeline: the single-process interpreter)");
  AddIntegerOption(train, "--steps", options.steps, "training steps");
  train.add_option("--dispatch", options.dispatch, "fused (one call per actor per step) or per-task (for measurement)")
      ->check(CLI::IsMember({"fused", "per-task"}))
      ->capture_default_str();
  train
      .add_option_function<std::string>(
          "--on-nonfinite",
          [&options](const std::string& mode) { options.model.skip_nonfinite_updates = mode == "skip"; },
          "a step whose loss or gradients are not finite (NaN, infinity): stop (the run ends there, naming the step "
          "and the stages) or skip (the weights stay as they were, and the run goes on; counted in the summary)")
      ->check(CLI::IsMember({"stop", "skip"}))
      ->default_str("stop");
  train.add_flag("--verify", options.verify, "also run the reference and fail unless bit-identical");
  AddIntegerOption(train, "--log-every", options.log_every, "keep a progress line every N steps");
  train.add_option("--trace", options.trace,
                   "write the measured trace (Chrome/Perfetto JSON) of the first --trace-steps steps");
  AddIntegerOption(train, "--trace-steps", options.trace_steps, "steps the measured trace covers");
  train.add_option("--losses", options.losses,
                   "write every step's per-microbatch losses to FILE (JSON, exact to the bit)");
  train.add_option("--checkpoint-dir", options.checkpoint_dir, "save checkpoints under DIR (step-NNNNNNNN/ each)");
  train
      .add_option("--checkpoint-every", options.checkpoint_every,
                  "steps between checkpoints (0: only after the last step)")
      ->check(AtLeast(options.checkpoint_every, 0))
      ->capture_default_str();
  train
      .add_option("--max-restarts", options.max_restarts,
                  "when an actor is lost (its process died or was killed, it stopped or went silent, its node went "
                  "away), end the actors, start them again from the newest checkpoint (or the start) and go on, at "
                  "most N times; the results are those of a run that never failed")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  train.add_flag("--checkpoint-wait", options.checkpoint_wait,
                 "write each checkpoint before the next step runs (by default the actors write it behind the next "
                 "steps, and it is put in place once every file is durable)");
  train.add_option("--resume", options.resume, "continue from the newest checkpoint under DIR, or the checkpoint DIR");
  train.add_option("--import", options.import,
                   "start from the parameters of a safetensors FILE (`tandem export` writes them; names and shapes "
                   "must be the model's) or of a Hugging Face model directory (whose config.json gives the model "
                   "and its shape), with fresh optimizer state")
      ->excludes("--resume");
  AddIntegerOption(train, "--eval-batches", options.eval_batches,
                   "validation steps' worth of batches for the validation loss (at the end, and every "
                   "--eval-every steps); a pipeline evaluates through a forward-only pipeline of its own, started "
                   "from the actors' state, so the controller never holds the model", 0)
      ->check(CLI::Range(int64_t{0}, kMaxEvalBatches));
  AddIntegerOption(train, "--eval-every", options.eval_every,
                   "also evaluate the validation loss every K steps (0: only after the last)", 0);
  train.add_option("--fill", options.fill,
                   "run a fill job in the pipeline's bubbles: infer:mlp[,batch=N,layers=N,dim=N,items=N] or "
                   "train:mlp[,batch=N,layers=N,dim=N,lr=X] (a copy of the model trained on each filling actor); "
                   "the same pipeline without fill runs beside it for comparison");
  train.add_option("--plan", options.plan,
                   "run a plan from `tandem plan`: its schedule, actors, stages, microbatches and rematerialisation");
}

// What the compiled step rematerialises, for the executor line.
std::string RematNote(const std::vector<bool>& remat) {
  std::vector<int32_t> stages;
  for (int32_t s = 0; s < static_cast<int32_t>(remat.size()); ++s) {
    if (remat[s]) stages.push_back(s);
  }
  if (stages.empty()) return "";
  if (stages.size() == remat.size()) return ", each rematerialised";
  return absl::StrCat(", ", stages.size() == 1 ? "stage " : "stages ", absl::StrJoin(stages, ", "), " rematerialised");
}

// Combinations of options that do not go together: the message, or "".
std::string CheckOptions(const CLI::App& train, const TrainOptions& options) {
  if (options.trace.has_value() && !options.pipelined())
    return "--trace needs a pipeline (--launcher local or threads)";
  if (!options.pipelined() && (options.checkpoint_dir.has_value() || options.resume.has_value())) {
    return "checkpoints need a pipeline (--launcher local or threads)";
  }
  if (train.count("--checkpoint-every") > 0 && !options.checkpoint_dir.has_value() && !options.resume.has_value()) {
    return "--checkpoint-every needs --checkpoint-dir DIR";
  }
  if (options.eval_every > 0 && options.eval_batches == 0) return "--eval-every needs --eval-batches above 0";
  if (options.max_restarts > 0 && !options.pipelined()) {
    return "--max-restarts needs a pipeline (--launcher local or threads)";
  }
  if (options.fill.has_value()) {
    if (!options.pipelined()) return "--fill needs a pipeline (--launcher local or threads)";
    if (options.max_restarts > 0) return "--fill does not go with --max-restarts yet";
    if (options.checkpoint_dir.has_value() || options.resume.has_value()) {
      return "--fill does not go with checkpoints yet";
    }
    if (options.model.replicas > 1) return "--fill does not go with data-parallel replicas yet";
  }
  return "";
}

// Where training starts: step 1 from the initial state, or after a
// checkpoint's step from its state (checked against this job's model).
struct Start {
  ir::StateSources state;
  int64_t steps_done = 0;
  std::string checkpoint;  // the checkpoint resumed from, if any
};

// Newer checkpoints that could not be loaded are named on `err`.
absl::StatusOr<Start> StartingPoint(const TrainOptions& options, const ir::TrainStep& step, std::ostream& out,
                                    std::ostream& err) {
  if (options.import.has_value()) {
    absl::StatusOr<ir::StateSources> imported = ImportedSources(*options.import, options.model.model, step);
    if (!imported.ok()) return imported.status();
    out << "importing the parameters of " << *options.import << " (optimizer state fresh)\n";
    return Start{*std::move(imported), 0, ""};
  }
  if (!options.resume.has_value()) {
    return Start{ir::SeedSources(step), 0, ""};
  }
  absl::StatusOr<controller::LoadedCheckpoint> loaded = controller::LoadCheckpoint(*options.resume, step);
  if (!loaded.ok()) return loaded.status();
  err << controller::SkippedReport(*loaded);
  out << absl::StrFormat("resuming from %s (after step %d, saved under schedule %s on %d actors)\n", loaded->path,
                         loaded->step, loaded->schedule, loaded->actors);
  return Start{std::move(loaded->state), loaded->step, loaded->path};
}

// Where checkpoints go: --checkpoint-dir, else beside the checkpoint
// resumed from; never over newer checkpoints, and a fresh run never into a
// directory that holds some. Sets `checkpoint_dir`; returns the problem, or
// "".
std::string CheckpointDirectory(const TrainOptions& options, const Start& start,
                                std::optional<std::string>& checkpoint_dir) {
  checkpoint_dir = options.checkpoint_dir;
  if (!start.checkpoint.empty() && start.steps_done >= options.steps) {
    return absl::StrFormat("checkpoint %s is after step %d; --steps %d leaves nothing to train", start.checkpoint,
                           start.steps_done, options.steps);
  }
  if (!start.checkpoint.empty() && !checkpoint_dir.has_value()) {
    checkpoint_dir = std::filesystem::path(start.checkpoint).parent_path().string();
  }
  if (!checkpoint_dir.has_value()) return "";
  absl::StatusOr<std::vector<std::string>> existing = controller::ListCheckpoints(*checkpoint_dir);
  if (!existing.ok()) return std::string(existing.status().message());
  if (existing->empty()) return "";
  if (start.checkpoint.empty()) {
    return absl::StrCat(*checkpoint_dir, " holds checkpoints already (newest: ", existing->back(),
                        "); continue with --resume ", *checkpoint_dir, " or choose another --checkpoint-dir");
  }
  if (std::filesystem::path(existing->back()).filename() > std::filesystem::path(start.checkpoint).filename()) {
    return absl::StrCat(*checkpoint_dir, " holds a newer checkpoint (", existing->back(),
                        ") than the one resumed from; pass another --checkpoint-dir");
  }
  return "";
}

// --plan FILE: the plan's schedule, sizes and cut become the run's, and
// what it predicts is printed. An exit code, 0 when the run goes on.
int ApplyPlanFile(const CLI::App& train, TrainOptions& options, CommandStreams& streams) {
  absl::StatusOr<schedules::Plan> plan = ReadPlan(*options.plan);
  if (!plan.ok()) return Failure(streams.err, train, plan.status());
  if (absl::Status status = ApplyPlan(train, *plan, options.model, options.schedule); !status.ok()) {
    return UsageError(streams.err, train, std::string(status.message()));
  }
  options.plan_model = plan->model;
  options.plan_device = plan->device;
  streams.out << absl::StrFormat("plan %s: %s on %d actors, %d microbatches of %d, predicted step %.3f ms\n",
                                 *options.plan, plan->schedule, plan->actors, plan->microbatches,
                                 plan->microbatch_size, plan->predicted_step_s * 1e3);
  return 0;
}

// The model a job description names: what comes before its batching
// (", batch N x M microbatches, S stages; data: ..."), which a plan sets.
absl::string_view ModelShape(absl::string_view description) {
  return description.substr(0, description.find(", batch "));
}

// A note on stderr when --plan's file was made for another model or device
// than this run's: the run goes on (the plan's cut and schedule still
// apply), but its predictions were measured for what the file names.
void NotePlanMismatch(const CLI::App& train, const TrainOptions& options, absl::string_view description,
                      const ir::DeviceSpec& device, std::ostream& err) {
  const absl::string_view planned = ModelShape(options.plan_model);
  if (planned != ModelShape(description)) {
    err << CommandPath(train) << ": note: plan " << *options.plan << " was made for \"" << planned
        << "\", not this run's \"" << ModelShape(description)
        << "\": its stage cut still applies, its predictions do not\n";
  }
  const std::string device_name = ir::DeviceSpecName(device);
  if (options.plan_device != device_name) {
    err << CommandPath(train) << ": note: plan " << *options.plan << " was measured on " << options.plan_device
        << ", not this run's " << device_name << ": its predicted step time and peaks are for " << options.plan_device
        << "\n";
  }
}

// The pipelined trainer of `job` on its actors, with its step trace and
// its fill run where asked, printing what it runs on. An exit code, 0 when
// the run goes on.
int OpenPipeline(const CLI::App& train, const TrainOptions& options, const examples::ExampleJob& job,
                 const schedules::Schedule& schedule, const Start& start, const std::string& launcher_description,
                 std::unique_ptr<Trainer>& trainer, std::optional<controller::StepTrace>& trace,
                 std::optional<FillRun>& fill_run, CommandStreams& streams) {
  SessionOptions session_options;
  session_options.max_restarts = options.max_restarts;
  session_options.on_restart = [](const SessionRestart&) {};  // the step loop prints them (ReportRestarts)
  session_options.dispatch =
      options.dispatch == "fused" ? controller::Dispatch::kFused : controller::Dispatch::kPerTask;
  session_options.remat = options.schedule.RematByStage(job.step.num_stages);
  session_options.launcher = [launcher = options.launcher]() -> std::unique_ptr<controller::Launcher> {
    absl::StatusOr<LauncherChoice> made = MakeLauncher(launcher);
    return made.ok() ? std::move(made->launcher) : nullptr;
  };
  const SessionOptions baseline_options = session_options;
  absl::StatusOr<std::unique_ptr<Session>> session =
      Session::StartFrom(job.step, schedule, start.state, start.steps_done, std::move(session_options));
  if (!session.ok()) return Failure(streams.err, train, session.status());
  const controller::CompiledStep& compiled = (*session)->compiled();
  streams.out << absl::StrFormat("executor: %s, %d actors, schedule %s (%d stages%s), %s dispatch, step %016x\n",
                                 launcher_description, compiled.num_actors, compiled.schedule, compiled.num_stages,
                                 RematNote(compiled.remat),
                                 options.dispatch, compiled.hash);
  if (const std::string routes = (*session)->DescribeDataPlane(); !routes.empty()) {
    streams.out << "data plane: " << routes << "\n";
  }
  if (options.trace.has_value()) trace.emplace(compiled);
  if (options.fill.has_value()) {
    absl::StatusOr<examples::ExampleFillJob> fill_job = examples::MakeExampleFillJob(*options.fill, options.model.seed);
    if (!fill_job.ok()) return UsageError(streams.err, train, std::string(fill_job.status().message()));
    absl::StatusOr<std::unique_ptr<Session>> baseline =
        Session::StartFrom(job.step, schedule, start.state, start.steps_done, baseline_options);
    if (!baseline.ok()) return Failure(streams.err, train, baseline.status());
    streams.out << absl::StrFormat("fill: %s (%s), packed into the bubbles after %d calibration steps; the same "
                                   "pipeline without fill runs beside it\n",
                                   fill_job->name, fill_job->description, FillRun::kCalibrationSteps);
    fill_run.emplace(*std::move(fill_job), session->get(), *std::move(baseline), options.verify);
  }
  trainer = std::make_unique<PipelineTrainer>(*std::move(session));
  return 0;
}

int RunTrain(const CLI::App& train, TrainOptions& options, CommandStreams& streams) {
  if (std::string problem = CheckOptions(train, options); !problem.empty()) {
    return UsageError(streams.err, train, problem);
  }
  if (options.import.has_value()) {
    if (absl::Status status = TakeImportedModel(train, *options.import, options.model); !status.ok()) {
      return Failure(streams.err, train, status, 2);
    }
  }
  if (options.plan.has_value()) {
    if (const int code = ApplyPlanFile(train, options, streams); code != 0) return code;
  }
  // The reference (the trainer with --launcher reference, and --verify's
  // yardstick) computes on the device the actors use.
  absl::StatusOr<ir::DeviceSpec> device = DeviceFrom(options.launcher);
  if (!device.ok()) return Failure(streams.err, train, device.status(), 2);
  std::string launcher_description;
  if (options.pipelined()) {
    absl::StatusOr<LauncherChoice> launcher = MakeLauncher(options.launcher);
    if (!launcher.ok()) return Failure(streams.err, train, launcher.status(), 2);
    launcher_description = launcher->description;
  }
  // A decaying learning rate reaches its floor at the last step unless told.
  if (options.model.schedule.decay_steps == 0) options.model.schedule.decay_steps = options.steps;
  // The reference launcher resolves the schedule too: its stages and its
  // weight-update semantics (pipedream, 2bw) shape the traced step, so the
  // reference trains exactly what the pipeline would.
  std::optional<examples::ExampleJob> job;
  bool usage_error = false;
  absl::StatusOr<schedules::Schedule> resolved =
      ResolveModelSchedule(train, options.schedule, options.model, job, usage_error);
  if (!resolved.ok()) {
    return usage_error ? UsageError(streams.err, train, std::string(resolved.status().message()))
                       : Failure(streams.err, train, resolved.status());
  }
  const schedules::Schedule schedule = *std::move(resolved);
  // One BLAS thread per actor: the reference is bitwise reproducible at a
  // fixed count, and the actors share this machine's cores.
  cpu::SetBlasThreads(1);

  absl::StatusOr<Start> start = StartingPoint(options, job->step, streams.out, streams.err);
  if (!start.ok()) return Failure(streams.err, train, start.status());
  std::optional<std::string> checkpoint_dir;
  if (std::string problem = CheckpointDirectory(options, *start, checkpoint_dir); !problem.empty()) {
    return UsageError(streams.err, train, problem);
  }
  // A directory that cannot be written is found out now, not after the last step.
  if (checkpoint_dir.has_value()) {
    if (absl::Status status = controller::PrepareCheckpointRoot(*checkpoint_dir); !status.ok()) {
      return Failure(streams.err, train, status);
    }
  }

  streams.out << job->description << "\n";
  if (options.plan.has_value()) NotePlanMismatch(train, options, job->description, *device, streams.err);
  std::unique_ptr<Trainer> trainer;
  std::optional<controller::StepTrace> trace;
  std::optional<FillRun> fill_run;
  if (options.pipelined()) {
    if (const int code = OpenPipeline(train, options, *job, schedule, *start, launcher_description, trainer, trace,
                                      fill_run, streams);
        code != 0) {
      return code;
    }
  } else {
    if (absl::Status fits = ReferenceTrainer::CheckFits(job->step, *device); !fits.ok()) {
      return Failure(streams.err, train, fits);
    }
    absl::StatusOr<std::unique_ptr<Trainer>> reference =
        ReferenceTrainer::Open(job->step, start->state, *device, options.launcher.threads);
    if (!reference.ok()) return Failure(streams.err, train, reference.status(), 2);
    streams.out << "executor: single-process reference interpreter (" << (*reference)->description() << ")\n";
    trainer = *std::move(reference);
  }
  std::unique_ptr<Trainer> reference;
  if (options.verify) {
    if (absl::Status fits = ReferenceTrainer::CheckFits(job->step, *device); !fits.ok()) {
      return Failure(streams.err, train, absl::Status(fits.code(), absl::StrCat("--verify: ", fits.message())));
    }
    absl::StatusOr<std::unique_ptr<Trainer>> opened =
        ReferenceTrainer::Open(job->step, start->state, *device, options.launcher.threads);
    if (!opened.ok()) return Failure(streams.err, train, opened.status(), 2);
    reference = *std::move(opened);
  }
  streams.out.flush();

  RunTotals totals;
  FillRun* fill = fill_run.has_value() ? &*fill_run : nullptr;
  Evaluator evaluator(*job, options.eval_batches);
  int code = TrainLoop(train, options, *job, start->steps_done, *trainer, reference.get(), fill, trace,
                       checkpoint_dir, evaluator, totals, streams);
  if (code == 0) {
    code = Report(train, options, *job, start->steps_done, *trainer, reference.get(), fill, trace, schedule, totals,
                  evaluator,
                  streams);
  }
  // However the run ended: strangers who knocked are worth knowing about.
  if (const controller::RefusalCounts refused = trainer->Refusals(); refused.total() > 0) {
    streams.out << "security: refused " << refused.Describe()
                << " that could not prove the job's token (see the log lines above)\n";
  }
  return code;
}

}  // namespace

void AddTrainCommand(CommandLine& command_line) {
  CLI::App* train = command_line.Add(
      command_line.root(), "train", "train an example model",
      "[--model gpt|mlp] [--actors P] [--schedule NAME|FILE] [--microbatches M] [--steps N] [--verify] [options]",
      "Trains an example model (by default a character-level GPT on the text under /usr/share/common-licenses) "
      "pipelined over P actors, showing step, loss, throughput and the measured bubble, and ends with a summary. "
      "--launcher local (the default) runs one actor process per actor; threads runs them as threads of this "
      "process (for debugging); reference runs the single-process interpreter. --verify also runs the reference "
      "and fails unless losses and parameters are bit-identical. --checkpoint-dir saves every actor's parameters "
      "and optimizer state every N steps and after the last; --resume continues from the newest checkpoint under "
      "DIR (or the checkpoint DIR) up to --steps in all, bit-identical to a run that was never interrupted.");
  auto options = std::make_shared<TrainOptions>();
  AddTrainOptions(*train, *options);
  command_line.OnRun(
      train, [train, options, &streams = command_line.streams()] { return RunTrain(*train, *options, streams); });
}

}  // namespace tandem::cli
