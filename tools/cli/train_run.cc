#include "tools/cli/train_run.h"

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
#include <numeric>
#include <ostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "backends/cpu/interpreter.h"
#include "controller/session.h"
#include "ir/bitwise.h"
#include "schedules/json_text.h"
#include "tools/cli/progress.h"

namespace tandem::cli {
namespace {

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

bool SameSquares(const std::map<int32_t, float>& a, const std::map<int32_t, float>& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [stage, squares] : a) {
    auto it = b.find(stage);
    if (it == b.end() || std::memcmp(&squares, &it->second, sizeof(float)) != 0) return false;
  }
  return true;
}

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

}  // namespace

Evaluator::~Evaluator() {
  std::error_code ignored;
  if (!scratch_.empty()) std::filesystem::remove_all(scratch_, ignored);
}

absl::StatusOr<std::vector<float>> Evaluator::Validate(Trainer& trainer, Trainer* reference) {
  absl::StatusOr<std::vector<float>> losses = Losses(trainer);
  if (!losses.ok() || reference == nullptr) return losses;
  absl::StatusOr<std::vector<float>> expected = Losses(*reference);
  if (!expected.ok()) return expected.status();
  if (!ir::BitwiseEqual(*losses, *expected)) {
    return absl::DataLossError(absl::StrFormat("--verify failed: validation loss %.9g, reference %.9g",
                                               Mean(*losses), Mean(*expected)));
  }
  return losses;
}

absl::StatusOr<std::vector<float>> Evaluator::Losses(Trainer& trainer) {
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
      if (!ir::BitwiseEqual(losses, expected->losses) || !SameSquares(result->gradient_squares, expected->gradient_squares)) {
        progress.Clear();
        streams.err << absl::StrFormat("%s: --verify failed at step %d: loss %.9g, reference %.9g%s\n",
                                       CommandPath(train), step, totals.last_loss, Mean(expected->losses),
                                       ir::BitwiseEqual(losses, expected->losses) ? " (the gradient norms differ)" : "");
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
      absl::StatusOr<std::vector<float>> validation = evaluator.Validate(trainer, reference);
      ReportRestarts(trainer, progress, totals, streams.out);
      if (!validation.ok()) {
        progress.Clear();
        return Failure(streams.err, train,
                       absl::Status(validation.status().code(), absl::StrFormat("step %d: evaluation: %s", step,
                                                                                validation.status().message())));
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
    absl::StatusOr<std::vector<float>> losses = evaluator.Validate(trainer, reference);
    if (!losses.ok()) return Failure(streams.err, train, losses.status());
    validation = *std::move(losses);
    if (reference != nullptr) {
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

}  // namespace tandem::cli
