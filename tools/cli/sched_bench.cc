// `tandem bench sched`: how long generating, validating and simulating a
// large schedule take (by default interleaved 1F1B, 64 actors, V=4, 512
// microbatches: 262,144 tasks). Each step is timed separately with
// steady_clock; the best of --repeats runs is reported.
#include <algorithm>
#include <chrono>
#include <functional>
#include <limits>
#include <memory>
#include <ostream>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "schedules/generators.h"
#include "schedules/json_text.h"
#include "schedules/simulator.h"
#include "schedules/validator.h"
#include "tools/cli/commands.h"

namespace tandem::cli {
namespace {

// The best wall time of `repeats` calls of `step`, in milliseconds; stops
// early and returns false when a call fails.
bool BestOf(int64_t repeats, const std::function<bool()>& step, double& best_ms) {
  best_ms = std::numeric_limits<double>::infinity();
  for (int64_t i = 0; i < repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    const bool ok = step();
    const auto end = std::chrono::steady_clock::now();
    if (!ok) return false;
    best_ms = std::min(best_ms, std::chrono::duration<double, std::milli>(end - start).count());
  }
  return true;
}

struct SchedBenchOptions {
  std::string generator = "interleaved";
  schedules::GeneratorOptions schedule{.actors = 64, .microbatches = 512, .virtual_stages = 4};
  int64_t repeats = 3;
  bool json = false;
};

int RunSchedBench(const SchedBenchOptions& bench, std::ostream& out, std::ostream& err) {
  const std::string& generator = bench.generator;
  const schedules::GeneratorOptions& options = bench.schedule;
  const int64_t repeats = bench.repeats;
  absl::StatusOr<schedules::Schedule> schedule;
  double generate_ms = 0.0;
  if (!BestOf(
          repeats,
          [&] {
            schedule = schedules::Generate(generator, options);
            return schedule.ok();
          },
          generate_ms)) {
    err << "tandem bench sched: " << schedule.status().message() << "\n";
    return 1;
  }
  absl::Status validation;
  double validate_ms = 0.0;
  if (!BestOf(
          repeats,
          [&] {
            validation = schedules::Validate(*schedule);
            return validation.ok();
          },
          validate_ms)) {
    err << "tandem bench sched: invalid schedule: " << validation.message() << "\n";
    return 1;
  }
  absl::StatusOr<schedules::SimulationResult> result;
  double simulate_ms = 0.0;
  if (!BestOf(
          repeats,
          [&] {
            result = schedules::Simulate(*schedule, schedules::CostModel{});
            return result.ok();
          },
          simulate_ms)) {
    err << "tandem bench sched: " << result.status().message() << "\n";
    return 1;
  }

  const int64_t tasks = schedule->NumTasks();
  if (bench.json) {
    nlohmann::ordered_json json;
    json["schedule"] = generator;
    json["actors"] = options.actors;
    json["virtual"] = options.virtual_stages;
    json["microbatches"] = options.microbatches;
    json["tasks"] = tasks;
    json["repeats"] = repeats;
    json["generate_ms"] = schedules::JsonNumber(generate_ms);
    json["validate_ms"] = schedules::JsonNumber(validate_ms);
    json["simulate_ms"] = schedules::JsonNumber(simulate_ms);
    json["validate_and_simulate_ms"] = schedules::JsonNumber(validate_ms + simulate_ms);
    json["makespan"] = schedules::JsonNumber(result->makespan);
    json["bubble"] = schedules::JsonNumber(result->bubble);
    out << schedules::JsonText(json) << "\n";
    return 0;
  }
  out << absl::StrFormat("schedule %s: %d actors, V=%d, %d microbatches, %d tasks (best of %d)\n", generator,
                         options.actors, options.virtual_stages, options.microbatches, tasks, repeats);
  out << absl::StrFormat("%-20s %10s %14s\n", "step", "ms", "ns per task");
  const auto row = [&](const char* step, double ms) {
    out << absl::StrFormat("%-20s %10.1f %14.1f\n", step, ms, tasks > 0 ? ms * 1e6 / static_cast<double>(tasks) : 0.0);
  };
  row("generate", generate_ms);
  row("validate", validate_ms);
  row("simulate", simulate_ms);
  row("validate + simulate", validate_ms + simulate_ms);
  out << absl::StrFormat("simulated makespan %g, bubble %.2f%% (F=1, B=2, no link cost)\n", result->makespan,
                         100.0 * result->bubble);
  return 0;
}

}  // namespace

void AddSchedBench(CommandLine& command_line, CLI::App& bench) {
  CLI::App* command = command_line.Add(bench, "sched", "validate and simulate a large interleaved schedule",
                                       "[--schedule NAME] [--actors P] [--virtual V] [--microbatches M] [--json]");
  auto options = std::make_shared<SchedBenchOptions>();
  command->add_option("--schedule", options->generator, "generator name")
      ->check(CLI::IsMember(schedules::GeneratorNames()))
      ->capture_default_str();
  command->add_option("--actors", options->schedule.actors, "number of actors P")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  command->add_option("--virtual", options->schedule.virtual_stages, "stages per actor V")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  command->add_option("--microbatches", options->schedule.microbatches, "number of microbatches M")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  AddIntegerOption(*command, "--repeats", options->repeats, "runs per step; the best is reported");
  command->add_flag("--json", options->json, "print JSON instead of a table");
  command_line.OnRun(command, [options, &streams = command_line.streams()] {
    return RunSchedBench(*options, streams.out, streams.err);
  });
}

}  // namespace tandem::cli
