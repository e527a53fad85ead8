// `tandem train`: trains an example model, pipelined over actors (or on the
// single-process reference interpreter), and reports its losses.
//
// A run reads in order: check the options (CheckOptions), decide where
// training starts (StartingPoint: fresh, or after a checkpoint), build the
// trainer and the --verify reference (Trainers), run the steps (TrainLoop),
// and report (Report).
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

namespace tandem::cli {
namespace {

// --eval-batches: each is a forward step of the whole model.
constexpr int64_t kMaxEvalBatches = 65536;

struct TrainOptions {
  examples::ExampleJobOptions model;
  ScheduleOptions schedule;
  LauncherOptions launcher;
  int64_t steps = 100;
  std::string dispatch = "fused";
  bool verify = false;
  int64_t log_every = 1;
  std::optional<std::string> trace;
  int64_t trace_steps = 10;
  std::optional<std::string> losses;
  std::optional<std::string> checkpoint_dir;
  int64_t checkpoint_every = 0;
  std::optional<std::string> resume;
  std::optional<std::string> import;  // a safetensors file of the parameters to start from
  int64_t eval_batches = 4;
  int64_t eval_every = 0;  // steps between validation losses (0: only at the end)
  std::optional<std::string> plan;
  // What --plan's file says it was made for (ApplyPlanFile).
  std::string plan_model;
  std::string plan_device;
  std::optional<std::string> fill;
  int32_t max_restarts = 0;
  bool checkpoint_wait = false;  // each checkpoint written before the next step

  bool pipelined() const { return launcher.launcher != "reference"; }
};

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

// Ctrl-C (SIGINT) or SIGTERM during training: the step loop stops after the
// current step and unwinds, so the launcher shuts its actors down and
// removes its run directory. The handler resets itself, so a second Ctrl-C
// ends the process at once (the actors then die with it: PR_SET_PDEATHSIG).
volatile sig_atomic_t g_interrupted = 0;

void OnInterrupt(int signal) { g_interrupted = signal; }

void CatchInterrupts() {
  struct sigaction action {};
  action.sa_handler = OnInterrupt;
  action.sa_flags = SA_RESETHAND;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

float Mean(const std::vector<float>& values) {
  return std::accumulate(values.begin(), values.end(), 0.0f) / static_cast<float>(values.size());
}

// What a step's numbers say: whether its losses and its stages' gradient
// norms are finite, and whether its update was skipped for that.
struct Finiteness {
  std::vector<std::string> problems;  // "the loss of microbatch 3 is nan", ...
  bool update_skipped = false;
};

Finiteness CheckFinite(const cpu::StepResult& result, bool skip_nonfinite_updates) {
  Finiteness finiteness;
  for (size_t microbatch = 0; microbatch < result.losses.size(); ++microbatch) {
    if (std::isfinite(result.losses[microbatch])) continue;
    finiteness.problems.push_back(absl::StrFormat("the loss of microbatch %d is %f", microbatch, result.losses[microbatch]));
    break;
  }
  // The update's own test (ir/trace.h): the stages' partials added in
  // stage order in f32 are not finite.
  float total = 0;
  for (const auto& [stage, squares] : result.gradient_squares) {
    total += squares;
    if (std::isfinite(squares)) continue;
    finiteness.problems.push_back(
        absl::StrFormat("the gradients of stage %d are not finite (their sum of squares is %f)", stage, squares));
  }
  finiteness.update_skipped = skip_nonfinite_updates && !result.gradient_squares.empty() && !std::isfinite(total);
  return finiteness;
}

// OutOfRange naming the step and what in it is not a finite number. A run
// stops there: the parameters it would save are no longer numbers, and the
// checkpoints it wrote before stay the newest.
absl::Status NonFiniteError(const Finiteness& finiteness, int64_t step, bool skip_nonfinite_updates) {
  return absl::OutOfRangeError(absl::StrFormat(
      "step %d: %s: the run stops here and saves no checkpoint of it (the last one saved stays the newest). A "
      "smaller --lr, --clip-grad-norm, or a look at the data or the imported parameters may help%s",
      step, absl::StrJoin(finiteness.problems, "; "),
      skip_nonfinite_updates ? " (--on-nonfinite skip skips a step only when its gradients are not finite)"
                             : "; --on-nonfinite skip would leave the weights as they were and go on"));
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

bool SameSquares(const std::map<int32_t, float>& a, const std::map<int32_t, float>& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [stage, squares] : a) {
    auto it = b.find(stage);
    if (it == b.end() || std::memcmp(&squares, &it->second, sizeof(float)) != 0) return false;
  }
  return true;
}

// What a run of `tandem train` measured, for its report.
struct RunTotals {
  int64_t steps_run = 0;
  int64_t steps_skipped = 0;  // --on-nonfinite skip: updates left out
  double seconds = 0;
  double bubble_sum = 0;
  int64_t rpcs = 0;
  float last_loss = 0;
  size_t restarts_reported = 0;  // the trainer's restarts printed so far
  // --losses: {"step": N, "losses": [one per microbatch]} per step. Each f32
  // is stored as the double of the same value, which JSON prints in the
  // shortest form that reads back to that double: exact to the bit.
  nlohmann::ordered_json losses = nlohmann::ordered_json::array();
};

// The validation loss, --eval-batches batches of it, as a trainer's model
// is now: a pipeline evaluates through a pipeline of its own (the model's
// forward step, traced once), the reference on its state.
class Evaluator {
 public:
  Evaluator(const examples::ExampleJob& job, int64_t batches) : job_(job), batches_(batches) {}
  ~Evaluator() {
    std::error_code ignored;
    if (!scratch_.empty()) std::filesystem::remove_all(scratch_, ignored);
  }
  absl::StatusOr<std::vector<float>> Validate(Trainer& trainer) {
    if (trainer.compiled() == nullptr) return trainer.Validate(job_, nullptr, batches_, "");
    if (!forward_.has_value()) {
      absl::StatusOr<ir::TrainStep> forward = job_.forward_step();
      if (!forward.ok()) return forward.status();
      forward_ = *std::move(forward);
      // The state the evaluating actors read goes here, a checkpoint at a time.
      const char* tmpdir = std::getenv("TMPDIR");
      std::string pattern =
          absl::StrCat(tmpdir != nullptr && tmpdir[0] != '\0' ? tmpdir : "/tmp", "/tandem-eval-XXXXXX");
      if (mkdtemp(pattern.data()) == nullptr) {
        return absl::UnavailableError(absl::StrCat("cannot make a directory for the evaluation: ", pattern));
      }
      scratch_ = pattern;
    }
    return trainer.Validate(job_, &*forward_, batches_, scratch_);
  }

 private:
  const examples::ExampleJob& job_;
  const int64_t batches_;
  std::optional<ir::TrainStep> forward_;
  std::string scratch_;
};

// Prints the restarts the trainer made since the last call, one line each.
void ReportRestarts(const Trainer& trainer, Progress& progress, RunTotals& totals, std::ostream& out) {
  const std::vector<SessionRestart> restarts = trainer.Restarts();
  if (restarts.size() <= totals.restarts_reported) return;
  progress.Clear();
  for (size_t i = totals.restarts_reported; i < restarts.size(); ++i) out << restarts[i].Describe() << "\n";
  totals.restarts_reported = restarts.size();
}

// "restarts: 2 of 3 (12 steps redone, 8.1 s lost)", or "" without --max-restarts.
std::string RestartSummary(const std::vector<SessionRestart>& restarts, int32_t max_restarts) {
  if (max_restarts <= 0) return "";
  int64_t redone = 0;
  double lost = 0;
  for (const SessionRestart& restart : restarts) {
    redone += restart.steps_redone;
    lost += restart.seconds_lost;
  }
  return absl::StrFormat("restarts: %d of %d (%d %s redone, %.1f s lost)", restarts.size(), max_restarts, redone,
                         redone == 1 ? "step" : "steps", lost);
}

// The step loop: runs steps_done + 1 .. --steps, verifying, checkpointing
// and tracing as asked. Returns the exit code, 0 when every step ran.
int TrainLoop(const CLI::App& train, const TrainOptions& options, const examples::ExampleJob& job, int64_t steps_done,
              Trainer& trainer, Trainer* reference, FillRun* fill, std::optional<controller::StepTrace>& trace,
              const std::optional<std::string>& checkpoint_dir, Evaluator& evaluator, RunTotals& totals,
              CommandStreams& streams) {
  using Clock = std::chrono::steady_clock;
  Progress progress(streams.out, &streams.out == &std::cout && isatty(STDOUT_FILENO) != 0);
  CatchInterrupts();
  for (int64_t step = steps_done + 1; step <= options.steps; ++step) {
    if (g_interrupted != 0) {
      progress.Clear();
      streams.err << CommandPath(train) << ": interrupted by " << strsignal(g_interrupted) << " before step " << step
                  << "; shutting the actors down\n";
      return 128 + g_interrupted;
    }
    absl::StatusOr<std::vector<ir::TensorMap>> next_batch = job.train_batch(static_cast<uint64_t>(step - 1));
    if (!next_batch.ok()) {
      progress.Clear();
      return Failure(streams.err, train,
                     absl::Status(next_batch.status().code(),
                                  absl::StrFormat("step %d: %s", step, next_batch.status().message())));
    }
    const std::vector<ir::TensorMap>& batch = *next_batch;
    const Clock::time_point start = Clock::now();
    absl::StatusOr<cpu::StepResult> result = trainer.Step(batch, step);
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    ReportRestarts(trainer, progress, totals, streams.out);
    if (!result.ok()) {
      progress.Clear();
      return Failure(
          streams.err, train,
          absl::Status(result.status().code(), absl::StrFormat("step %d: %s", step, result.status().message())));
    }
    const std::vector<float>& losses = result->losses;
    const bool skip_nonfinite = options.model.skip_nonfinite_updates;
    const Finiteness finiteness = CheckFinite(*result, skip_nonfinite);
    if (!finiteness.problems.empty() && !finiteness.update_skipped) {
      progress.Clear();
      return Failure(streams.err, train, NonFiniteError(finiteness, step, skip_nonfinite));
    }
    ++totals.steps_run;
    totals.seconds += seconds;
    totals.last_loss = Mean(losses);
    if (finiteness.update_skipped) ++totals.steps_skipped;
    if (options.losses.has_value()) {
      totals.losses.push_back({{"step", step}, {"losses", std::vector<double>(losses.begin(), losses.end())}});
    }
    if (reference != nullptr) {
      absl::StatusOr<cpu::StepResult> expected = reference->Step(batch, step);
      if (!expected.ok()) return Failure(streams.err, train, expected.status());
      if (!SameBits(losses, expected->losses) || !SameSquares(result->gradient_squares, expected->gradient_squares)) {
        progress.Clear();
        streams.err << absl::StrFormat("%s: --verify failed at step %d: loss %.9g, reference %.9g%s\n",
                                       CommandPath(train), step, totals.last_loss, Mean(expected->losses),
                                       SameBits(losses, expected->losses) ? " (the gradient norms differ)" : "");
        return 1;
      }
    }
    std::string line =
        absl::StrFormat("step %5d/%d  loss %.4f  %7.1f ms/step  %9.0f %s/s", step, options.steps, totals.last_loss,
                        seconds * 1e3, static_cast<double>(job.items_per_step) / seconds, job.item_name);
    if (finiteness.update_skipped) {
      absl::StrAppend(&line, "  skipped: ", absl::StrJoin(finiteness.problems, "; "));
    }
    if (const controller::StepReport* report = trainer.last_report()) {
      if (trace.has_value() && step - steps_done <= options.trace_steps) trace->AddStep(*report);
      const double bubble = Bubble(report->busy_ns, seconds);
      totals.bubble_sum += bubble;
      totals.rpcs += report->rpcs;
      absl::StrAppendFormat(&line, "  bubble %4.1f%%", 100 * bubble);
      if (fill != nullptr) {
        const bool was_started = fill->started();
        absl::StatusOr<std::string> note = fill->AfterStep(step - steps_done, batch, losses, seconds, *report);
        if (!note.ok()) {
          progress.Clear();
          return Failure(streams.err, train,
                         absl::Status(note.status().code(), absl::StrFormat("step %d: %s", step, note.status().message())));
        }
        line += *note;
        // The programs changed: trace the steps with fill from here on.
        if (trace.has_value() && fill->started() && !was_started) trace.emplace(*trainer.compiled());
      }
    }
    // A checkpoint begun behind the steps is put in place once its files are.
    bool save_noted = false;
    if (checkpoint_dir.has_value() && !options.checkpoint_wait) {
      absl::StatusOr<std::string> finished = trainer.FinishCheckpoint(/*wait=*/false);
      ReportRestarts(trainer, progress, totals, streams.out);
      if (!finished.ok()) {
        progress.Clear();
        return Failure(streams.err, train,
                       absl::Status(finished.status().code(),
                                    absl::StrFormat("step %d: checkpoint: %s", step, finished.status().message())));
      }
      if (!finished->empty()) {
        absl::StrAppendFormat(&line, "  saved %s (written behind the steps)", *finished);
        save_noted = true;
      }
    }
    const bool save = checkpoint_dir.has_value() &&
                      (step == options.steps || (options.checkpoint_every > 0 && step % options.checkpoint_every == 0));
    if (save) {
      const Clock::time_point save_start = Clock::now();
      // The last one, and every one with --checkpoint-wait, is written now.
      const bool now = options.checkpoint_wait || step == options.steps;
      absl::StatusOr<std::string> saved = std::string();
      if (now) {
        saved = trainer.SaveCheckpoint(*checkpoint_dir);
      } else if (absl::Status begun = trainer.BeginCheckpoint(*checkpoint_dir); !begun.ok()) {
        saved = begun;
      }
      ReportRestarts(trainer, progress, totals, streams.out);
      if (!saved.ok()) {
        progress.Clear();
        return Failure(streams.err, train,
                       absl::Status(saved.status().code(),
                                    absl::StrFormat("checkpoint after step %d: %s", step, saved.status().message())));
      }
      const double ms = std::chrono::duration<double, std::milli>(Clock::now() - save_start).count();
      if (now) {
        absl::StrAppendFormat(&line, "  saved %s (%.0f ms)", *saved, ms);
      } else {
        absl::StrAppendFormat(&line, "  saving the checkpoint after step %d behind the steps (%.0f ms to take it)",
                              step, ms);
      }
      save_noted = true;
    }
    // --eval-every: the validation loss now (the last step's comes with the summary).
    bool evaluated = false;
    if (options.eval_every > 0 && step % options.eval_every == 0 && step != options.steps) {
      absl::StatusOr<std::vector<float>> validation = evaluator.Validate(trainer);
      ReportRestarts(trainer, progress, totals, streams.out);
      if (!validation.ok()) {
        progress.Clear();
        return Failure(streams.err, train,
                       absl::Status(validation.status().code(), absl::StrFormat("step %d: evaluation: %s", step,
                                                                                validation.status().message())));
      }
      if (reference != nullptr) {
        absl::StatusOr<std::vector<float>> expected = evaluator.Validate(*reference);
        if (!expected.ok()) return Failure(streams.err, train, expected.status());
        if (!SameBits(*validation, *expected)) {
          progress.Clear();
          streams.err << absl::StrFormat("%s: --verify failed at step %d: validation loss %.9g, reference %.9g\n",
                                         CommandPath(train), step, Mean(*validation), Mean(*expected));
          return 1;
        }
      }
      absl::StrAppendFormat(&line, "  validation loss %.4f", Mean(*validation));
      evaluated = true;
    }
    progress.Show(line, evaluated || save_noted || step % options.log_every == 0 || step == steps_done + 1 ||
                            step == options.steps);
  }
  return 0;
}

// Writes --losses, checks the final state against the reference, and
// prints the summary. Returns the exit code.
int Report(const CLI::App& train, const TrainOptions& options, const examples::ExampleJob& job, int64_t steps_done,
           Trainer& trainer, Trainer* reference, FillRun* fill, const std::optional<controller::StepTrace>& trace,
           const schedules::Schedule& schedule, const RunTotals& totals, Evaluator& evaluator,
           CommandStreams& streams) {
  std::ostream& out = streams.out;
  if (options.losses.has_value()) {
    std::ofstream file(*options.losses);
    file << schedules::JsonText({{"steps", totals.losses}}) << "\n";
    file.close();
    if (!file) {
      return Failure(streams.err, train,
                     absl::UnavailableError(absl::StrCat("cannot write the losses to ", *options.losses)));
    }
  }
  // The whole model comes to the controller only to be checked here.
  if (reference != nullptr) {
    absl::StatusOr<ir::TensorMap> state = trainer.State();
    if (!state.ok()) return Failure(streams.err, train, state.status());
    absl::StatusOr<ir::TensorMap> expected = reference->State();
    if (!expected.ok()) return Failure(streams.err, train, expected.status());
    for (const auto& [name, tensor] : *expected) {
      auto it = state->find(name);
      if (it == state->end() || !it->second.BitwiseEquals(tensor)) {
        streams.err << CommandPath(train) << ": --verify failed: state '" << name << "' differs from the reference\n";
        return 1;
      }
    }
    out << absl::StrFormat("verify: losses of %d steps and all %d state tensors bit-identical to the reference\n",
                           totals.steps_run, expected->size());
  }
  std::vector<float> validation;
  if (options.eval_batches > 0) {
    if (g_interrupted != 0) {
      streams.err << CommandPath(train) << ": interrupted by " << strsignal(g_interrupted)
                  << " before the evaluation\n";
      return 128 + g_interrupted;
    }
    absl::StatusOr<std::vector<float>> losses = evaluator.Validate(trainer);
    if (!losses.ok()) return Failure(streams.err, train, losses.status());
    validation = *std::move(losses);
    if (reference != nullptr) {
      absl::StatusOr<std::vector<float>> expected = evaluator.Validate(*reference);
      if (!expected.ok()) return Failure(streams.err, train, expected.status());
      if (!SameBits(validation, *expected)) {
        streams.err << absl::StrFormat("%s: --verify failed: validation loss %.9g, reference %.9g\n",
                                       CommandPath(train), Mean(validation), Mean(*expected));
        return 1;
      }
      out << absl::StrFormat("verify: validation losses of %d microbatches bit-identical to the reference\n",
                             validation.size());
    }
  }
  const double steps_run = static_cast<double>(totals.steps_run);
  const double mean_step = totals.seconds / steps_run;
  out << absl::StrFormat("done: %d steps", totals.steps_run);
  if (steps_done > 0) out << absl::StrFormat(" (%d to %d)", steps_done + 1, options.steps);
  if (options.model.skip_nonfinite_updates) {
    out << absl::StrFormat(", %d skipped (gradients not finite)", totals.steps_skipped);
  }
  out << absl::StrFormat(", final train loss %.4f", totals.last_loss);
  if (!validation.empty()) out << absl::StrFormat(", validation loss %.4f", Mean(validation));
  out << absl::StrFormat(", mean step %.1f ms, %.0f %s/s", mean_step * 1e3,
                         static_cast<double>(job.items_per_step) / mean_step, job.item_name);
  const controller::CompiledStep* compiled = trainer.compiled();
  if (compiled == nullptr) {
    out << "\n";
    return 0;
  }
  out << absl::StrFormat(", mean bubble %.1f%%\n", 100 * totals.bubble_sum / steps_run);
  out << absl::StrFormat("control plane: %.1f step RPCs per step (%s dispatch, %d actors)\n",
                         static_cast<double>(totals.rpcs) / steps_run, options.dispatch, compiled->num_actors);
  if (const std::string restarts = RestartSummary(trainer.Restarts(), options.max_restarts); !restarts.empty()) {
    out << restarts << "\n";
  }
  if (trace.has_value()) {
    if (absl::Status status = WriteTrace(*trace, schedule, *options.trace, out); !status.ok()) {
      return Failure(streams.err, train, status);
    }
  }
  if (fill != nullptr) {
    if (absl::Status status = fill->Report(out); !status.ok()) return Failure(streams.err, train, status);
  }
  // A device-resident run also measures its device memory.
  const controller::StepReport& last = *trainer.last_report();
  const bool resident = std::any_of(last.device_peak_bytes.begin(), last.device_peak_bytes.end(),
                                    [](int64_t bytes) { return bytes > 0; });
  out << "actor  bytes sent/step  static peak bytes  measured peak bytes" << (resident ? "  device peak bytes" : "")
      << "\n";
  for (int32_t actor = 0; actor < compiled->num_actors; ++actor) {
    out << absl::StrFormat("%5d  %15d  %17d  %19d", actor, compiled->stats[actor].bytes_sent,
                           compiled->ProgramOf(actor).static_peak_bytes, last.peak_live_bytes[actor]);
    if (resident) out << absl::StrFormat("  %17d", last.device_peak_bytes[actor]);
    out << "\n";
  }
  if (std::optional<int64_t> peak = controller::PeakResidentBytes(); peak.has_value()) {
    out << absl::StrFormat("controller: peak resident memory %d bytes (%s)\n", *peak, ir::FormatBytes(*peak));
  }
  return 0;
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
  std::optional<examples::ExampleJob> job;
  auto make_job = [&]() -> absl::StatusOr<const ir::TrainStep*> {
    // A decaying learning rate reaches its floor at the last step unless told.
    if (options.model.schedule.decay_steps == 0) options.model.schedule.decay_steps = options.steps;
    absl::StatusOr<examples::ExampleJob> made = examples::MakeExampleJob(options.model);
    if (!made.ok()) return made.status();
    job = *std::move(made);
    return &job->step;
  };
  // The reference launcher resolves the schedule too: its stages and its
  // weight-update semantics (pipedream, 2bw) shape the traced step, so the
  // reference trains exactly what the pipeline would.
  bool usage_error = false;
  absl::StatusOr<schedules::Schedule> resolved =
      ResolveModelSchedule(train, options.schedule, options.model, make_job, usage_error);
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
