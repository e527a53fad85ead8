// The costs a schedule is simulated and planned under: what a link between
// two actors costs (LinkModel, the one alpha-beta model of the simulator,
// the partitioner and the planner) and what each task costs (CostModel).
#ifndef TANDEM_SCHEDULES_COST_MODEL_H_
#define TANDEM_SCHEDULES_COST_MODEL_H_

#include <array>
#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "schedules/schedule.h"

namespace tandem::schedules {

// A link between two actors: a transfer of `bytes` holds its sender's link
// for alpha + beta * bytes (a per-message cost plus inverse bandwidth), and
// arrives `latency` after that: the message's flight, which overlaps the
// sender's later transfers (LogP's L). In whatever unit the caller's costs
// use. Plain value type.
struct LinkModel {
  double alpha = 0.0;
  double beta = 0.0;
  double latency = 0.0;

  double Seconds(double bytes) const { return alpha + beta * bytes; }
  // InvalidArgument, naming `what` ("the link model"), unless alpha, beta
  // and latency are finite and non-negative.
  absl::Status Check(absl::string_view what) const {
    if (!(alpha >= 0.0) || !(beta >= 0.0) || std::isinf(alpha) || std::isinf(beta)) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": alpha and beta must be finite and non-negative, not ",
                                                     alpha, " and ", beta));
    }
    if (!(latency >= 0.0) || std::isinf(latency)) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": latency must be finite and non-negative, not ", latency));
    }
    return absl::OkStatus();
  }
};

// How a fused slot's cost follows from its tasks' costs.
enum class GroupCost : uint8_t {
  kMax,  // The tasks overlap (the default).
  kSum,  // The tasks run back to back.
};

// The most data-parallel replicas CostModel::data_parallel may name.
inline constexpr int32_t kMaxDataParallel = 65536;

// Costs in abstract time units. Plain value type.
struct CostModel {
  // Default compute cost per kind, indexed by TaskKind: F=1, B=2, I=1, W=1.
  std::array<double, 4> kind_cost = {1.0, 2.0, 1.0, 1.0};
  // Per-(kind, stage) overrides of kind_cost.
  std::map<std::pair<TaskKind, int32_t>, double> stage_cost;
  GroupCost group_cost = GroupCost::kMax;
  // What a transfer between actors costs.
  LinkModel link;
  double activation_bytes = 1.0;  // Sent along F -> F (and F -> B/I) edges.
  double gradient_bytes = 1.0;    // Sent along B/I -> B/I (and I -> W) edges.
  // The fraction of a forward's activations that I frees; W frees the rest.
  double input_grad_frees = 0.5;
  // Rematerialised stages (`--remat stage`): such a stage keeps only
  // remat_kept of a forward's activations (its inputs) until its backward,
  // which recomputes the forward first: B and I cost the stage's F more, and
  // hold the recomputed (1 - remat_kept) while they run.
  std::set<int32_t> remat_stages;
  double remat_kept = 0.0;
  // Replicas of the pipeline whose gradients are reduced after the step, in
  // [1, kMaxDataParallel]; 1 means no reduction at all.
  int32_t data_parallel = 1;
  // The gradient bytes of one stage, reduced across the replicas (unlike
  // gradient_bytes, the size of one microbatch's input gradient)...
  double stage_gradient_bytes = 1.0;
  // ... and per-stage overrides of it. Stages the schedule lacks are ignored.
  std::map<int32_t, double> stage_gradient_bytes_override;

  double& KindCost(TaskKind kind) { return kind_cost[static_cast<int>(kind)]; }
  // The cost of `kind` at `stage`: the override if any, else the kind's default.
  double Cost(TaskKind kind, StageId stage) const;
  // The gradient bytes of `stage`: the override if any, else stage_gradient_bytes.
  double GradientBytes(StageId stage) const;
  // How long reducing `stage`'s gradients takes on one actor:
  // 2 (D - 1) link.Seconds(GradientBytes(stage) / D), 0 for D = 1.
  double ReductionTime(StageId stage) const;
  // InvalidArgument naming the first cost that is negative, NaN or
  // infinite, or out of its range (data_parallel, remat_kept).
  absl::Status Check() const;
};

}  // namespace tandem::schedules

#endif  // TANDEM_SCHEDULES_COST_MODEL_H_
