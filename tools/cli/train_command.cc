// `tandem train`: trains an example model and reports its losses.
#include <chrono>
#include <cstdio>
#include <numeric>
#include <ostream>

#include "absl/strings/str_format.h"
#include "ir/kernels.h"
#include "tools/cli/commands.h"
#include "tools/cli/example_job.h"

namespace tandem::cli {
namespace {

constexpr char kUsage[] =
    "usage: tandem train [--model gpt|mlp] [--steps N] [--microbatches M] [options]\n\n"
    "Trains an example model with the single-process reference interpreter and\n"
    "prints the loss of every step and a final train/validation summary.\n\n";

float Mean(const std::vector<float>& values) {
  return std::accumulate(values.begin(), values.end(), 0.0f) / static_cast<float>(values.size());
}

}  // namespace

int RunTrainCommand(const CommandArgs& args, std::ostream& out, std::ostream& err) {
  Arguments arguments;
  AddExampleOptions(arguments);
  arguments.AddOption("steps", "training steps", "100");
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
  for (const auto* value : {&steps, &log_every, &eval_batches}) {
    if (!value->ok()) {
      err << "tandem train: " << value->status().message() << "\n";
      return 2;
    }
  }
  if (*steps < 1 || *log_every < 1 || *eval_batches < 0) {
    err << "tandem train: --steps and --log-every must be at least 1, --eval-batches at least 0\n";
    return 2;
  }
  absl::StatusOr<ExampleJob> job = MakeExampleJob(arguments);
  if (!job.ok()) {
    err << "tandem train: " << job.status().message() << "\n";
    return 1;
  }
  // One BLAS thread: the reference is bitwise reproducible at a fixed count.
  ir::SetBlasThreads(1);
  out << job->description << "\n" << "executor: single-process reference interpreter\n";
  ir::TensorMap state = ir::InitialState(job->step);
  using Clock = std::chrono::steady_clock;
  double total_seconds = 0;
  float last_loss = 0;
  for (int64_t step = 1; step <= *steps; ++step) {
    std::vector<ir::TensorMap> batch = job->train_batch(static_cast<uint64_t>(step - 1));
    Clock::time_point start = Clock::now();
    absl::StatusOr<ir::StepResult> result = ir::RunReferenceStep(job->step, state, batch, step);
    double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (!result.ok()) {
      err << "tandem train: step " << step << ": " << result.status().message() << "\n";
      return 1;
    }
    total_seconds += seconds;
    last_loss = Mean(result->losses);
    if (step % *log_every == 0 || step == 1 || step == *steps) {
      out << absl::StrFormat("step %5d  loss %.4f  %7.1f ms/step\n", step, last_loss, seconds * 1e3);
      out.flush();
    }
  }
  std::vector<float> validation;
  for (int64_t i = 0; i < *eval_batches; ++i) {
    absl::StatusOr<std::vector<float>> losses =
        ir::EvaluateLosses(job->step, state, job->validation_batch(static_cast<uint64_t>(i)));
    if (!losses.ok()) {
      err << "tandem train: validation: " << losses.status().message() << "\n";
      return 1;
    }
    validation.insert(validation.end(), losses->begin(), losses->end());
  }
  out << absl::StrFormat("done: %d steps, final train loss %.4f", *steps, last_loss);
  if (!validation.empty()) out << absl::StrFormat(", validation loss %.4f", Mean(validation));
  out << absl::StrFormat(", mean step %.1f ms\n", total_seconds * 1e3 / static_cast<double>(*steps));
  return 0;
}

}  // namespace tandem::cli
