// `tandem repl`: the controller REPL (controller/repl.h) over an example
// model on the launcher the options choose.
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "backends/cpu/kernels.h"
#include "controller/repl.h"
#include "controller/session.h"
#include "tools/cli/commands.h"
#include "tools/cli/model_options.h"
#include "tools/cli/pipeline_options.h"

namespace tandem::cli {
namespace {

// The example job as the REPL's model: re-traced (and its data re-made) per
// microbatch count.
class ExampleModel {
 public:
  explicit ExampleModel(examples::ExampleJobOptions options) : options_(std::move(options)) {}

  absl::StatusOr<const examples::ExampleJob*> For(int32_t microbatches) {
    auto it = jobs_.find(microbatches);
    if (it == jobs_.end()) {
      examples::ExampleJobOptions options = options_;
      options.microbatches = microbatches;
      absl::StatusOr<examples::ExampleJob> job = examples::MakeExampleJob(options);
      if (!job.ok()) return job.status();
      it = jobs_.emplace(microbatches, *std::move(job)).first;
    }
    return &it->second;
  }

 private:
  examples::ExampleJobOptions options_;
  std::map<int32_t, examples::ExampleJob> jobs_;
};

struct ReplCommandOptions {
  examples::ExampleJobOptions model;
  ScheduleOptions schedule;
  LauncherOptions launcher;
  int64_t steps = 100;
  std::optional<std::string> script;
};

int RunRepl(const CLI::App& command, ReplCommandOptions& options, CommandStreams& streams) {
  if (options.script.has_value() && !std::ifstream(*options.script)) {
    return UsageError(streams.err, command, absl::StrCat("cannot open the script ", *options.script));
  }
  std::shared_ptr<ExampleModel> model;
  const examples::ExampleJob* job = nullptr;
  bool usage_error = false;
  absl::StatusOr<schedules::Schedule> schedule = ResolveModelSchedule(
      command, options.schedule, options.model,
      [&]() -> absl::StatusOr<const ir::TrainStep*> {
        model = std::make_shared<ExampleModel>(options.model);
        absl::StatusOr<const examples::ExampleJob*> made = model->For(options.model.microbatches);
        if (!made.ok()) return made.status();
        job = *made;
        return &job->step;
      },
      usage_error);
  if (!schedule.ok()) {
    return usage_error ? UsageError(streams.err, command, std::string(schedule.status().message()))
                       : Failure(streams.err, command, schedule.status());
  }
  absl::StatusOr<LauncherChoice> launcher = MakeLauncher(options.launcher);
  if (!launcher.ok()) return Failure(streams.err, command, launcher.status(), 2);

  cpu::SetBlasThreads(1);
  SessionOptions session_options;
  session_options.remat = options.schedule.RematByStage(job->step.num_stages);
  // Every (re)start gets a fresh launcher of the kind the options name.
  session_options.launcher = [launcher_options = options.launcher]() -> std::unique_ptr<controller::Launcher> {
    absl::StatusOr<LauncherChoice> choice = MakeLauncher(launcher_options);
    return choice.ok() ? std::move(choice->launcher) : nullptr;
  };
  absl::StatusOr<std::unique_ptr<Session>> session =
      Session::Start(job->step, *std::move(schedule), std::move(session_options));
  if (!session.ok()) return Failure(streams.err, command, session.status());
  const controller::CompiledStep& compiled = (*session)->compiled();
  const std::string replicas =
      compiled.num_replicas == 1
          ? ""
          : absl::StrFormat(": %d replicas of %d, gradients all-reduced", compiled.num_replicas,
                            compiled.actors_per_replica);
  streams.out << job->description << "\n"
              << absl::StrFormat("%d actors (%s%s), schedule %s, %d microbatches%s. `help` lists the commands.\n",
                                 compiled.num_actors, launcher->description, replicas, compiled.schedule,
                                 compiled.num_microbatches, compiled.num_replicas == 1 ? "" : " per replica");

  ReplModel repl_model;
  repl_model.description = job->description;
  repl_model.trace = [model](int32_t m) -> absl::StatusOr<ir::TrainStep> {
    absl::StatusOr<const examples::ExampleJob*> job = model->For(m);
    if (!job.ok()) return job.status();
    return (*job)->step;
  };
  repl_model.train_batch = [model](uint64_t index, int32_t m) -> absl::StatusOr<std::vector<ir::TensorMap>> {
    absl::StatusOr<const examples::ExampleJob*> job = model->For(m);
    if (!job.ok()) return job.status();
    return (*job)->train_batch(index);
  };
  ReplOptions repl_options{
      .schedule = options.schedule.schedule, .virtual_stages = options.schedule.virtual_stages, .steps = options.steps};
  Repl repl(*std::move(session), std::move(repl_model), std::move(repl_options), streams.out, streams.err);
  if (absl::Status status = repl.Run(options.script); !status.ok()) return Failure(streams.err, command, status, 2);
  streams.out << "shutting the actors down\n";
  return 0;
}

}  // namespace

void AddReplCommand(CommandLine& command_line) {
  CLI::App* repl = command_line.Add(
      command_line.root(), "repl", "an interactive session over a live pipeline (breakpoints, inspect, ...)",
      "[--script FILE] [train options: --model, --actors, --schedule, --microbatches, ...]",
      "An interactive session over a live pipeline: look at what was traced, split, placed and lowered; run steps; "
      "pause actors at breakpoints and inspect their buffers; switch schedules. Commands come from --script FILE, "
      "from stdin when it is not a terminal, or from a prompt with line editing and history (~/.tandem_history). "
      "`help` lists the commands. No command error ends the session; `quit` (or end of input) shuts the actors "
      "down.");
  auto options = std::make_shared<ReplCommandOptions>();
  AddModelOptions(*repl, options->model);
  AddScheduleOptions(*repl, options->schedule);
  AddLauncherOptions(*repl, options->launcher);
  AddIntegerOption(*repl, "--steps", options->steps, "the steps `run` goes up to");
  repl->add_option("--script", options->script, "read commands from FILE instead of the terminal");
  command_line.OnRun(repl,
                     [repl, options, &streams = command_line.streams()] { return RunRepl(*repl, *options, streams); });
}

}  // namespace tandem::cli
