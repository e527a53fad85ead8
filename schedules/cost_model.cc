#include "schedules/cost_model.h"

namespace tandem::schedules {

double CostModel::Cost(TaskKind kind, StageId stage) const {
  if (!stage_cost.empty()) {
    if (auto it = stage_cost.find({kind, stage.value}); it != stage_cost.end()) return it->second;
  }
  return kind_cost[static_cast<int>(kind)];
}

double CostModel::GradientBytes(StageId stage) const {
  if (!stage_gradient_bytes_override.empty()) {
    if (auto it = stage_gradient_bytes_override.find(stage.value);
        it != stage_gradient_bytes_override.end()) {
      return it->second;
    }
  }
  return stage_gradient_bytes;
}

double CostModel::ReductionTime(StageId stage) const {
  if (data_parallel <= 1) return 0.0;
  const double replicas = data_parallel;
  return 2.0 * (replicas - 1.0) * link.Seconds(GradientBytes(stage) / replicas);
}

}  // namespace tandem::schedules
