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
#include "controller/repl.h"
#include "controller/session.h"
#include "ir/kernels.h"
#include "schedules/resolve.h"
#include "tools/cli/commands.h"
#include "tools/cli/example_job.h"
#include "tools/cli/launcher_option.h"

namespace tandem::cli {
namespace {

constexpr char kUsage[] =
    "usage: tandem repl [--script FILE] [train options: --model, --actors, --schedule, --microbatches, ...]\n\n"
    "An interactive session over a live pipeline: look at what was traced, split,\n"
    "placed and lowered; run steps; pause actors at breakpoints and inspect their\n"
    "buffers; switch schedules. Commands come from --script FILE, from stdin when\n"
    "it is not a terminal, or from a prompt with line editing and history\n"
    "(~/.tandem_history). `help` lists the commands. No command error ends the\n"
    "session; `quit` (or end of input) shuts the actors down.\n\n";

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

}  // namespace

int RunReplCommand(const CommandArgs& args, std::ostream& out, std::ostream& err) {
  Arguments arguments;
  AddExampleOptions(arguments);
  AddLauncherOptions(arguments);
  arguments.AddOption("actors", "pipeline actors", "4");
  arguments.AddOption("schedule", "a built-in schedule name or a .sched/.csv file", "1f1b");
  arguments.AddOption("virtual", "stages per actor for interleaved, looped-bfs, zb-v (0: the default)", "0");
  arguments.AddOption("steps", "the steps `run` goes up to", "100");
  arguments.AddOption("script", "read commands from FILE instead of the terminal");
  arguments.AddFlag("help", "show this help");
  if (absl::Status status = arguments.Parse(args); !status.ok()) {
    err << "tandem repl: " << status.message() << "\n" << kUsage << arguments.Usage();
    return 2;
  }
  if (arguments.Flag("help")) {
    out << kUsage << arguments.Usage();
    return 0;
  }
  if (!arguments.positionals().empty()) {
    err << "tandem repl: unexpected argument '" << arguments.positionals()[0] << "'\n";
    return 2;
  }
  const std::optional<std::string> script = arguments.Get("script");
  if (script.has_value() && !std::ifstream(*script)) {
    err << "tandem repl: cannot open the script " << *script << "\n";
    return 2;
  }
  auto fail = [&err](const absl::Status& status, int code) {
    err << "tandem repl: " << absl::StatusCodeToString(status.code()) << ": " << status.message() << "\n";
    return code;
  };
  absl::StatusOr<int64_t> actors = arguments.GetInt("actors");
  absl::StatusOr<int64_t> microbatches = arguments.GetInt("microbatches");
  absl::StatusOr<int64_t> virtual_stages = arguments.GetInt("virtual");
  absl::StatusOr<int64_t> steps = arguments.GetInt("steps");
  for (const auto* value : {&actors, &microbatches, &virtual_stages, &steps}) {
    if (!value->ok()) return fail(value->status(), 2);
  }
  ReplOptions options{.schedule = *arguments.Get("schedule"),
                      .virtual_stages = static_cast<int32_t>(*virtual_stages),
                      .steps = *steps};
  absl::StatusOr<schedules::Schedule> schedule = schedules::ResolveSchedule(
      options.schedule, static_cast<int32_t>(*actors), static_cast<int32_t>(*microbatches), options.virtual_stages);
  if (!schedule.ok()) return fail(schedule.status(), 1);
  absl::StatusOr<examples::ExampleJobOptions> job_options = ExampleJobOptionsFrom(arguments, schedule->num_stages);
  if (!job_options.ok()) return fail(job_options.status(), 1);
  auto model = std::make_shared<ExampleModel>(*job_options);
  absl::StatusOr<const examples::ExampleJob*> job = model->For(schedule->num_microbatches);
  if (!job.ok()) return fail(job.status(), 1);
  absl::StatusOr<LauncherChoice> launcher = MakeLauncher(arguments);
  if (!launcher.ok()) return fail(launcher.status(), 2);

  ir::SetBlasThreads(1);
  SessionOptions session_options;
  // Every (re)start gets a fresh launcher of the kind the options name.
  session_options.launcher = [&arguments]() -> std::unique_ptr<controller::Launcher> {
    absl::StatusOr<LauncherChoice> choice = MakeLauncher(arguments);
    return choice.ok() ? std::move(choice->launcher) : nullptr;
  };
  absl::StatusOr<std::unique_ptr<Session>> session =
      Session::Start((*job)->step, *std::move(schedule), std::move(session_options));
  if (!session.ok()) return fail(session.status(), 1);
  const controller::CompiledStep& compiled = (*session)->compiled();
  out << (*job)->description << "\n"
      << absl::StrFormat("%d actors (%s), schedule %s, %d microbatches. `help` lists the commands.\n",
                         compiled.num_actors, launcher->description, compiled.schedule, compiled.num_microbatches);

  ReplModel repl_model;
  repl_model.description = (*job)->description;
  repl_model.trace = [model](int32_t m) -> absl::StatusOr<ir::TrainStep> {
    absl::StatusOr<const examples::ExampleJob*> job = model->For(m);
    if (!job.ok()) return job.status();
    return (*job)->step;
  };
  repl_model.train_batch = [model](uint64_t index, int32_t m) {
    absl::StatusOr<const examples::ExampleJob*> job = model->For(m);
    return job.ok() ? (*job)->train_batch(index) : std::vector<ir::TensorMap>();
  };
  Repl repl(*std::move(session), std::move(repl_model), std::move(options), out, err);
  if (absl::Status status = repl.Run(script); !status.ok()) return fail(status, 2);
  out << "shutting the actors down\n";
  return 0;
}

}  // namespace tandem::cli
