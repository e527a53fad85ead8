// Drawings of a simulated schedule: an ASCII grid for terminals, an SVG
// picture, and a Chrome / Perfetto trace.
//
// Each takes the schedule and the SimulationResult that Simulate() returned
// for it, and returns the whole document as a string (files are written by
// the caller). Labels name a task by kind and microbatch ("F3"); when some
// actor holds several stages they name the stage too ("F5.3", stage 5,
// microbatch 3). Pure functions.
#ifndef TANDEM_SCHEDULES_DRAWING_H_
#define TANDEM_SCHEDULES_DRAWING_H_

#include <string>

#include "schedules/schedule.h"
#include "schedules/simulator.h"
#include "schedules/trace_events.h"

namespace tandem::schedules {

// Trace time per simulated cost unit: 1 unit = 1000 us (shows as 1 ms).
inline constexpr double kTraceMicrosecondsPerUnit = 1000.0;

struct AsciiOptions {
  // Time units per character column; 0 picks one: 1 when every time is an
  // integer, else the shortest slot, widened to fit max_columns.
  double time_per_column = 0.0;
  int max_columns = 240;
};

// One row per actor, one column per time step (columns separated by a space
// and as wide as the longest label): a slot's label where it starts, '-'
// while it continues, '.' when the actor idles. With data parallelism, a row
// "reduce N" under actor N shows its reductions ("R<stage>"). A header of
// times and a legend frame the grid.
std::string DrawAscii(const Schedule& schedule, const SimulationResult& result,
                      const AsciiOptions& options = {});

// One row per actor and one <rect class="task"> per task, coloured by kind
// (the tasks of a fused slot share its time span, stacked), with labels, a
// time axis and a legend; with data parallelism, a lane under each actor's
// row with one <rect class="reduction"> per reduction.
std::string DrawSvg(const Schedule& schedule, const SimulationResult& result);

// The simulation as trace events: per actor (process "actor N") a compute
// track with one slice per slot, send and recv tracks with one slice per
// transfer, a flow from each send to its receive, an "activations" counter
// track and, with data parallelism, a "reduce" track with one slice per
// reduction. Reusable: callers may add measured events to the builder.
TraceBuilder SimulationTrace(const Schedule& schedule, const SimulationResult& result);

// SimulationTrace(...).ToJson().
std::string DrawPerfetto(const Schedule& schedule, const SimulationResult& result);

}  // namespace tandem::schedules

#endif  // TANDEM_SCHEDULES_DRAWING_H_
