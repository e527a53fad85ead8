#include "schedules/simulation_report.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "schedules/json_text.h"

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
  if (step.kind == CriticalStep::Kind::kReduction) {
    const Reduction& reduction = result.reductions[step.reduction];
    return absl::StrCat("reduction of stage ", reduction.stage.value, " on actor ",
                        reduction.actor.value);
  }
  const Transfer& transfer = result.transfers[step.transfer];
  return absl::StrCat(TaskName(transfer.producer), " from actor ", transfer.from.value,
                      " to actor ", transfer.to.value);
}

std::string SimulationJson(const Schedule& schedule, const SimulationResult& result,
                           const SimulationReportOptions& options) {
  using Json = nlohmann::ordered_json;
  Json json = {{"schedule", schedule.name},
               {"actors", schedule.num_actors},
               {"stages", schedule.num_stages},
               {"microbatches", schedule.num_microbatches},
               {"tasks", schedule.NumTasks()},
               {"makespan", JsonNumber(result.makespan)},
               {"bubble", JsonNumber(result.bubble)},
               {"bubble_time", JsonNumber(result.bubble_time)}};
  // Without data parallelism the document is exactly what it was before it.
  const bool data_parallel = result.data_parallel > 1;
  if (data_parallel) {
    json["data_parallel"] = result.data_parallel;
    json["compute_end"] = JsonNumber(result.compute_end);
  }
  Json& per_actor = json["per_actor"] = Json::array();
  for (const ActorStats& stats : result.per_actor) {
    Json& entry = per_actor.emplace_back(
        Json{{"actor", stats.actor.value},
             {"busy", JsonNumber(stats.busy)},
             {"idle", JsonNumber(stats.idle)},
             {"bubble", JsonNumber(stats.bubble)},
             {"peak_activations", JsonNumber(stats.peak_activations)}});
    if (data_parallel) {
      entry["reduce_busy"] = JsonNumber(stats.reduce_busy);
      entry["peak_reduce_staging"] = JsonNumber(stats.peak_reduce_staging);
    }
  }
  if (data_parallel) {
    Json& reductions = json["reductions"] = Json::array();
    for (const Reduction& reduction : result.reductions) {
      reductions.push_back({{"actor", reduction.actor.value},
                            {"stage", reduction.stage.value},
                            {"bytes", JsonNumber(reduction.bytes)},
                            {"released", JsonNumber(reduction.released)},
                            {"start", JsonNumber(reduction.start)},
                            {"end", JsonNumber(reduction.end)},
                            {"staging_bytes", JsonNumber(reduction.staging_bytes)}});
    }
  }
  Json& critical_path = json["critical_path"] = Json::array();
  for (const CriticalStep& step : result.critical_path) {
    Json& entry = critical_path.emplace_back();
    if (step.kind == CriticalStep::Kind::kCompute) {
      entry["type"] = "compute";
      entry["actor"] = step.actor.value;
      entry["slot"] = step.slot;
      entry["tasks"] = SlotName(schedule.programs[step.actor.value][step.slot]);
    } else if (step.kind == CriticalStep::Kind::kReduction) {
      const Reduction& reduction = result.reductions[step.reduction];
      entry["type"] = "reduction";
      entry["actor"] = reduction.actor.value;
      entry["stage"] = reduction.stage.value;
    } else {
      const Transfer& transfer = result.transfers[step.transfer];
      entry["type"] = "transfer";
      entry["from"] = transfer.from.value;
      entry["to"] = transfer.to.value;
      entry["task"] = TaskName(transfer.producer);
    }
    entry["start"] = JsonNumber(step.start);
    entry["end"] = JsonNumber(step.end);
  }
  if (options.memory_timeline) {
    Json& timeline = json["memory_timeline"] = Json::array();
    for (size_t actor = 0; actor < result.memory.size(); ++actor) {
      Json& entry = timeline.emplace_back();
      entry["actor"] = actor;
      Json& points = entry["points"] = Json::array();
      for (const MemoryPoint& point : result.memory[actor]) {
        points.push_back(Json::array({JsonNumber(point.time), JsonNumber(point.live)}));
      }
    }
  }
  return JsonText(json) + "\n";
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
  if (result.data_parallel > 1) {
    absl::StrAppendFormat(&out,
                          "\ndata parallel %d replicas: %d gradient reductions, the last ending at "
                          "%s (compute ends at %s)\n",
                          result.data_parallel, result.reductions.size(),
                          FormatTime(result.makespan), FormatTime(result.compute_end));
    absl::StrAppendFormat(&out, "%6s %11s %12s %19s %13s\n", "actor", "reductions", "reduce busy",
                          "last reduction end", "peak staging");
    // Reductions are ordered by actor, then as they ran.
    size_t next = 0;
    for (const ActorStats& stats : result.per_actor) {
      int count = 0;
      double last_end = 0.0;
      for (; next < result.reductions.size() && result.reductions[next].actor <= stats.actor;
           ++next) {
        if (result.reductions[next].actor != stats.actor) continue;
        ++count;
        last_end = result.reductions[next].end;
      }
      absl::StrAppendFormat(&out, "%6d %11d %12s %19s %13s\n", stats.actor.value, count,
                            FormatTime(stats.reduce_busy), count > 0 ? FormatTime(last_end) : "-",
                            FormatTime(stats.peak_reduce_staging));
    }
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
