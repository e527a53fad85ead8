// `tandem bench sched`: how long generating, validating and simulating a
// large schedule take (by default interleaved 1F1B, 64 actors, V=4, 512
// microbatches: 262,144 tasks). Each step is timed separately with
// steady_clock; the best of --repeats runs is reported.
#include <algorithm>
#include <chrono>
#include <functional>
#include <limits>
#include <ostream>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "schedules/generators.h"
#include "schedules/json_writer.h"
#include "schedules/simulator.h"
#include "schedules/validator.h"
#include "tools/cli/arguments.h"
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

}  // namespace

int RunSchedBench(const CommandArgs& args, std::ostream& out, std::ostream& err) {
  Arguments arguments;
  arguments.AddOption("schedule", "generator name", "interleaved");
  arguments.AddOption("actors", "number of actors P", "64");
  arguments.AddOption("virtual", "stages per actor V", "4");
  arguments.AddOption("microbatches", "number of microbatches M", "512");
  arguments.AddOption("repeats", "runs per step; the best is reported", "3");
  arguments.AddFlag("json", "print JSON instead of a table");
  arguments.AddFlag("help", "print this help");
  for (const std::string& arg : args) {
    if (arg == "--help" || arg == "-h") {
      out << "usage: tandem bench sched [options]\n\noptions:\n" << arguments.Usage();
      return 0;
    }
  }
  auto usage_error = [&](absl::string_view message) {
    err << "tandem bench sched: " << message << "\n";
    return 2;
  };
  if (absl::Status status = arguments.Parse(args); !status.ok()) {
    return usage_error(status.message());
  }
  if (!arguments.positionals().empty()) return usage_error("takes no positional arguments");
  schedules::GeneratorOptions options;
  absl::StatusOr<int64_t> repeats_option = arguments.GetInt("repeats");
  if (!repeats_option.ok()) return usage_error(repeats_option.status().message());
  const int64_t repeats = *repeats_option;
  for (const auto& [name, target] : {std::pair<const char*, int32_t*>{"actors", &options.actors},
                                     {"virtual", &options.virtual_stages},
                                     {"microbatches", &options.microbatches}}) {
    absl::StatusOr<int64_t> value = arguments.GetInt(name);
    if (!value.ok()) return usage_error(value.status().message());
    if (*value < 1 || *value > (1 << 20)) {
      return usage_error(absl::StrCat("--", name, " must be between 1 and 2^20"));
    }
    *target = static_cast<int32_t>(*value);
  }
  if (repeats < 1) return usage_error("--repeats must be at least 1");
  const std::string generator = *arguments.Get("schedule");

  absl::StatusOr<schedules::Schedule> schedule;
  double generate_ms = 0.0;
  if (!BestOf(repeats, [&] {
        schedule = schedules::Generate(generator, options);
        return schedule.ok();
      }, generate_ms)) {
    err << "tandem bench sched: " << schedule.status().message() << "\n";
    return 1;
  }
  absl::Status validation;
  double validate_ms = 0.0;
  if (!BestOf(repeats, [&] {
        validation = schedules::Validate(*schedule);
        return validation.ok();
      }, validate_ms)) {
    err << "tandem bench sched: invalid schedule: " << validation.message() << "\n";
    return 1;
  }
  absl::StatusOr<schedules::SimulationResult> result;
  double simulate_ms = 0.0;
  if (!BestOf(repeats, [&] {
        result = schedules::Simulate(*schedule, schedules::CostModel{});
        return result.ok();
      }, simulate_ms)) {
    err << "tandem bench sched: " << result.status().message() << "\n";
    return 1;
  }

  const int64_t tasks = schedule->NumTasks();
  if (arguments.Flag("json")) {
    schedules::JsonWriter json;
    json.BeginObject();
    json.Key("schedule").String(generator);
    json.Key("actors").Int(options.actors);
    json.Key("virtual").Int(options.virtual_stages);
    json.Key("microbatches").Int(options.microbatches);
    json.Key("tasks").Int(tasks);
    json.Key("repeats").Int(repeats);
    json.Key("generate_ms").Number(generate_ms);
    json.Key("validate_ms").Number(validate_ms);
    json.Key("simulate_ms").Number(simulate_ms);
    json.Key("validate_and_simulate_ms").Number(validate_ms + simulate_ms);
    json.Key("makespan").Number(result->makespan);
    json.Key("bubble").Number(result->bubble);
    json.EndObject().NewLine();
    out << json.Take();
    return 0;
  }
  out << absl::StrFormat("schedule %s: %d actors, V=%d, %d microbatches, %d tasks (best of %d)\n",
                         generator, options.actors, options.virtual_stages, options.microbatches,
                         tasks, repeats);
  out << absl::StrFormat("%-20s %10s %14s\n", "step", "ms", "ns per task");
  const auto row = [&](const char* step, double ms) {
    out << absl::StrFormat("%-20s %10.1f %14.1f\n", step, ms,
                           tasks > 0 ? ms * 1e6 / static_cast<double>(tasks) : 0.0);
  };
  row("generate", generate_ms);
  row("validate", validate_ms);
  row("simulate", simulate_ms);
  row("validate + simulate", validate_ms + simulate_ms);
  out << absl::StrFormat("simulated makespan %g, bubble %.2f%% (F=1, B=2, no link cost)\n",
                         result->makespan, 100.0 * result->bubble);
  return 0;
}

}  // namespace tandem::cli
