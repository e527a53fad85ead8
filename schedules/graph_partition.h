// Cutting a model whose segments form a DAG (a cost file with a segment
// graph) into one stage per actor, GraphPipe's way: over the graph's
// series-parallel decomposition (schedules/series_parallel.h), every way of
// giving the P stages to its runs (each run at least one, at most one per
// segment) is a candidate, and each run is cut into its stages by the exact
// chain partitioner (schedules/partition.h), with the stages after it on
// the longest path to the last stage counted for its in-flight microbatches
// and its last transfer. Branches of a parallel node thus get actors of
// their own and run side by side; which split of the actors is fastest is
// the planner's to find by simulating each (schedules/planner.h).
#ifndef TANDEM_SCHEDULES_GRAPH_PARTITION_H_
#define TANDEM_SCHEDULES_GRAPH_PARTITION_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "ir/stage_graph.h"
#include "schedules/cost_file.h"
#include "schedules/partition.h"
#include "schedules/series_parallel.h"

namespace tandem::schedules {

// The most allocations of stages to runs one search enumerates.
inline constexpr int32_t kMaxGraphAllocations = 4096;

struct GraphPartition {
  std::vector<int32_t> run_stages;  // stages per run, in segment order
  std::vector<PlanStage> stages;  // in segment order: stage ids follow the segments
  std::vector<ir::StageEdge> stage_edges;  // what the segment graph makes of the stages
  bool over_cap = false;  // some run fits the cap in no cut: cut without it
};

struct GraphPartitions {
  std::vector<GraphPartition> partitions;
  bool truncated = false;  // there are more than kMaxGraphAllocations: the first ones were cut
};

// The stages' graph: an edge s -> t for every segment edge from a segment
// of stage s to one of stage t != s. `segment_stage` gives each segment's
// stage, non-decreasing.
std::vector<ir::StageEdge> StageEdgesOf(const ir::StageGraph& segments, const std::vector<int32_t>& segment_stage);

// One partition per allocation of `options.stages` stages to the runs of
// `DecomposeSeriesParallel(costs.segment_graph())`. InvalidArgument when
// the graph needs more stages than `options.stages` (one per branch) or
// has fewer segments, or for options PartitionSegments refuses.
absl::StatusOr<GraphPartitions> PartitionSegmentGraph(const CostFile& costs, const PartitionOptions& options);

}  // namespace tandem::schedules

#endif  // TANDEM_SCHEDULES_GRAPH_PARTITION_H_
