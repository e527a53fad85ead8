// Renders a SimulationResult for machines (JSON) and for people (a table).
//
// JSON keys: "schedule", "actors", "stages", "microbatches", "tasks",
// "makespan", "bubble" (overall fraction), "bubble_time" (total idle),
// "per_actor" (ordered by actor: "actor", "busy", "idle", "bubble",
// "peak_activations"), "critical_path" (steps with "type" "compute",
// "transfer" or "reduction") and, on request, "memory_timeline". With data
// parallelism (result.data_parallel > 1) also "data_parallel",
// "compute_end", "reduce_busy" per actor and "reductions" (in the result's
// order: "actor", "stage", "bytes", "start", "end"); without it, none of
// these. The table adds a reductions section likewise. Pure functions.
#ifndef TANDEM_SCHEDULES_SIMULATION_REPORT_H_
#define TANDEM_SCHEDULES_SIMULATION_REPORT_H_

#include <string>

#include "schedules/schedule.h"
#include "schedules/simulator.h"

namespace tandem::schedules {

struct SimulationReportOptions {
  // Adds "memory_timeline": per actor, [time, live] points.
  bool memory_timeline = false;
  // The table lists at most this many critical-path steps (first and last
  // halves); JSON always lists them all.
  int max_table_path_steps = 24;
};

// `result` must come from Simulate(schedule, ...).
std::string SimulationJson(const Schedule& schedule, const SimulationResult& result,
                           const SimulationReportOptions& options = {});
std::string SimulationTable(const Schedule& schedule, const SimulationResult& result,
                            const SimulationReportOptions& options = {});

// A readable name of one critical-path step, e.g. "F0.1 on actor 0",
// "F0.1 from actor 0 to actor 1" or "reduction of stage 1 on actor 1".
std::string CriticalStepName(const Schedule& schedule, const SimulationResult& result,
                             const CriticalStep& step);

}  // namespace tandem::schedules

#endif  // TANDEM_SCHEDULES_SIMULATION_REPORT_H_
