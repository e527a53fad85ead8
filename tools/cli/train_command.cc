// `tandem train`: trains an example model, pipelined over actors (or on the
// single-process reference interpreter), and reports its losses.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <cstring>
#include <fstream>
#include <iostream>
#include <numeric>
#include <ostream>

#include "absl/strings/str_format.h"
#include "controller/checkpoint.h"
#include "controller/local_launcher.h"
#include "controller/session.h"
#include "controller/step_trace.h"
#include "ir/kernels.h"
#include "tools/cli/commands.h"
#include "tools/cli/example_job.h"
#include "schedules/resolve.h"
#include "tools/cli/launcher_option.h"

namespace tandem::cli {
namespace {

constexpr char kUsage[] =
    "usage: tandem train [--model gpt|mlp] [--actors P] [--schedule NAME|FILE] [--microbatches M]\n"
    "                    [--steps N] [--data FILE] [--verify] [--launcher local|threads|reference]\n"
    "                    [--transport shm|tcp] [--dispatch fused|per-task]\n"
    "                    [--checkpoint-dir DIR [--checkpoint-every N]] [--resume DIR]\n"
    "                    [--trace FILE] [--losses FILE] [options]\n\n"
    "Trains an example model (by default a character-level GPT on the text under\n"
    "/usr/share/common-licenses) pipelined over P actors, showing step, loss,\n"
    "throughput and the measured bubble, and ends with a summary. --launcher local\n"
    "(the default) runs one actor process per actor; threads runs them as threads\n"
    "of this process (for debugging); reference runs the single-process\n"
    "interpreter. --verify also runs the reference and fails unless losses and\n"
    "parameters are bit-identical. --checkpoint-dir saves every actor's parameters\n"
    "and optimizer state every N steps and after the last; --resume continues from\n"
    "the newest checkpoint under DIR (or the checkpoint DIR) up to --steps in all,\n"
    "bit-identical to a run that was never interrupted.\n\n";

float Mean(const std::vector<float>& values) {
  return std::accumulate(values.begin(), values.end(), 0.0f) / static_cast<float>(values.size());
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) return false;
  }
  return true;
}

// Runs one step of whichever executor was chosen.
class Trainer {
 public:
  virtual ~Trainer() = default;
  virtual absl::StatusOr<std::vector<float>> Step(const std::vector<ir::TensorMap>& batch, int64_t step) = 0;
  virtual absl::StatusOr<ir::TensorMap> State() = 0;
};

// The single-process reference: on the CPU's reference kernels, or on one
// GPU (the reference a pipelined --device cuda run is compared with).
class ReferenceTrainer : public Trainer {
 public:
  ReferenceTrainer(const ir::TrainStep& step, ir::TensorMap state, std::shared_ptr<actor::Device> device)
      : step_(step), state_(std::move(state)), device_(std::move(device)) {}
  absl::StatusOr<std::vector<float>> Step(const std::vector<ir::TensorMap>& batch, int64_t step) override {
    ir::GraphRunner runner = [this](const ir::Graph& graph, const ir::TensorMap& inputs) {
      return device_->RunGraph(graph, inputs);
    };
    absl::StatusOr<ir::StepResult> result = ir::RunReferenceStep(step_, state_, batch, step, runner);
    if (!result.ok()) return result.status();
    return result->losses;
  }
  absl::StatusOr<ir::TensorMap> State() override { return state_; }

 private:
  const ir::TrainStep& step_;
  ir::TensorMap state_;
  std::shared_ptr<actor::Device> device_;
};

class PipelineTrainer : public Trainer {
 public:
  explicit PipelineTrainer(std::unique_ptr<Session> session) : session_(std::move(session)) {}
  absl::StatusOr<std::vector<float>> Step(const std::vector<ir::TensorMap>& batch, int64_t step) override {
    absl::StatusOr<controller::StepReport> report = session_->Step(batch);
    if (!report.ok()) return report.status();
    last_ = *std::move(report);
    return last_.losses;
  }
  absl::StatusOr<ir::TensorMap> State() override { return session_->State(); }
  Session& session() { return *session_; }
  // The last step's report (peaks, compute time per actor).
  const controller::StepReport& last() const { return last_; }

 private:
  std::unique_ptr<Session> session_;
  controller::StepReport last_;
};

int Fail(std::ostream& err, const absl::Status& status, int code = 1) {
  err << "tandem train: " << absl::StatusCodeToString(status.code()) << ": " << status.message() << "\n";
  return code;
}

// The fraction of actor-time not spent computing: 1 - sum(busy) / (P * wall).
double Bubble(const std::vector<int64_t>& busy_ns, double wall_seconds) {
  if (busy_ns.empty() || wall_seconds <= 0) return 0;
  double busy = 0;
  for (int64_t ns : busy_ns) busy += static_cast<double>(ns) * 1e-9;
  return std::max(0.0, 1.0 - busy / (static_cast<double>(busy_ns.size()) * wall_seconds));
}

// A live status line on a terminal (rewritten in place), plain lines when
// the output is piped.
class Progress {
 public:
  Progress(std::ostream& out, bool live) : out_(out), live_(live) {}
  // Shows `line`; `keep` also leaves it in the log.
  void Show(const std::string& line, bool keep) {
    if (live_) {
      out_ << "\r\033[K" << line << (keep ? "\n" : "");
      out_.flush();
    } else if (keep) {
      out_ << line << "\n";
      out_.flush();
    }
  }
  void Clear() {
    if (live_) out_ << "\r\033[K";
  }

 private:
  std::ostream& out_;
  bool live_;
};

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

// Writes the measured trace and prints, per actor, the measured bubble next
// to the simulator's for costs calibrated on the same steps.
absl::Status WriteTrace(const controller::StepTrace& trace, const schedules::Schedule& schedule,
                        const std::string& path, std::ostream& out) {
  std::ofstream file(path);
  file << trace.ToJson();
  file.close();
  if (!file) return absl::UnavailableError(absl::StrCat("cannot write the trace to ", path));
  absl::StatusOr<schedules::SimulationResult> simulated = schedules::Simulate(schedule, trace.CalibratedCosts());
  if (!simulated.ok()) return simulated.status();
  const std::vector<double> measured = trace.MeasuredBubble();
  out << absl::StrFormat("trace: %d steps written to %s (open in ui.perfetto.dev or chrome://tracing)\n",
                         trace.steps(), path);
  out << "actor  measured bubble  simulated bubble (calibrated costs)\n";
  for (size_t actor = 0; actor < measured.size(); ++actor) {
    out << absl::StrFormat("%5d  %14.1f%%  %16.1f%%\n", actor, 100 * measured[actor],
                           100 * simulated->per_actor[actor].bubble);
  }
  return absl::OkStatus();
}

}  // namespace

int RunTrainCommand(const CommandArgs& args, std::ostream& out, std::ostream& err) {
  Arguments arguments;
  AddExampleOptions(arguments);
  AddLauncherOptions(arguments, ", or reference (no pipeline: the single-process interpreter)");
  arguments.AddOption("steps", "training steps", "100");
  arguments.AddOption("actors", "pipeline actors", "4");
  arguments.AddOption("schedule", "a built-in schedule name or a .sched/.csv file", "1f1b");
  arguments.AddOption("virtual", "stages per actor for interleaved, looped-bfs, zb-v (0: the default)", "0");
  arguments.AddOption("dispatch", "fused (one call per actor per step) or per-task (for measurement)", "fused");
  arguments.AddFlag("verify", "also run the reference and fail unless bit-identical");
  arguments.AddOption("log-every", "keep a progress line every N steps", "1");
  arguments.AddOption("trace", "write the measured trace (Chrome/Perfetto JSON) of the first --trace-steps steps");
  arguments.AddOption("trace-steps", "steps the measured trace covers", "10");
  arguments.AddOption("losses", "write every step's per-microbatch losses to FILE (JSON, exact to the bit)");
  arguments.AddOption("checkpoint-dir", "save checkpoints under DIR (step-NNNNNNNN/ each)");
  arguments.AddOption("checkpoint-every", "steps between checkpoints (0: only after the last step)", "0");
  arguments.AddOption("resume", "continue from the newest checkpoint under DIR, or the checkpoint DIR");
  arguments.AddOption("eval-batches", "validation steps' worth of batches for the final loss", "4");
  arguments.AddFlag("help", "show this help");
  if (absl::Status status = arguments.Parse(args); !status.ok()) {
    err << "tandem train: " << status.message() << "\n" << kUsage << arguments.Usage();
    return 2;
  }
  if (arguments.Flag("help")) {
    out << kUsage << arguments.Usage();
    return 0;
  }
  if (!arguments.positionals().empty()) {
    err << "tandem train: unexpected argument '" << arguments.positionals()[0] << "'\n";
    return 2;
  }
  absl::StatusOr<int64_t> steps = arguments.GetInt("steps");
  absl::StatusOr<int64_t> log_every = arguments.GetInt("log-every");
  absl::StatusOr<int64_t> eval_batches = arguments.GetInt("eval-batches");
  absl::StatusOr<int64_t> actors = arguments.GetInt("actors");
  absl::StatusOr<int64_t> microbatches = arguments.GetInt("microbatches");
  absl::StatusOr<int64_t> virtual_stages = arguments.GetInt("virtual");
  absl::StatusOr<int64_t> trace_steps = arguments.GetInt("trace-steps");
  absl::StatusOr<int64_t> checkpoint_every = arguments.GetInt("checkpoint-every");
  for (const auto* value : {&steps, &log_every, &eval_batches, &actors, &microbatches, &virtual_stages, &trace_steps,
                            &checkpoint_every}) {
    if (!value->ok()) return Fail(err, value->status(), 2);
  }
  if (*steps < 1 || *log_every < 1 || *eval_batches < 0 || *actors < 1 || *checkpoint_every < 0) {
    err << "tandem train: --steps, --log-every and --actors must be at least 1, --eval-batches and "
           "--checkpoint-every at least 0\n";
    return 2;
  }
  const std::string launcher = *arguments.Get("launcher");
  const std::string dispatch_name = *arguments.Get("dispatch");
  if (dispatch_name != "fused" && dispatch_name != "per-task") {
    err << "tandem train: --dispatch is fused or per-task, not '" << dispatch_name << "'\n";
    return 2;
  }
  const bool pipelined = launcher != "reference";
  const std::optional<std::string> trace_path = arguments.Get("trace");
  if (trace_path.has_value() && !pipelined) {
    err << "tandem train: --trace needs a pipeline (--launcher local or threads)\n";
    return 2;
  }
  const std::optional<std::string> resume = arguments.Get("resume");
  std::optional<std::string> checkpoint_dir = arguments.Get("checkpoint-dir");
  if (!pipelined && (checkpoint_dir.has_value() || resume.has_value())) {
    err << "tandem train: checkpoints need a pipeline (--launcher local or threads)\n";
    return 2;
  }
  if (arguments.Has("checkpoint-every") && !checkpoint_dir.has_value() && !resume.has_value()) {
    err << "tandem train: --checkpoint-every needs --checkpoint-dir DIR\n";
    return 2;
  }
  // The reference (the executor with --launcher reference, and --verify's
  // yardstick) computes on the device the actors use.
  absl::StatusOr<actor::DeviceSpec> device = DeviceFrom(arguments);
  if (!device.ok()) return Fail(err, device.status(), 2);
  std::shared_ptr<actor::Device> reference_device = actor::CpuDevice();
  if (!pipelined || arguments.Flag("verify")) {
    absl::StatusOr<std::shared_ptr<actor::Device>> opened = actor::OpenDevice(*device, 0);
    if (!opened.ok()) return Fail(err, opened.status(), 2);
    reference_device = *std::move(opened);
  }
  std::string launcher_description;
  std::optional<schedules::Schedule> schedule;
  if (pipelined) {
    absl::StatusOr<LauncherChoice> made = MakeLauncher(arguments);
    if (!made.ok()) return Fail(err, made.status(), 2);
    launcher_description = made->description;
    absl::StatusOr<schedules::Schedule> resolved =
        schedules::ResolveSchedule(*arguments.Get("schedule"), static_cast<int32_t>(*actors),
                        static_cast<int32_t>(*microbatches), static_cast<int32_t>(*virtual_stages));
    if (!resolved.ok()) return Fail(err, resolved.status());
    schedule = *std::move(resolved);
  }
  absl::StatusOr<ExampleJob> job =
      MakeExampleJob(arguments, schedule ? std::optional<int32_t>(schedule->num_stages) : std::nullopt);
  if (!job.ok()) return Fail(err, job.status());
  // One BLAS thread per actor: the reference is bitwise reproducible at a
  // fixed count, and the actors share this machine's cores.
  ir::SetBlasThreads(1);

  // Where training starts: step 1 from the initial state, or after a
  // checkpoint's step from its state (checked against this job's model).
  ir::TensorMap initial_state;
  int64_t steps_done = 0;
  if (resume.has_value()) {
    absl::StatusOr<controller::LoadedCheckpoint> loaded = controller::LoadCheckpoint(*resume, job->step);
    if (!loaded.ok()) return Fail(err, loaded.status());
    if (loaded->step >= *steps) {
      err << absl::StrFormat("tandem train: checkpoint %s is after step %d; --steps %d leaves nothing to train\n",
                             loaded->path, loaded->step, *steps);
      return 2;
    }
    // Later checkpoints go beside the one resumed from, unless told otherwise;
    // never over newer ones.
    if (!checkpoint_dir.has_value()) checkpoint_dir = std::filesystem::path(loaded->path).parent_path().string();
    absl::StatusOr<std::vector<std::string>> existing = controller::ListCheckpoints(*checkpoint_dir);
    if (!existing.ok()) return Fail(err, existing.status());
    if (!existing->empty() && std::filesystem::path(existing->back()).filename() >
                                  std::filesystem::path(loaded->path).filename()) {
      err << "tandem train: " << *checkpoint_dir << " holds a newer checkpoint (" << existing->back()
          << ") than the one resumed from; pass another --checkpoint-dir\n";
      return 2;
    }
    steps_done = loaded->step;
    initial_state = std::move(loaded->state);
    out << absl::StrFormat("resuming from %s (after step %d, saved under schedule %s on %d actors)\n", loaded->path,
                           loaded->step, loaded->schedule, loaded->actors);
  } else {
    if (checkpoint_dir.has_value()) {
      absl::StatusOr<std::vector<std::string>> existing = controller::ListCheckpoints(*checkpoint_dir);
      if (!existing.ok()) return Fail(err, existing.status());
      if (!existing->empty()) {
        err << "tandem train: " << *checkpoint_dir << " holds checkpoints already (newest: " << existing->back()
            << "); continue with --resume " << *checkpoint_dir << " or choose another --checkpoint-dir\n";
        return 2;
      }
    }
    initial_state = ir::InitialState(job->step);
  }

  out << job->description << "\n";
  std::unique_ptr<Trainer> trainer;
  PipelineTrainer* pipeline_trainer = nullptr;
  std::optional<controller::StepTrace> trace;
  controller::LocalLauncher* local = nullptr;
  if (pipelined) {
    SessionOptions options;
    options.dispatch = dispatch_name == "fused" ? controller::Dispatch::kFused : controller::Dispatch::kPerTask;
    options.launcher = [&arguments]() -> std::unique_ptr<controller::Launcher> {
      absl::StatusOr<LauncherChoice> made = MakeLauncher(arguments);
      return made.ok() ? std::move(made->launcher) : nullptr;
    };
    absl::StatusOr<std::unique_ptr<Session>> session =
        Session::StartFrom(job->step, *schedule, initial_state, steps_done, std::move(options));
    if (!session.ok()) return Fail(err, session.status());
    local = dynamic_cast<controller::LocalLauncher*>(&(*session)->pipeline().launcher());
    const controller::CompiledStep& compiled = (*session)->compiled();
    out << absl::StrFormat("executor: %s, %d actors, schedule %s (%d stages), %s dispatch, step %016x\n",
                           launcher_description, compiled.num_actors, compiled.schedule, compiled.num_stages,
                           dispatch_name, compiled.hash);
    auto owned = std::make_unique<PipelineTrainer>(*std::move(session));
    pipeline_trainer = owned.get();
    trainer = std::move(owned);
    if (trace_path.has_value()) trace.emplace(pipeline_trainer->session().compiled());
  } else {
    out << "executor: single-process reference interpreter (" << reference_device->name() << ")\n";
    trainer = std::make_unique<ReferenceTrainer>(job->step, initial_state, reference_device);
  }
  std::unique_ptr<ReferenceTrainer> reference;
  if (arguments.Flag("verify")) {
    reference = std::make_unique<ReferenceTrainer>(job->step, initial_state, reference_device);
  }
  out.flush();

  using Clock = std::chrono::steady_clock;
  Progress progress(out, &out == &std::cout && isatty(STDOUT_FILENO) != 0);
  double total_seconds = 0;
  double bubble_sum = 0;
  float last_loss = 0;
  const int64_t rpcs_before = local != nullptr ? local->step_rpcs() : 0;
  CatchInterrupts();
  const int64_t steps_run = *steps - steps_done;
  const std::optional<std::string> losses_path = arguments.Get("losses");
  std::string losses_json = "{\"steps\": [";
  for (int64_t step = steps_done + 1; step <= *steps; ++step) {
    if (g_interrupted != 0) {
      progress.Clear();
      err << "tandem train: interrupted by " << strsignal(g_interrupted) << " before step " << step
          << "; shutting the actors down\n";
      return 128 + g_interrupted;
    }
    std::vector<ir::TensorMap> batch = job->train_batch(static_cast<uint64_t>(step - 1));
    Clock::time_point start = Clock::now();
    absl::StatusOr<std::vector<float>> losses = trainer->Step(batch, step);
    double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (!losses.ok()) {
      progress.Clear();
      return Fail(err, absl::Status(losses.status().code(),
                                    absl::StrFormat("step %d: %s", step, losses.status().message())));
    }
    total_seconds += seconds;
    last_loss = Mean(*losses);
    if (losses_path.has_value()) {
      // %.9g round-trips every f32.
      absl::StrAppendFormat(&losses_json, "%s\n  {\"step\": %d, \"losses\": [", step == steps_done + 1 ? "" : ",",
                            step);
      for (size_t m = 0; m < losses->size(); ++m) {
        absl::StrAppendFormat(&losses_json, "%s%.9g", m == 0 ? "" : ", ", (*losses)[m]);
      }
      losses_json += "]}";
    }
    if (reference) {
      absl::StatusOr<std::vector<float>> expected = reference->Step(batch, step);
      if (!expected.ok()) return Fail(err, expected.status());
      if (!SameBits(*losses, *expected)) {
        progress.Clear();
        err << absl::StrFormat("tandem train: --verify failed at step %d: loss %.9g, reference %.9g\n", step,
                               last_loss, Mean(*expected));
        return 1;
      }
    }
    std::string line = absl::StrFormat("step %5d/%d  loss %.4f  %7.1f ms/step  %9.0f %s/s", step, *steps, last_loss,
                                       seconds * 1e3, static_cast<double>(job->items_per_step) / seconds,
                                       job->item_name);
    if (trace.has_value() && step - steps_done <= *trace_steps) trace->AddStep(pipeline_trainer->last());
    if (pipeline_trainer != nullptr) {
      const double bubble = Bubble(pipeline_trainer->last().busy_ns, seconds);
      bubble_sum += bubble;
      absl::StrAppendFormat(&line, "  bubble %4.1f%%", 100 * bubble);
    }
    const bool save = checkpoint_dir.has_value() &&
                      (step == *steps || (*checkpoint_every > 0 && step % *checkpoint_every == 0));
    if (save) {
      const Clock::time_point save_start = Clock::now();
      absl::StatusOr<std::string> saved = pipeline_trainer->session().SaveCheckpoint(*checkpoint_dir);
      if (!saved.ok()) {
        progress.Clear();
        return Fail(err, absl::Status(saved.status().code(),
                                      absl::StrFormat("checkpoint after step %d: %s", step, saved.status().message())));
      }
      absl::StrAppendFormat(&line, "  saved %s (%.0f ms)", *saved,
                            std::chrono::duration<double, std::milli>(Clock::now() - save_start).count());
    }
    progress.Show(line, save || step % *log_every == 0 || step == steps_done + 1 || step == *steps);
  }
  const int64_t rpcs = local != nullptr ? local->step_rpcs() - rpcs_before : 0;
  if (losses_path.has_value()) {
    std::ofstream file(*losses_path);
    file << losses_json << "\n]}\n";
    file.close();
    if (!file) return Fail(err, absl::UnavailableError(absl::StrCat("cannot write the losses to ", *losses_path)));
  }
  absl::StatusOr<ir::TensorMap> state = trainer->State();
  if (!state.ok()) return Fail(err, state.status());
  if (reference) {
    ir::TensorMap expected = *reference->State();
    for (const auto& [name, tensor] : expected) {
      auto it = state->find(name);
      if (it == state->end() || !it->second.BitwiseEquals(tensor)) {
        err << "tandem train: --verify failed: state '" << name << "' differs from the reference\n";
        return 1;
      }
    }
    out << absl::StrFormat("verify: losses of %d steps and all %d state tensors bit-identical to the reference\n",
                           steps_run, expected.size());
  }
  std::vector<float> validation;
  for (int64_t i = 0; i < *eval_batches; ++i) {
    absl::StatusOr<std::vector<float>> losses =
        ir::EvaluateLosses(job->step, *state, job->validation_batch(static_cast<uint64_t>(i)));
    if (!losses.ok()) return Fail(err, losses.status());
    validation.insert(validation.end(), losses->begin(), losses->end());
  }
  const double mean_step = total_seconds / static_cast<double>(steps_run);
  out << absl::StrFormat("done: %d steps", steps_run);
  if (steps_done > 0) out << absl::StrFormat(" (%d to %d)", steps_done + 1, *steps);
  out << absl::StrFormat(", final train loss %.4f", last_loss);
  if (!validation.empty()) out << absl::StrFormat(", validation loss %.4f", Mean(validation));
  out << absl::StrFormat(", mean step %.1f ms, %.0f %s/s", mean_step * 1e3,
                         static_cast<double>(job->items_per_step) / mean_step, job->item_name);
  if (pipeline_trainer != nullptr) {
    out << absl::StrFormat(", mean bubble %.1f%%", 100 * bubble_sum / static_cast<double>(steps_run));
  }
  out << "\n";
  if (pipeline_trainer != nullptr) {
    const controller::CompiledStep& compiled = pipeline_trainer->session().compiled();
    if (local != nullptr) {
      out << absl::StrFormat("control plane: %.1f step RPCs per step (%s dispatch, %d actors)\n",
                             static_cast<double>(rpcs) / static_cast<double>(steps_run), dispatch_name,
                             compiled.num_actors);
    }
    if (trace.has_value()) {
      if (absl::Status status = WriteTrace(*trace, *schedule, *trace_path, out); !status.ok()) return Fail(err, status);
    }
    out << "actor  bytes sent/step  static peak bytes  measured peak bytes\n";
    for (int32_t actor = 0; actor < compiled.num_actors; ++actor) {
      out << absl::StrFormat("%5d  %15d  %17d  %19d\n", actor, compiled.stats[actor].bytes_sent,
                             compiled.programs[actor].static_peak_bytes,
                             pipeline_trainer->last().peak_live_bytes[actor]);
    }
  }
  return 0;
}

}  // namespace tandem::cli
