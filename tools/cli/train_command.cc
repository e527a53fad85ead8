// `tandem train`: trains an example model, pipelined over actors (or on the
// single-process reference interpreter), and reports its losses.
#include <chrono>
#include <numeric>
#include <ostream>

#include "absl/strings/str_format.h"
#include "controller/pipeline.h"
#include "ir/kernels.h"
#include "tools/cli/commands.h"
#include "tools/cli/example_job.h"
#include "tools/cli/schedule_option.h"
#include "tools/cli/threads_launcher.h"

namespace tandem::cli {
namespace {

constexpr char kUsage[] =
    "usage: tandem train [--model gpt|mlp] [--actors P] [--schedule NAME|FILE] [--microbatches M]\n"
    "                    [--steps N] [--launcher threads|reference] [--verify] [options]\n\n"
    "Trains an example model and prints the loss of every step and a final\n"
    "train/validation summary. --launcher threads runs one actor per thread,\n"
    "each with its own compiled program; reference runs the single-process\n"
    "interpreter. --verify also runs the reference and fails unless losses and\n"
    "parameters are bit-identical.\n\n";

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

class ReferenceTrainer : public Trainer {
 public:
  explicit ReferenceTrainer(const ir::TrainStep& step) : step_(step), state_(ir::InitialState(step)) {}
  absl::StatusOr<std::vector<float>> Step(const std::vector<ir::TensorMap>& batch, int64_t step) override {
    absl::StatusOr<ir::StepResult> result = ir::RunReferenceStep(step_, state_, batch, step);
    if (!result.ok()) return result.status();
    return result->losses;
  }
  absl::StatusOr<ir::TensorMap> State() override { return state_; }

 private:
  const ir::TrainStep& step_;
  ir::TensorMap state_;
};

class PipelineTrainer : public Trainer {
 public:
  PipelineTrainer(std::unique_ptr<controller::Pipeline> pipeline, controller::Dispatch dispatch)
      : pipeline_(std::move(pipeline)), dispatch_(dispatch) {}
  absl::StatusOr<std::vector<float>> Step(const std::vector<ir::TensorMap>& batch, int64_t step) override {
    absl::StatusOr<controller::StepReport> report = pipeline_->Step(batch, dispatch_);
    if (!report.ok()) return report.status();
    peaks_ = report->peak_live_bytes;
    return report->losses;
  }
  absl::StatusOr<ir::TensorMap> State() override { return pipeline_->State(); }
  const controller::Pipeline& pipeline() const { return *pipeline_; }
  const std::vector<int64_t>& peaks() const { return peaks_; }

 private:
  std::unique_ptr<controller::Pipeline> pipeline_;
  controller::Dispatch dispatch_;
  std::vector<int64_t> peaks_;
};

int Fail(std::ostream& err, const absl::Status& status, int code = 1) {
  err << "tandem train: " << status.message() << "\n";
  return code;
}

}  // namespace

int RunTrainCommand(const CommandArgs& args, std::ostream& out, std::ostream& err) {
  Arguments arguments;
  AddExampleOptions(arguments);
  arguments.AddOption("steps", "training steps", "100");
  arguments.AddOption("actors", "pipeline actors (threads launcher)", "4");
  arguments.AddOption("schedule", "a built-in schedule name or a .sched/.csv file", "1f1b");
  arguments.AddOption("virtual", "stages per actor for interleaved, looped-bfs, zb-v (0: the default)", "0");
  arguments.AddOption("launcher", "threads (one actor per thread) or reference (no pipeline)", "threads");
  arguments.AddOption("dispatch", "fused (one call per actor per step) or per-task (for measurement)", "fused");
  arguments.AddFlag("verify", "also run the reference and fail unless bit-identical");
  arguments.AddOption("log-every", "print the loss every N steps", "1");
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
  for (const auto* value : {&steps, &log_every, &eval_batches, &actors, &microbatches, &virtual_stages}) {
    if (!value->ok()) return Fail(err, value->status(), 2);
  }
  if (*steps < 1 || *log_every < 1 || *eval_batches < 0 || *actors < 1) {
    err << "tandem train: --steps, --log-every and --actors must be at least 1, --eval-batches at least 0\n";
    return 2;
  }
  const std::string launcher = *arguments.Get("launcher");
  const std::string dispatch_name = *arguments.Get("dispatch");
  if ((launcher != "threads" && launcher != "reference") || (dispatch_name != "fused" && dispatch_name != "per-task")) {
    err << "tandem train: --launcher is threads or reference; --dispatch is fused or per-task\n";
    return 2;
  }
  const bool pipelined = launcher == "threads";
  std::optional<schedules::Schedule> schedule;
  if (pipelined) {
    absl::StatusOr<schedules::Schedule> resolved =
        ResolveSchedule(*arguments.Get("schedule"), static_cast<int32_t>(*actors),
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

  out << job->description << "\n";
  std::unique_ptr<Trainer> trainer;
  PipelineTrainer* pipeline_trainer = nullptr;
  if (pipelined) {
    absl::StatusOr<std::unique_ptr<controller::Pipeline>> pipeline = controller::Pipeline::Create(
        job->step, *schedule, ir::InitialState(job->step), std::make_unique<ThreadsLauncher>());
    if (!pipeline.ok()) return Fail(err, pipeline.status());
    const controller::CompiledStep& compiled = (*pipeline)->compiled();
    out << absl::StrFormat("executor: threads launcher, %d actors, schedule %s (%d stages), %s dispatch, step %016x\n",
                           compiled.num_actors, compiled.schedule, compiled.num_stages, dispatch_name, compiled.hash);
    auto owned = std::make_unique<PipelineTrainer>(
        *std::move(pipeline), dispatch_name == "fused" ? controller::Dispatch::kFused : controller::Dispatch::kPerTask);
    pipeline_trainer = owned.get();
    trainer = std::move(owned);
  } else {
    out << "executor: single-process reference interpreter\n";
    trainer = std::make_unique<ReferenceTrainer>(job->step);
  }
  std::unique_ptr<ReferenceTrainer> reference;
  if (arguments.Flag("verify")) reference = std::make_unique<ReferenceTrainer>(job->step);

  using Clock = std::chrono::steady_clock;
  double total_seconds = 0;
  float last_loss = 0;
  for (int64_t step = 1; step <= *steps; ++step) {
    std::vector<ir::TensorMap> batch = job->train_batch(static_cast<uint64_t>(step - 1));
    Clock::time_point start = Clock::now();
    absl::StatusOr<std::vector<float>> losses = trainer->Step(batch, step);
    double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (!losses.ok()) return Fail(err, absl::Status(losses.status().code(), absl::StrFormat("step %d: %s", step, losses.status().message())));
    total_seconds += seconds;
    last_loss = Mean(*losses);
    if (reference) {
      absl::StatusOr<std::vector<float>> expected = reference->Step(batch, step);
      if (!expected.ok()) return Fail(err, expected.status());
      if (!SameBits(*losses, *expected)) {
        err << absl::StrFormat("tandem train: --verify failed at step %d: loss %.9g, reference %.9g\n", step,
                               last_loss, Mean(*expected));
        return 1;
      }
    }
    if (step % *log_every == 0 || step == 1 || step == *steps) {
      out << absl::StrFormat("step %5d  loss %.4f  %7.1f ms/step\n", step, last_loss, seconds * 1e3);
      out.flush();
    }
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
                           *steps, expected.size());
  }
  std::vector<float> validation;
  for (int64_t i = 0; i < *eval_batches; ++i) {
    absl::StatusOr<std::vector<float>> losses =
        ir::EvaluateLosses(job->step, *state, job->validation_batch(static_cast<uint64_t>(i)));
    if (!losses.ok()) return Fail(err, losses.status());
    validation.insert(validation.end(), losses->begin(), losses->end());
  }
  out << absl::StrFormat("done: %d steps, final train loss %.4f", *steps, last_loss);
  if (!validation.empty()) out << absl::StrFormat(", validation loss %.4f", Mean(validation));
  out << absl::StrFormat(", mean step %.1f ms\n", total_seconds * 1e3 / static_cast<double>(*steps));
  if (pipeline_trainer != nullptr) {
    const controller::CompiledStep& compiled = pipeline_trainer->pipeline().compiled();
    out << "actor  static peak bytes  measured peak bytes\n";
    for (int32_t actor = 0; actor < compiled.num_actors; ++actor) {
      out << absl::StrFormat("%5d  %17d  %19d\n", actor, compiled.programs[actor].static_peak_bytes,
                             pipeline_trainer->peaks()[actor]);
    }
  }
  return 0;
}

}  // namespace tandem::cli
