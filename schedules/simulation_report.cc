#include "schedules/simulation_report.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "schedules/json_writer.h"

namespace tandem::schedules {
namespace {

std::string FormatTime(double value) { return absl::StrFormat("%.6g", value); }

std::string FormatPercent(double fraction) { return absl::StrFormat("%.2f%%", 100.0 * fraction); }

}  // namespace

std::string CriticalStepName(const Schedule& schedule, const SimulationResult& result,
                             const CriticalStep& step) {
  if (step.kind == CriticalStep::Kind::kCompute) {
    return absl::StrCat(SlotName(schedule.programs[step.actor.value][step.slot]), " on actor ",
                        step.actor.value);
  }
  const Transfer& transfer = result.transfers[step.transfer];
  return absl::StrCat(TaskName(transfer.producer), " from actor ", transfer.from.value,
                      " to actor ", transfer.to.value);
}

std::string SimulationJson(const Schedule& schedule, const SimulationResult& result,
                           const SimulationReportOptions& options) {
  JsonWriter json;
  json.BeginObject();
  json.Key("schedule").String(schedule.name);
  json.Key("actors").Int(schedule.num_actors);
  json.Key("stages").Int(schedule.num_stages);
  json.Key("microbatches").Int(schedule.num_microbatches);
  json.Key("tasks").Int(schedule.NumTasks());
  json.Key("makespan").Number(result.makespan);
  json.Key("bubble").Number(result.bubble);
  json.Key("bubble_time").Number(result.bubble_time);
  json.Key("per_actor").BeginArray();
  for (const ActorStats& stats : result.per_actor) {
    json.NewLine().BeginObject();
    json.Key("actor").Int(stats.actor.value);
    json.Key("busy").Number(stats.busy);
    json.Key("idle").Number(stats.idle);
    json.Key("bubble").Number(stats.bubble);
    json.Key("peak_activations").Number(stats.peak_activations);
    json.EndObject();
  }
  json.EndArray();
  json.Key("critical_path").BeginArray();
  for (const CriticalStep& step : result.critical_path) {
    json.NewLine().BeginObject();
    if (step.kind == CriticalStep::Kind::kCompute) {
      json.Key("type").String("compute");
      json.Key("actor").Int(step.actor.value);
      json.Key("slot").Int(step.slot);
      json.Key("tasks").String(SlotName(schedule.programs[step.actor.value][step.slot]));
    } else {
      const Transfer& transfer = result.transfers[step.transfer];
      json.Key("type").String("transfer");
      json.Key("from").Int(transfer.from.value);
      json.Key("to").Int(transfer.to.value);
      json.Key("task").String(TaskName(transfer.producer));
    }
    json.Key("start").Number(step.start);
    json.Key("end").Number(step.end);
    json.EndObject();
  }
  json.EndArray();
  if (options.memory_timeline) {
    json.Key("memory_timeline").BeginArray();
    for (size_t actor = 0; actor < result.memory.size(); ++actor) {
      json.NewLine().BeginObject();
      json.Key("actor").Int(static_cast<int64_t>(actor));
      json.Key("points").BeginArray();
      for (const MemoryPoint& point : result.memory[actor]) {
        json.BeginArray().Number(point.time).Number(point.live).EndArray();
      }
      json.EndArray().EndObject();
    }
    json.EndArray();
  }
  json.EndObject().NewLine();
  return json.Take();
}

std::string SimulationTable(const Schedule& schedule, const SimulationResult& result,
                            const SimulationReportOptions& options) {
  std::string out = absl::StrFormat(
      "schedule %s: %d actors, %d stages, %d microbatches, %d tasks\n",
      schedule.name.empty() ? "(unnamed)" : schedule.name, schedule.num_actors,
      schedule.num_stages, schedule.num_microbatches, schedule.NumTasks());
  absl::StrAppendFormat(&out, "makespan %s, bubble %s (%s idle of %s actor-time)\n\n",
                        FormatTime(result.makespan), FormatPercent(result.bubble),
                        FormatTime(result.bubble_time),
                        FormatTime(result.makespan * schedule.num_actors));
  absl::StrAppendFormat(&out, "%6s %12s %12s %8s %17s\n", "actor", "busy", "idle", "bubble",
                        "peak activations");
  for (const ActorStats& stats : result.per_actor) {
    absl::StrAppendFormat(&out, "%6d %12s %12s %8s %17s\n", stats.actor.value,
                          FormatTime(stats.busy), FormatTime(stats.idle),
                          FormatPercent(stats.bubble), FormatTime(stats.peak_activations));
  }
  const size_t steps = result.critical_path.size();
  absl::StrAppendFormat(&out, "\ncritical path (%d steps):\n", steps);
  const size_t limit = static_cast<size_t>(std::max(options.max_table_path_steps, 2));
  for (size_t i = 0; i < steps; ++i) {
    if (steps > limit && i == limit / 2) {
      absl::StrAppendFormat(&out, "  ... %d more steps ...\n", steps - limit);
      i = steps - (limit - limit / 2);
    }
    const CriticalStep& step = result.critical_path[i];
    absl::StrAppendFormat(&out, "  [%s, %s] %s\n", FormatTime(step.start), FormatTime(step.end),
                          CriticalStepName(schedule, result, step));
  }
  return out;
}

}  // namespace tandem::schedules
