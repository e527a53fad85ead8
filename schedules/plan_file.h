// A pipeline plan: what `tandem plan` chooses and `tandem train --plan`
// and Session::Start run. It names the model's segments each stage holds
// (the segments of the cost file it was planned from: with
// `tandem profile --cut-every-layer`, segment i is layer i), whether each
// stage rematerialises, the schedule, the microbatch count and size, and
// what the planner predicted. Plain JSON, versioned:
//
//   {"format": "tandem-plan", "version": 1, "model": "gpt: ...", "device": "cpu",
//    "actors": 2, "data_parallel": 1, "schedule": "1f1b", "virtual_stages": 1,
//    "microbatches": 8, "microbatch_size": 4, "segments": 8, "memory_cap": 0,
//    "stages": [{"segments": [0, 5], "remat": false, "actor": 0,
//                "seconds": 0.004, "peak_bytes": 1200}, ...],
//    "stage_graph": "0->2 1->2",
//    "predicted": {"step_s": 0.051, "bubble": 0.12, "peak_bytes": [1200, 1100],
//                  "memory": "compiled program"}}
//
// "segments": [a, b) of stage s; the stages cover the segments in order.
// A stage's "seconds" (its time per microbatch) and "peak_bytes" (its
// actor's peak, as the partitioner counts it) are the planner's
// predictions, optional when read.
// "stage_graph" (graph-1f1b and graph-gpipe; optional) is the stages' DAG
// (ir/stage_graph.h), absent for a chain.
// Every count is bounded before anything is allocated from it; a file that
// breaks a rule is InvalidArgument naming the field.
#ifndef TANDEM_SCHEDULES_PLAN_FILE_H_
#define TANDEM_SCHEDULES_PLAN_FILE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "schedules/schedule.h"

namespace tandem::schedules {

// Where a plan's predicted peak memory comes from: the planner's cost model
// of each stage, or the compiled program's static peaks (exact).
enum class MemorySource : uint8_t { kCostModel, kCompiledProgram };
// "cost model", "compiled program": the words plan files and reports use.
absl::string_view MemorySourceName(MemorySource source);

inline constexpr int32_t kPlanFileVersion = 1;
inline constexpr size_t kMaxPlanFileBytes = size_t{4} << 20;

// One stage of a plan: the planner's and the partitioner's unit, and a
// plan file's.
struct PlanStage {
  int32_t first_segment = 0;
  int32_t end_segment = 0;  // one past the last
  bool remat = false;
  int32_t actor = 0;  // where the schedule places it
  // Predicted: the stage's time per microbatch (t_s), and its actor's peak
  // as the partitioner counts it (schedules/partition.h); 0 when unknown.
  double seconds = 0.0;
  int64_t peak_bytes = 0;
  friend bool operator==(const PlanStage&, const PlanStage&) = default;
};

struct Plan {
  std::string model;  // as the cost file named it
  std::string device;
  int32_t actors = 1;  // per replica
  int32_t data_parallel = 1;
  std::string schedule;  // a generator's name (schedules/generators.h)
  int32_t virtual_stages = 1;  // stages per actor
  int32_t microbatches = 1;  // per replica
  int64_t microbatch_size = 1;  // sequences (examples) per microbatch
  int32_t segments = 0;
  int64_t memory_cap = 0;  // bytes per actor it was planned under; 0: none
  std::vector<PlanStage> stages;
  std::vector<ir::StageEdge> stage_edges;  // empty: the chain
  // The planner's prediction.
  double predicted_step_s = 0.0;
  double predicted_bubble = 0.0;
  std::vector<int64_t> predicted_peak_bytes;  // per actor
  MemorySource memory_source = MemorySource::kCostModel;
  friend bool operator==(const Plan&, const Plan&) = default;

  // The stage of each segment (segments values).
  std::vector<int32_t> SegmentStages() const;
  // Whether each stage rematerialises.
  std::vector<bool> RematByStage() const;
};

// The JSON above; InvalidArgument saying what is wrong and where (stages
// that do not cover the segments in order, an actor out of range, ...).
absl::StatusOr<Plan> ParsePlanFile(absl::string_view text);
std::string FormatPlanFile(const Plan& plan);

// The plan's schedule, generated (and validated) over the plan's stage
// graph, with its stages placed where the plan says (a graph schedule is
// given the placement): InvalidArgument when the generator places them
// otherwise.
absl::StatusOr<Schedule> PlanSchedule(const Plan& plan);

}  // namespace tandem::schedules

#endif  // TANDEM_SCHEDULES_PLAN_FILE_H_
