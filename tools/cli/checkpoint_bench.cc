// `tandem bench checkpoint`: what a checkpoint adds to the step time. One
// pipeline (an example model on its actors; by default GPT-2 small's
// shapes at seq 128 on 4 actors) runs steps with checkpoints of both kinds
// taken in turn, side by side in one run: written behind the steps (what
// `tandem train --checkpoint-every` does) and written before the next step
// (--checkpoint-wait, what every checkpoint cost before). A waited
// checkpoint costs its save; one behind the steps costs its snapshot, the
// time the steps until it was in place took beyond the median clean step
// (the writes share the host with the steps), and putting it in place.
// Clean steps are those no checkpoint touched. The overhead of a
// checkpoint every K steps is its cost over K median steps.
#include <algorithm>
#include <filesystem>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "backends/cpu/kernels.h"
#include "controller/session.h"
#include "examples/example_job.h"
#include "nlohmann/json.hpp"
#include "tools/cli/bench_support.h"
#include "tools/cli/commands.h"
#include "tools/cli/model_options.h"
#include "tools/cli/pipeline_options.h"

namespace tandem::cli {
namespace {

struct CheckpointBenchOptions {
  examples::ExampleJobOptions model;
  ScheduleOptions schedule;
  LauncherOptions launcher;
  int64_t checkpoints = 2;  // of each kind
  int64_t gap = 3;          // steps after each checkpoint before the next
  int64_t every = 20;       // the K of the overhead figure
  std::string dir;          // where the checkpoints go (removed after); empty: a temporary directory
  bool json = false;
};

// One checkpoint's measured cost, in milliseconds.
struct Cost {
  bool behind = false;
  int64_t step = 0;         // the steps done when it was taken
  double take_ms = 0;       // the save (waited), or the snapshot (behind)
  double steps_extra_ms = 0;  // behind: the steps until it was in place, beyond the median clean step
  std::vector<int64_t> covered;  // behind: those steps (indices into the step times)
  double finish_ms = 0;     // behind: putting it in place
  double total() const { return take_ms + steps_extra_ms + finish_ms; }
};

int Fail(std::ostream& err, const absl::Status& status, int code = 1) {
  err << "tandem bench checkpoint: " << status.message() << "\n";
  return code;
}

int RunCheckpointBench(const CLI::App& command, CheckpointBenchOptions options, std::ostream& out,
                       std::ostream& err) {
  if (options.model.model == "gpt" && options.model.preset.empty() && !options.model.dim.has_value()) {
    options.model.preset = "gpt2-small";
    options.model.seq = options.model.seq.value_or(128);
    options.model.batch = options.model.batch.value_or(1);
  }
  std::optional<examples::ExampleJob> job;
  bool usage_error = false;
  absl::StatusOr<schedules::Schedule> schedule =
      ResolveModelSchedule(command, options.schedule, options.model, job, usage_error);
  if (!schedule.ok()) return Fail(err, schedule.status(), usage_error ? 2 : 1);
  cpu::SetBlasThreads(1);

  std::string dir = options.dir;
  bool temporary = false;
  if (dir.empty()) {
    char dir_template[] = "/tmp/tandem-bench-checkpoint-XXXXXX";
    if (mkdtemp(dir_template) == nullptr) return Fail(err, absl::InternalError("cannot make a directory in /tmp"));
    dir = dir_template;
    temporary = true;
  }
  struct Cleanup {
    std::string dir;
    bool remove;
    ~Cleanup() {
      std::error_code ignored;
      if (remove) std::filesystem::remove_all(dir, ignored);
    }
  } cleanup{dir, temporary};

  SessionOptions session_options;
  session_options.launcher = [launcher = options.launcher]() -> std::unique_ptr<controller::Launcher> {
    absl::StatusOr<LauncherChoice> made = MakeLauncher(launcher);
    return made.ok() ? std::move(made->launcher) : nullptr;
  };
  absl::StatusOr<std::unique_ptr<Session>> session = Session::Start(job->step, *schedule, session_options);
  if (!session.ok()) return Fail(err, session.status());
  out << job->description << "\n";
  out << absl::StrFormat("%d actors, schedule %s; %d checkpoints of each kind, %d steps apart, under %s\n",
                         (*session)->compiled().num_actors, schedule->name, options.checkpoints, options.gap, dir);
  out.flush();

  int64_t step = 0;
  std::vector<double> step_ms;      // every step's time, by step - 1
  std::vector<bool> touched;        // whether a checkpoint touched it
  auto run_step = [&]() -> absl::Status {
    absl::StatusOr<std::vector<ir::TensorMap>> batch = job->train_batch(static_cast<uint64_t>(step));
    if (!batch.ok()) return batch.status();
    const Clock::time_point start = Clock::now();
    absl::StatusOr<controller::StepReport> report = (*session)->Step(*batch);
    if (!report.ok()) return report.status();
    step_ms.push_back(MillisecondsSince(start));
    touched.push_back(false);
    ++step;
    return absl::OkStatus();
  };
  // A warm-up step, then the checkpoints in turn (waited first), each
  // followed by `gap` steps.
  if (absl::Status status = run_step(); !status.ok()) return Fail(err, status);
  touched[0] = true;  // the first step compiles and faults its pages in
  std::vector<Cost> costs;
  for (int64_t i = 0; i < 2 * options.checkpoints; ++i) {
    Cost cost{.behind = i % 2 == 1, .step = step};
    const Clock::time_point start = Clock::now();
    if (!cost.behind) {
      absl::StatusOr<std::string> saved = (*session)->SaveCheckpoint(dir);
      if (!saved.ok()) return Fail(err, saved.status());
      cost.take_ms = MillisecondsSince(start);
    } else {
      if (absl::Status begun = (*session)->BeginCheckpoint(dir); !begun.ok()) return Fail(err, begun);
      cost.take_ms = MillisecondsSince(start);
    }
    for (int64_t g = 0; g < options.gap; ++g) {
      if (absl::Status status = run_step(); !status.ok()) return Fail(err, status);
      if (!cost.behind || !(*session)->pending_checkpoint().has_value()) continue;
      cost.covered.push_back(step - 1);
      touched[step - 1] = true;
      const Clock::time_point finish_start = Clock::now();
      // The last step of the gap waits for it: the next checkpoint needs it in place.
      absl::StatusOr<std::string> finished = (*session)->FinishCheckpoint(/*wait=*/g + 1 == options.gap);
      if (!finished.ok()) return Fail(err, finished.status());
      cost.finish_ms += MillisecondsSince(finish_start);
    }
    costs.push_back(cost);
  }
  std::vector<double> clean;
  for (size_t s = 0; s < step_ms.size(); ++s) {
    if (!touched[s]) clean.push_back(step_ms[s]);
  }
  if (clean.empty()) return Fail(err, absl::InvalidArgumentError("no clean step to compare with: a larger --gap"));
  const double median = Median(clean);
  for (Cost& cost : costs) {
    for (int64_t s : cost.covered) cost.steps_extra_ms += step_ms[static_cast<size_t>(s)] - median;
  }
  auto mean_total = [&](bool behind) {
    double sum = 0;
    int count = 0;
    for (const Cost& cost : costs) {
      if (cost.behind != behind) continue;
      sum += cost.total();
      ++count;
    }
    return count == 0 ? 0.0 : sum / count;
  };
  const double waited = mean_total(false);
  const double behind = mean_total(true);
  const double period = median * static_cast<double>(options.every);
  if (options.json) {
    nlohmann::ordered_json json;
    json["benchmark"] = "checkpoint";
    json["model"] = job->description;
    json["actors"] = (*session)->compiled().num_actors;
    json["median_step_ms"] = median;
    json["clean_steps"] = clean.size();
    json["checkpoints"] = nlohmann::ordered_json::array();
    for (const Cost& cost : costs) {
      json["checkpoints"].push_back({{"kind", cost.behind ? "behind" : "waited"},
                                     {"after_step", cost.step},
                                     {"take_ms", cost.take_ms},
                                     {"steps_extra_ms", cost.steps_extra_ms},
                                     {"steps_covered", cost.covered.size()},
                                     {"finish_ms", cost.finish_ms},
                                     {"total_ms", cost.total()}});
    }
    json["every"] = options.every;
    json["waited_overhead"] = waited / period;
    json["behind_overhead"] = behind / period;
    out << json.dump(2) << "\n";
    return 0;
  }
  out << absl::StrFormat("median clean step %.1f ms (%d clean steps)\n", median, clean.size());
  out << "kind     after step   take ms   steps extra ms (steps)   finish ms   total ms\n";
  for (const Cost& cost : costs) {
    out << absl::StrFormat("%-7s  %10d  %8.1f  %15.1f (%d)  %10.1f  %9.1f\n", cost.behind ? "behind" : "waited",
                           cost.step, cost.take_ms, cost.steps_extra_ms, cost.covered.size(), cost.finish_ms,
                           cost.total());
  }
  out << absl::StrFormat(
      "a checkpoint every %d steps: waited %.1f ms each, %.2f%% of the step time; behind the steps %.1f ms each, "
      "%.2f%%\n",
      options.every, waited, 100 * waited / period, behind, 100 * behind / period);
  return 0;
}

}  // namespace

void AddCheckpointBench(CommandLine& command_line, CLI::App& bench) {
  CLI::App* command = command_line.Add(
      bench, "checkpoint", "what a checkpoint adds to the step time, written behind the steps or waited for",
      "[model options] [--actors P] [--checkpoints N] [--gap S] [--every K]",
      "Runs one pipeline (by default GPT-2 small's shapes at seq 128, batch 1, on 4 actors) and takes N "
      "checkpoints of each kind in turn, S steps apart: written before the next step (--checkpoint-wait) and "
      "written behind the steps (the default). Prints each one's cost (the save; or the snapshot, the steps' time "
      "beyond the median clean step until it was in place, and putting it in place) and the overhead of a "
      "checkpoint every K steps.");
  auto options = std::make_shared<CheckpointBenchOptions>();
  AddModelOptions(*command, options->model);
  AddScheduleOptions(*command, options->schedule);
  AddLauncherOptions(*command, options->launcher);
  AddIntegerOption(*command, "--checkpoints", options->checkpoints, "checkpoints of each kind")
      ->check(CLI::Range(int64_t{1}, int64_t{100}));
  AddIntegerOption(*command, "--gap", options->gap, "steps after each checkpoint")
      ->check(CLI::Range(int64_t{2}, int64_t{1000}));
  AddIntegerOption(*command, "--every", options->every, "the checkpoint interval the overhead is given for")
      ->check(CLI::Range(int64_t{1}, int64_t{1000000}));
  command->add_option("--dir", options->dir, "where the checkpoints go (default: a temporary directory, removed)");
  command->add_flag("--json", options->json, "print one JSON object instead of the table");
  command_line.OnRun(command, [command, options, &streams = command_line.streams()] {
    return RunCheckpointBench(*command, *options, streams.out, streams.err);
  });
}

}  // namespace tandem::cli
