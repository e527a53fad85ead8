// Fuzz target: the planner's JSON files, which a user hands to the CLI: the
// cost file (`tandem profile --out`, `tandem plan --costs`, with its
// segment graph) and the plan file (`tandem plan --out`, `tandem train
// --plan`, with its stage graph). Both parsers read every input. Beyond not
// crashing: errors are InvalidArgument; what parses formats and parses back
// to the same cost file, and to the same plan (its stages, stage graph and
// settings).
#include <cstddef>
#include <cstdint>
#include <string>

#include "schedules/cost_file.h"
#include "schedules/plan_file.h"
#include "tests/fuzz/fuzz_support.h"

namespace tandem::schedules {
namespace {

void RunCostFile(absl::string_view text) {
  absl::StatusOr<CostFile> costs = ParseCostFile(text);
  if (!costs.ok()) {
    fuzz::FuzzCheck(costs.status().code() == absl::StatusCode::kInvalidArgument,
                    "unexpected error code: " + costs.status().ToString());
    return;
  }
  fuzz::FuzzCheck(costs->segment_graph().num_stages() == static_cast<int32_t>(costs->segments.size()),
                  "the segment graph does not cover the segments");
  absl::StatusOr<CostFile> again = ParseCostFile(FormatCostFile(*costs));
  fuzz::FuzzCheck(again.ok(), "a formatted cost file does not parse: " + again.status().ToString());
  fuzz::FuzzCheck(*again == *costs, "format then parse changed the cost file");
}

void RunPlanFile(absl::string_view text) {
  absl::StatusOr<Plan> plan = ParsePlanFile(text);
  if (!plan.ok()) {
    fuzz::FuzzCheck(plan.status().code() == absl::StatusCode::kInvalidArgument,
                    "unexpected error code: " + plan.status().ToString());
    return;
  }
  fuzz::FuzzCheck(plan->SegmentStages().size() == static_cast<size_t>(plan->segments), "segments not covered");
  absl::StatusOr<Plan> again = ParsePlanFile(FormatPlanFile(*plan));
  fuzz::FuzzCheck(again.ok(), "a formatted plan does not parse: " + again.status().ToString());
  fuzz::FuzzCheck(again->stages == plan->stages && again->stage_edges == plan->stage_edges &&
                      again->schedule == plan->schedule && again->actors == plan->actors &&
                      again->microbatches == plan->microbatches && again->segments == plan->segments,
                  "format then parse changed the plan");
}

}  // namespace
}  // namespace tandem::schedules

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text = tandem::fuzz::AsText(data, size);
  tandem::schedules::RunCostFile(text);
  tandem::schedules::RunPlanFile(text);
  return 0;
}
