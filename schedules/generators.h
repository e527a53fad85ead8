// The built-in schedule generators.
//
// Each generator returns the same plain Schedule a user could write by hand
// in the text format; nothing downstream knows which generator made it. A
// generator checks its constraints and explains a violation in an
// InvalidArgument status. Every returned schedule passes Validate().
// Pure functions; thread-safe.
#ifndef TANDEM_SCHEDULES_GENERATORS_H_
#define TANDEM_SCHEDULES_GENERATORS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "schedules/schedule.h"

namespace tandem::schedules {

struct GeneratorOptions {
  int32_t actors = 0;        // P, the number of pipeline actors.
  int32_t microbatches = 0;  // M, microbatches per step.
  // V, stages per actor. 0 picks the generator's default: 1 for GPipe, 1F1B
  // and ZB-H1; 2 for interleaved 1F1B, looped BFS, ZB-V and DualPipeV.
  int32_t virtual_stages = 0;
  // graph-gpipe and graph-1f1b: the stage graph's edges (ir/stage_graph.h);
  // empty: a chain. Other generators make chains and refuse edges.
  std::vector<ir::StageEdge> stage_edges;
  // graph-*: the actor of each stage; empty: stage s on actor s, with as
  // many stages as actors.
  std::vector<int32_t> stage_actors;
};

// GPipe: all forwards, then all backwards; one stage per actor.
absl::StatusOr<Schedule> GenerateGPipe(const GeneratorOptions& options);
// 1F1B (PipeDream-Flush): warm-up forwards, then alternate; one stage per actor.
absl::StatusOr<Schedule> GenerateOneFOneB(const GeneratorOptions& options);
// Interleaved 1F1B in Megatron-LM's order; loop placement, V stages per
// actor; M must be a multiple of P.
absl::StatusOr<Schedule> GenerateInterleaved(const GeneratorOptions& options);
// Looped BFS: loop placement, every microbatch through one local stage
// before the next (breadth-first).
absl::StatusOr<Schedule> GenerateLoopedBfs(const GeneratorOptions& options);
// ZB-H1: zero-bubble with the backward split into I and W, 1F1B's memory;
// one stage per actor.
absl::StatusOr<Schedule> GenerateZeroBubbleH1(const GeneratorOptions& options);
// ZB-V: two stages per actor in V placement, split backward; M >= 2P-1.
absl::StatusOr<Schedule> GenerateZeroBubbleV(const GeneratorOptions& options);
// DualPipeV: two stages per actor in V placement; in the steady state each
// slot overlaps a forward of one stage with a full backward of the other
// (a group of two tasks); M >= 2P.
absl::StatusOr<Schedule> GenerateDualPipeV(const GeneratorOptions& options);

// Schedules over a stage DAG (GraphPipe), for any stage graph and
// placement; on a chain they are plain GPipe and 1F1B.
//
// graph-gpipe: every actor runs all its forwards, in (microbatch, stage)
// order, then all its backwards in (microbatch, reverse stage) order.
absl::StatusOr<Schedule> GenerateGraphGPipe(const GeneratorOptions& options);
// graph-1f1b: stage s keeps at most StagesToSink(s) microbatches in flight
// (the longest path from it to the sink, p - s on a chain), and each actor
// runs, whenever it is free, a ready backward before a ready forward (the
// lowest microbatch first), as a list schedule with F = 1 and B = 2 time
// units. The task order it records is the schedule.
absl::StatusOr<Schedule> GenerateGraphOneFOneB(const GeneratorOptions& options);

// How the step a schedule called `name` runs must update the weights:
// after the whole step (every schedule but two), or asynchronously as
// PipeDream (after every microbatch, stage s on the weights of p-1-s
// updates ago) or 2BW (every few microbatches, every stage one update
// behind) do. The compiler refuses a step traced for another mode.
enum class WeightUpdateMode : uint8_t { kFlush, kPipeDream, kTwoBuffer };

// How many microbatches a schedule keeps stashed at once at each stage.
enum class InFlight : uint8_t {
  kAllMicrobatches,  // GPipe: M at every stage
  kOneFOneB,         // 1F1B, ZB-H1: min(M, P - s) at stage s
};

// Everything the rest of Tandem asks of a built-in schedule, in one row per
// schedule: the one place its name is compared.
struct ScheduleTraits {
  const char* name;
  absl::StatusOr<Schedule> (*generate)(const GeneratorOptions&);
  int32_t virtual_stages;  // stages per actor (interleaved, zb-v: 2)
  InFlight in_flight;      // what a stage keeps stashed, for the partitioner
  bool takes_stage_graph;  // takes GeneratorOptions::stage_edges and stage_actors (graph-*)
  WeightUpdateMode weight_updates;
  bool planned;  // `tandem plan` considers it
};

// Every built-in schedule, in a stable order: "gpipe", "1f1b",
// "interleaved", "looped-bfs", "zb-h1", "zb-v", "dualpipev", "graph-gpipe",
// "graph-1f1b", "pipedream", "2bw".
const std::vector<ScheduleTraits>& BuiltInSchedules();
// The row of `name`; null for a name that is no built-in schedule (a file).
const ScheduleTraits* FindSchedule(absl::string_view name);

// The names of BuiltInSchedules(), in its order.
std::vector<std::string> GeneratorNames();

// pipedream and 2bw: 1F1B's order within a step, for a model traced to
// update asynchronously (ir/trace.h WeightUpdates; FORMAT.md, "Asynchronous
// pipelines"). The order is 1f1b's; the step is what differs.
bool IsAsynchronous(absl::string_view name);
// The row's weight_updates; kFlush for a name that is no built-in schedule.
WeightUpdateMode WeightUpdateModeOf(absl::string_view name);
// The row's takes_stage_graph; false for others.
bool TakesStageGraph(absl::string_view name);

// Runs the generator called `name`; InvalidArgument listing the known names
// when there is none.
absl::StatusOr<Schedule> Generate(absl::string_view name, const GeneratorOptions& options);

}  // namespace tandem::schedules

#endif  // TANDEM_SCHEDULES_GENERATORS_H_
