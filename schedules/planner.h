// The planner behind `tandem plan`: given a model's measured segments (a
// cost file) and P actors under a per-actor memory cap, it searches
//
//   schedule      gpipe, 1f1b, zb-h1 (one stage per actor), interleaved and
//                 zb-v (two per actor, loop and V placement); and, when the
//                 cost file's segments form a DAG, graph-1f1b and
//                 graph-gpipe over a stage DAG, one stage per actor;
//   microbatches  M, every divisor of the global batch up to a bound; a
//                 microbatch of global_batch / M takes the costs measured
//                 at that size, or those of the nearest size measured,
//                 scaled linearly (plus a fixed overhead per task);
//   partition     the stages' segments and which stages rematerialise: for
//                 each (schedule, M), the exact partitioner
//                 (schedules/partition.h) under the schedule's in-flight
//                 rule; one stage per actor is cut under the cap (a stage
//                 rematerialises only to fit), virtual placements are cut
//                 for time and tried with and without rematerialisation;
//                 a DAG is cut per series-parallel run, for every split of
//                 the actors among its branches (schedules/graph_partition.h),
//                 while the chain schedules run its segments in order;
//
// simulates each candidate with the cost model (schedules/simulator.h) for
// its step time and bubble, and finds each actor's peak bytes: from the
// compiled program when the caller can compile the candidate (`compiled`,
// the exact static peak the executor reaches), else from a sweep over the
// actor's tasks with the cost file's bytes. Candidates whose every actor
// fits the cap are ranked by predicted step time. Pure functions apart from
// the callback; thread-compatible.
#ifndef TANDEM_SCHEDULES_PLANNER_H_
#define TANDEM_SCHEDULES_PLANNER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "schedules/cost_file.h"
#include "schedules/partition.h"
#include "schedules/plan_file.h"
#include "schedules/schedule.h"

namespace tandem::schedules {

// "gpipe", "1f1b", "interleaved", "zb-h1", "zb-v", "graph-1f1b", "graph-gpipe"
// (the last two only for a cost file with a segment graph).
std::vector<std::string> PlannerSchedules();

struct PlannerOptions {
  int32_t actors = 1;  // P, per replica
  int32_t data_parallel = 1;
  // Sequences (examples) per step per replica: M must divide it, and a
  // microbatch holds global_batch / M.
  int64_t global_batch = 1;
  int32_t max_microbatches = 128;
  int64_t memory_cap = 0;  // bytes per actor; 0: none
  std::vector<std::string> schedules = PlannerSchedules();
  bool allow_remat = true;
  // What a transfer costs, in seconds.
  LinkModel link;
  // Added to every task's time (dispatch, kernel launches): what makes
  // many small microbatches cost more than few large ones.
  double task_overhead_s = 0.0;
  // With a split backward, the share of a stage's stash its I frees (W
  // frees the rest), for the cost-model sweep.
  double input_grad_frees = 0.5;
  // How many of the fastest candidates the `compiled` callback checks.
  int32_t compiled_limit = 8;
};

// A plan the search evaluated: the plan, its stages' times and peaks and
// its prediction filled in (Plan::predicted_*: the simulated step and
// bubble, each actor's peak and where it came from), and whether it fits
// the cap.
struct Candidate {
  Plan plan;
  bool fits = true;  // every actor's peak within the cap

  int64_t LargestPeak() const;
  int32_t TightestActor() const;
  // "[h0..h4 | h5..h7 (remat)]", and " graph 0->2 1->2" for a stage DAG.
  std::string Describe(const CostFile& costs) const;
};

// Each actor's exact peak bytes for `candidate`, run as `schedule`.
using CompiledPeaks = std::function<absl::StatusOr<std::vector<int64_t>>(const Candidate& candidate,
                                                                          const Schedule& schedule)>;

struct PlanSearch {
  // Those that fit, fastest first; then the rest, closest to the cap first.
  std::vector<Candidate> candidates;
  // (schedule, M) pairs that could not be tried, and why.
  std::vector<std::string> skipped;
  int32_t compiled = 0;  // candidates whose peaks came from a compiled program
  bool exact = false;    // a `compiled` callback checked the fastest: only those may be chosen
};

// InvalidArgument for options out of range (no actors, a global batch of
// 0, a schedule the planner does not know, more stages than segments for
// every schedule); a candidate's own failure (its generator refusing M, say)
// is only `skipped`. The `compiled` callback's errors are returned.
absl::StatusOr<PlanSearch> SearchPlans(const CostFile& costs, const PlannerOptions& options,
                                       const CompiledPeaks& compiled = {});
// The same with the segments measured at several microbatch sizes (the
// same segments in each; InvalidArgument otherwise).
absl::StatusOr<PlanSearch> SearchPlans(const std::vector<CostFile>& measured, const PlannerOptions& options,
                                       const CompiledPeaks& compiled = {});

// The microbatch sizes the search tries: global_batch / M for every M it
// tries, largest first.
std::vector<int64_t> PlannerMicrobatchSizes(const PlannerOptions& options);

// One candidate evaluated as the search evaluates its own: `stages` (their
// segments and remat; the rest is computed) run as `schedule` with
// `microbatches` microbatches (a graph schedule over `stage_edges`). For
// comparing a hand-picked plan with the planner's. InvalidArgument when the
// stages do not fit the schedule.
absl::StatusOr<Candidate> EvaluateCandidate(const std::vector<CostFile>& measured, const PlannerOptions& options,
                                            const std::string& schedule, int32_t microbatches,
                                            const std::vector<PlanStage>& stages,
                                            const std::vector<ir::StageEdge>& stage_edges = {});

// The fastest candidate that fits; ResourceExhausted when none does, naming
// the closest candidate, its tightest actor, by how many bytes it is over
// and the cap that would fit it.
absl::StatusOr<Candidate> ChosenCandidate(const PlanSearch& search, const CostFile& costs,
                                          const PlannerOptions& options);

// Every actor's peak bytes by the cost model: its stages' state, then the
// memory model of schedules/task_memory.h swept over its tasks in program
// order. `costs` are the candidate's scaled segment costs.
std::vector<int64_t> CostModelPeaks(const CostFile& costs, const Candidate& candidate, const Schedule& schedule,
                                    double input_grad_frees);

}  // namespace tandem::schedules

#endif  // TANDEM_SCHEDULES_PLANNER_H_
