// A measured cost model of a model's segments: the pieces between the
// candidate stage cuts (every pipeline_yield, or every block boundary). It
// is what a profiler writes and the planner reads (schedules/partition.h).
// Plain JSON, versioned, naming the model and the device it was measured on:
//
//   {"format": "tandem-costs", "version": 1, "model": "gpt ...", "device": "cpu",
//    "microbatch_size": 8,
//    "segments": [{"name": "h0", "forward_s": 0.0012, "backward_s": 0.0025,
//                  "backward_input_s": 0.0013, "backward_weight_s": 0.0012,
//                  "recompute_s": 0.0012, "activation_bytes": 65536,
//                  "stash_bytes": 524288, "remat_stash_bytes": 65536,
//                  "parameter_bytes": 200704, "optimizer_bytes": 401408,
//                  "working_bytes": 131072}, ...],
//    "segment_graph": "0->1 1->3 2->3"}
//
// "segment_graph" (optional) is the segments' dataflow when it is not the
// chain 0 -> 1 -> ...: the traced model's stage graph when every stage is a
// segment (ir/stage_graph.h; edges go from a lower segment to a higher one,
// so the segments' order is a topological order). A model with branches
// (Tracer::Branch) has one, and the planner cuts it as a DAG.
// Times are seconds per microbatch of microbatch_size sequences (examples;
// optional, default 1); bytes are per microbatch except the parameters' and
// the optimizer's. Every number must be finite and
// non-negative, and every size is bounded before anything is allocated
// from it: a file that breaks a rule is InvalidArgument naming the segment
// and the field.
#ifndef TANDEM_SCHEDULES_COST_FILE_H_
#define TANDEM_SCHEDULES_COST_FILE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ir/stage_graph.h"

namespace tandem::schedules {

inline constexpr int32_t kCostFileVersion = 1;
inline constexpr int32_t kMaxSegments = 4096;
inline constexpr size_t kMaxCostFileBytes = size_t{16} << 20;

struct SegmentCost {
  std::string name;
  double forward_s = 0.0;          // F
  double backward_s = 0.0;         // B (I and W together)
  double backward_input_s = 0.0;   // I
  double backward_weight_s = 0.0;  // W
  double recompute_s = 0.0;        // the forward again, inside a rematerialised backward
  int64_t activation_bytes = 0;    // what the segment hands the next one (and gets back as a gradient)
  int64_t stash_bytes = 0;         // kept from its forward to its backward
  int64_t remat_stash_bytes = 0;   // kept when its stage rematerialises: the segment's inputs
  int64_t parameter_bytes = 0;
  int64_t optimizer_bytes = 0;     // optimizer state and gradient accumulators
  int64_t working_bytes = 0;       // the most its tasks hold at once beyond the above
  friend bool operator==(const SegmentCost&, const SegmentCost&) = default;
};

struct CostFile {
  std::string model;
  std::string device;
  int64_t microbatch_size = 1;  // the sequences (examples) of the microbatches measured
  std::vector<SegmentCost> segments;
  std::vector<ir::StageEdge> segment_edges;  // empty: the chain

  ir::StageGraph segment_graph() const {
    return ir::StageGraph(static_cast<int32_t>(segments.size()), segment_edges);
  }
  friend bool operator==(const CostFile&, const CostFile&) = default;
};

// The JSON above; InvalidArgument saying what is wrong, and where.
absl::StatusOr<CostFile> ParseCostFile(absl::string_view text);
// The JSON above (numbers round-trip exactly).
std::string FormatCostFile(const CostFile& costs);

}  // namespace tandem::schedules

#endif  // TANDEM_SCHEDULES_COST_FILE_H_
