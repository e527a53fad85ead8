// The series-parallel structure of a model's segment DAG, the view
// GraphPipe partitions by: a model with branches (a two-tower encoder, say)
// is a series of parts, each either a run of segments one after another or
// a parallel node whose branches share no dataflow until they meet again.
// The planner (schedules/planner.h) cuts each run into consecutive stages
// and splits the actors among the branches of each parallel node.
//
// Segments are numbered in dataflow order (every edge goes from a lower
// segment to a higher one) and every part holds a contiguous range of them,
// so that the stages of a plan hold contiguous segments in order:
//
//   series    [a, b) split at k when every edge from [a, k) into [k, b)
//             goes from a sink of [a, k) to a source of [k, b), every such
//             pair has one, and there is at least one: all the dataflow
//             between the parts passes through that cut;
//   parallel  [a, b) split at k when no edge goes from [a, k) into [k, b):
//             the parts are independent branches;
//   run       a single segment, consecutive single segments in series (a
//             chain), and any range that is neither (not series-parallel,
//             or branches whose segments interleave): its segments then run
//             in their order, one after another.
//
// Decomposing a range costs O(segments + edges) per level; below
// kMaxSeriesParallelDepth levels a range is a run.
#ifndef TANDEM_SCHEDULES_SERIES_PARALLEL_H_
#define TANDEM_SCHEDULES_SERIES_PARALLEL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "ir/stage_graph.h"

namespace tandem::schedules {

inline constexpr int32_t kMaxSeriesParallelDepth = 64;

struct SeriesParallel {
  enum class Kind : uint8_t { kRun, kSeries, kParallel };
  Kind kind = Kind::kRun;
  int32_t first = 0;  // the segments [first, end)
  int32_t end = 0;
  // kSeries: its parts in dataflow order (no two runs next to each other);
  // kParallel: its branches, in segment order. Empty for a run.
  std::vector<SeriesParallel> children;

  int32_t size() const { return end - first; }
  // Its runs, in segment order.
  std::vector<const SeriesParallel*> Runs() const;
  // "S(P(R0-3 R4-6) R7-9)": runs by their first and last segment.
  std::string Describe() const;
  friend bool operator==(const SeriesParallel&, const SeriesParallel&) = default;
};

// The decomposition of all of `graph`'s segments (its stages, one segment
// each). A chain is one run.
SeriesParallel DecomposeSeriesParallel(const ir::StageGraph& graph);

}  // namespace tandem::schedules

#endif  // TANDEM_SCHEDULES_SERIES_PARALLEL_H_
