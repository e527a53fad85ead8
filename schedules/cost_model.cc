#include "schedules/cost_model.h"

#include <string>

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

absl::Status CostModel::Check() const {
  for (int kind = 0; kind < static_cast<int>(kind_cost.size()); ++kind) {
    if (!(kind_cost[kind] >= 0.0) || std::isinf(kind_cost[kind])) {
      return absl::InvalidArgumentError(
          absl::StrCat("the cost of ", std::string(1, TaskKindLetter(static_cast<TaskKind>(kind))),
                       " must be finite and non-negative"));
    }
  }
  if (absl::Status status = link.Check("link costs"); !status.ok()) return status;
  if (!(activation_bytes >= 0.0) || !(gradient_bytes >= 0.0)) {
    return absl::InvalidArgumentError("transfer sizes must be non-negative");
  }
  if (data_parallel < 1 || data_parallel > kMaxDataParallel) {
    return absl::InvalidArgumentError(
        absl::StrCat("data_parallel is ", data_parallel, " replicas; it must be from 1 to ",
                     kMaxDataParallel));
  }
  if (!(stage_gradient_bytes >= 0.0) || std::isinf(stage_gradient_bytes)) {
    return absl::InvalidArgumentError(
        "the gradient bytes of a stage (stage_gradient_bytes) must be finite and non-negative");
  }
  for (const auto& [stage, bytes] : stage_gradient_bytes_override) {
    if (!(bytes >= 0.0) || std::isinf(bytes)) {
      return absl::InvalidArgumentError(absl::StrCat("the gradient bytes of stage ", stage,
                                                     " must be finite and non-negative"));
    }
  }
  if (!(remat_kept >= 0.0 && remat_kept <= 1.0)) {
    return absl::InvalidArgumentError("the fraction of activations a rematerialised stage keeps must be in [0, 1]");
  }
  return absl::OkStatus();
}

}  // namespace tandem::schedules
