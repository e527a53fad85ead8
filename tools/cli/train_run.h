// The step loop of `tandem train` and its report: what runs once the
// options are checked, the starting point decided and the trainers built
// (tools/cli/train_command.cc). TrainLoop runs the steps (verifying,
// checkpointing, evaluating, tracing and reporting restarts as asked);
// Report writes --losses, checks the final state against the reference,
// evaluates, and prints the summary. Ctrl-C (SIGINT) or SIGTERM stops the
// loop after the step in progress.
#ifndef TANDEM_TOOLS_CLI_TRAIN_RUN_H_
#define TANDEM_TOOLS_CLI_TRAIN_RUN_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "controller/step_trace.h"
#include "examples/example_job.h"
#include "ir/train_step.h"
#include "nlohmann/json.hpp"
#include "schedules/schedule.h"
#include "tools/cli/command_line.h"
#include "tools/cli/fill_run.h"
#include "tools/cli/pipeline_options.h"
#include "tools/cli/trainer.h"

namespace tandem::cli {

// What `tandem train` was told (train_command.cc declares the flags).
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
// forward step, traced once; its scratch checkpoints in a directory of its
// own under TMPDIR, removed with it), the reference on its state.
class Evaluator {
 public:
  Evaluator(const examples::ExampleJob& job, int64_t batches) : job_(job), batches_(batches) {}
  Evaluator(const Evaluator&) = delete;
  Evaluator& operator=(const Evaluator&) = delete;
  ~Evaluator();
  // The losses of `trainer`; with a `reference` (--verify), DataLoss unless
  // the reference's are the same bits.
  absl::StatusOr<std::vector<float>> Validate(Trainer& trainer, Trainer* reference);

 private:
  absl::StatusOr<std::vector<float>> Losses(Trainer& trainer);

  const examples::ExampleJob& job_;
  const int64_t batches_;
  std::optional<ir::TrainStep> forward_;
  std::string scratch_;
};

// The step loop: runs steps_done + 1 .. --steps, verifying, checkpointing
// and tracing as asked. Returns the exit code, 0 when every step ran.
int TrainLoop(const CLI::App& train, const TrainOptions& options, const examples::ExampleJob& job, int64_t steps_done,
              Trainer& trainer, Trainer* reference, FillRun* fill, std::optional<controller::StepTrace>& trace,
              const std::optional<std::string>& checkpoint_dir, Evaluator& evaluator, RunTotals& totals,
              CommandStreams& streams);

// Writes --losses, checks the final state against the reference, and
// prints the summary. Returns the exit code.
int Report(const CLI::App& train, const TrainOptions& options, const examples::ExampleJob& job, int64_t steps_done,
           Trainer& trainer, Trainer* reference, FillRun* fill, const std::optional<controller::StepTrace>& trace,
           const schedules::Schedule& schedule, const RunTotals& totals, Evaluator& evaluator,
           CommandStreams& streams);

}  // namespace tandem::cli

#endif  // TANDEM_TOOLS_CLI_TRAIN_RUN_H_
