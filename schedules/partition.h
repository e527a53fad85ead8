// Cutting a model's segments (schedules/cost_file.h) into pipeline stages:
// contiguous runs of segments, one stage per actor, each either keeping its
// activations or rematerialising, under a per-actor memory cap.
//
// The objective is the pipeline's step time, not only its slowest stage
// (Alpa's and PipeDream's formulation): with t_s the time of stage s for one
// microbatch (its F and B, the recomputed forward when it rematerialises,
// and the transfer of its output activation and of that activation's
// gradient), a step of M microbatches takes
//
//   T = sum_s t_s + (M - 1) * max_s t_s
//
// (fill and drain once, then the slowest stage paces the steady state).
// PartitionSegments finds the partition minimising T exactly: for each
// candidate bottleneck t_max (the time of some feasible stage), a dynamic
// program over (stages placed, segments covered) minimises sum_s t_s over
// the partitions whose stages all take at most t_max and fit the cap; the
// candidates are tried in increasing order and the search stops once
// (M - 1) * t_max + t_max cannot beat the best found.
//
// The memory of stage s holding segments [a, b): parameters and optimizer
// state of its segments, plus the task memory model's SteadyPeak
// (task_memory.h) for `in_flight(s)` forwards held: that many kept stashes
// (the sum of its segments' stash_bytes, or, rematerialising, its first
// segment's remat_stash_bytes), plus the largest working set of its
// segments, plus, rematerialising, the rest of the stash that a backward
// recomputes while it runs. in_flight(s) is the number of microbatches the
// schedule holds at once at stage s: M for GPipe, min(M, P - s) for 1F1B
// and the zero-bubble schedules that keep 1F1B's memory (P - s: the
// stages from s to the last, which `stages_after` extends past a run).
#ifndef TANDEM_SCHEDULES_PARTITION_H_
#define TANDEM_SCHEDULES_PARTITION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "schedules/cost_file.h"
#include "schedules/cost_model.h"
#include "schedules/generators.h"
#include "schedules/plan_file.h"

namespace tandem::schedules {

struct PartitionOptions {
  int32_t stages = 1;        // P, one per actor
  int32_t microbatches = 1;  // M
  InFlight in_flight = InFlight::kOneFOneB;
  int64_t memory_cap = 0;    // bytes per actor; 0: no cap
  bool allow_remat = true;   // a stage may rematerialise (to fit, or to be faster: never)
  // What a transfer costs, in seconds (an activation forward and its
  // gradient back, per stage boundary).
  LinkModel link;
  // Stages after the last of these on the longest path to the pipeline's
  // last stage: for a run of stages inside a stage DAG (a branch the
  // planner cuts on its own), whose stage s then keeps
  // min(M, stages - s + stages_after) in flight under 1F1B, and whose last
  // stage hands its activation on when stages_after > 0.
  int32_t stages_after = 0;
};

// A partition's stages are plan stages (schedules/plan_file.h) with their
// seconds and peak_bytes filled in; their actor is left to whoever places
// them (the planner, from the schedule).
struct Partition {
  std::vector<PlanStage> stages;
  double step_seconds = 0.0;  // T
};

// The time and memory of one stage (exposed for tests and reports).
PlanStage EvaluateStage(const CostFile& costs, const PartitionOptions& options, int32_t stage,
                           int32_t first_segment, int32_t end_segment, bool remat);
// T of a partition given as stages (each with its segments and remat).
double StepSeconds(const std::vector<PlanStage>& stages, int32_t microbatches);

// The best partition. InvalidArgument for options out of range (more stages
// than segments, say); ResourceExhausted when no partition fits the cap,
// naming the tightest stage of the partition that comes closest, its
// segments and by how many bytes it is over.
absl::StatusOr<Partition> PartitionSegments(const CostFile& costs, const PartitionOptions& options);

}  // namespace tandem::schedules

#endif  // TANDEM_SCHEDULES_PARTITION_H_
