#include "schedules/partition.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "schedules/limits.h"
#include "schedules/task_memory.h"

namespace tandem::schedules {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

// Prefix sums over the segments, so that a stage's totals cost O(1).
struct Sums {
  std::vector<double> compute;    // F + B
  std::vector<double> recompute;  // recompute_s
  std::vector<int64_t> state;     // parameters + optimizer
  std::vector<int64_t> stash;

  explicit Sums(const CostFile& costs) {
    const size_t n = costs.segments.size();
    compute.assign(n + 1, 0.0);
    recompute.assign(n + 1, 0.0);
    state.assign(n + 1, 0);
    stash.assign(n + 1, 0);
    for (size_t i = 0; i < n; ++i) {
      const SegmentCost& s = costs.segments[i];
      compute[i + 1] = compute[i] + s.forward_s + s.backward_s;
      recompute[i + 1] = recompute[i] + s.recompute_s;
      state[i + 1] = state[i] + s.parameter_bytes + s.optimizer_bytes;
      stash[i + 1] = stash[i] + s.stash_bytes;
    }
  }
};

int64_t InFlightAt(const PartitionOptions& options, int32_t stage) {
  if (options.in_flight == InFlight::kAllMicrobatches) return options.microbatches;
  return std::min<int64_t>(options.microbatches, options.stages - stage + options.stages_after);
}

PlanStage Evaluate(const CostFile& costs, const Sums& sums, const PartitionOptions& options, int32_t stage,
                      int32_t first, int32_t end, bool remat, int64_t working) {
  PlanStage planned{.first_segment = first, .end_segment = end, .remat = remat};
  planned.seconds = sums.compute[end] - sums.compute[first];
  if (remat) planned.seconds += sums.recompute[end] - sums.recompute[first];
  if (stage + 1 < options.stages + options.stages_after) {
    // Its output activation goes forward and that activation's gradient
    // comes back.
    const double bytes = static_cast<double>(costs.segments[end - 1].activation_bytes);
    planned.seconds += 2.0 * options.link.Seconds(bytes);
  }
  const int64_t stash = sums.stash[end] - sums.stash[first];
  const StageMemory memory{.stash = static_cast<double>(stash),
                           .kept = static_cast<double>(remat ? costs.segments[first].remat_stash_bytes : stash),
                           .working = static_cast<double>(working)};
  planned.peak_bytes =
      (sums.state[end] - sums.state[first]) + std::llround(SteadyPeak(memory, InFlightAt(options, stage)));
  return planned;
}

bool Fits(const PartitionOptions& options, const PlanStage& stage) {
  return options.memory_cap <= 0 || stage.peak_bytes <= options.memory_cap;
}

// Every (stage, first, end, remat) the options allow, evaluated once:
// index ((stage * n + first) * (n + 1) + end) * 2 + remat.
class StageTable {
 public:
  StageTable(const CostFile& costs, const PartitionOptions& options)
      : n_(static_cast<int32_t>(costs.segments.size())), stages_(options.stages) {
    const Sums sums(costs);
    table_.resize(static_cast<size_t>(stages_) * n_ * (n_ + 1) * 2);
    for (int32_t stage = 0; stage < stages_; ++stage) {
      for (int32_t first = 0; first < n_; ++first) {
        int64_t working = 0;
        for (int32_t end = first + 1; end <= n_; ++end) {
          working = std::max(working, costs.segments[end - 1].working_bytes);
          for (int remat = 0; remat < 2; ++remat) {
            at(stage, first, end, remat) = Evaluate(costs, sums, options, stage, first, end, remat != 0, working);
          }
        }
      }
    }
  }

  const PlanStage& at(int32_t stage, int32_t first, int32_t end, int remat) const {
    return table_[((static_cast<size_t>(stage) * n_ + first) * (n_ + 1) + end) * 2 + remat];
  }

 private:
  PlanStage& at(int32_t stage, int32_t first, int32_t end, int remat) {
    return table_[((static_cast<size_t>(stage) * n_ + first) * (n_ + 1) + end) * 2 + remat];
  }

  int32_t n_;
  int32_t stages_;
  std::vector<PlanStage> table_;
};

// The stages chosen by a dynamic program's back-pointers.
std::vector<PlanStage> Unwind(const StageTable& table, int32_t stages, int32_t n,
                                 const std::vector<std::vector<std::pair<int32_t, int>>>& choice) {
  std::vector<PlanStage> result(stages);
  int32_t end = n;
  for (int32_t stage = stages - 1; stage >= 0; --stage) {
    const auto [first, remat] = choice[stage + 1][end];
    result[stage] = table.at(stage, first, end, remat);
    end = first;
  }
  return result;
}

// The partition that comes closest to the cap: the least, over partitions,
// of their largest peak. Names its tightest stage.
absl::Status NothingFits(const CostFile& costs, const PartitionOptions& options, const StageTable& table) {
  const int32_t n = static_cast<int32_t>(costs.segments.size());
  const int32_t stages = options.stages;
  const int64_t kNone = std::numeric_limits<int64_t>::max();
  std::vector<std::vector<int64_t>> best(stages + 1, std::vector<int64_t>(n + 1, kNone));
  std::vector<std::vector<std::pair<int32_t, int>>> choice(stages + 1,
                                                           std::vector<std::pair<int32_t, int>>(n + 1, {0, 0}));
  best[0][0] = 0;
  for (int32_t k = 1; k <= stages; ++k) {
    for (int32_t end = k; end <= n - (stages - k); ++end) {
      for (int32_t first = k - 1; first < end; ++first) {
        if (best[k - 1][first] == kNone) continue;
        for (int remat = 0; remat < (options.allow_remat ? 2 : 1); ++remat) {
          const int64_t peak = std::max(best[k - 1][first], table.at(k - 1, first, end, remat).peak_bytes);
          if (peak < best[k][end]) {
            best[k][end] = peak;
            choice[k][end] = {first, remat};
          }
        }
      }
    }
  }
  const std::vector<PlanStage> closest = Unwind(table, stages, n, choice);
  int32_t tightest = 0;
  for (int32_t stage = 1; stage < stages; ++stage) {
    if (closest[stage].peak_bytes > closest[tightest].peak_bytes) tightest = stage;
  }
  const PlanStage& stage = closest[tightest];
  return absl::ResourceExhaustedError(absl::StrCat(
      "no partition of ", n, " segments into ", stages, " stages fits ", options.memory_cap,
      " bytes per actor: the closest needs ", stage.peak_bytes, " bytes on actor ", tightest, " (segments ",
      costs.segments[stage.first_segment].name, "..", costs.segments[stage.end_segment - 1].name,
      stage.remat ? ", rematerialised" : "", "), ", stage.peak_bytes - options.memory_cap,
      " over; it fits with a cap of ", stage.peak_bytes, " bytes",
      options.allow_remat ? "" : ", or with rematerialisation", ", or on more actors"));
}

}  // namespace

PlanStage EvaluateStage(const CostFile& costs, const PartitionOptions& options, int32_t stage,
                           int32_t first_segment, int32_t end_segment, bool remat) {
  int64_t working = 0;
  for (int32_t i = first_segment; i < end_segment; ++i) working = std::max(working, costs.segments[i].working_bytes);
  return Evaluate(costs, Sums(costs), options, stage, first_segment, end_segment, remat, working);
}

double StepSeconds(const std::vector<PlanStage>& stages, int32_t microbatches) {
  double sum = 0.0;
  double slowest = 0.0;
  for (const PlanStage& stage : stages) {
    sum += stage.seconds;
    slowest = std::max(slowest, stage.seconds);
  }
  return sum + (microbatches - 1) * slowest;
}

absl::StatusOr<Partition> PartitionSegments(const CostFile& costs, const PartitionOptions& options) {
  const int32_t n = static_cast<int32_t>(costs.segments.size());
  if (n < 1 || n > kMaxSegments) {
    return absl::InvalidArgumentError(absl::StrCat("a partition needs 1 to ", kMaxSegments, " segments, not ", n));
  }
  if (options.stages < 1 || options.stages > n) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot cut ", n, " segments into ", options.stages, " stages (each stage needs a segment)"));
  }
  if (options.microbatches < 1) return absl::InvalidArgumentError("a step needs at least one microbatch");
  if (options.stages_after < 0 || options.stages_after > kMaxSegments) {
    return absl::InvalidArgumentError(
        absl::StrCat("stages after the run ", options.stages_after, " is outside [0, ", kMaxSegments, "]"));
  }
  if (absl::Status status = options.link.Check("link costs"); !status.ok()) return status;
  // The table holds stages * n * (n + 1) * 2 stages: bound its bytes before
  // allocating.
  const int64_t table_bytes =
      static_cast<int64_t>(options.stages) * n * (n + 1) * 2 * static_cast<int64_t>(sizeof(PlanStage));
  if (table_bytes > kMaxPlanTableBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        n, " segments over ", options.stages, " stages are too many to plan at once: the planner's table would take ",
        table_bytes >> 20, " MiB, above its bound of ", kMaxPlanTableBytes >> 20,
        " MiB (merge segments, or plan fewer stages)"));
  }
  const StageTable table(costs, options);
  const int32_t stages = options.stages;
  const int remats = options.allow_remat ? 2 : 1;

  // The candidate bottlenecks: every feasible stage's time.
  std::vector<double> candidates;
  for (int32_t stage = 0; stage < stages; ++stage) {
    for (int32_t first = stage; first < n; ++first) {
      for (int32_t end = first + 1; end <= n - (stages - 1 - stage); ++end) {
        for (int remat = 0; remat < remats; ++remat) {
          const PlanStage& planned = table.at(stage, first, end, remat);
          if (Fits(options, planned)) candidates.push_back(planned.seconds);
        }
      }
    }
  }
  std::sort(candidates.begin(), candidates.end());
  candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());

  Partition best;
  best.step_seconds = kInfinity;
  std::vector<std::vector<double>> sum(stages + 1, std::vector<double>(n + 1));
  std::vector<std::vector<std::pair<int32_t, int>>> choice(stages + 1,
                                                           std::vector<std::pair<int32_t, int>>(n + 1, {0, 0}));
  for (double bottleneck : candidates) {
    // Every partition left has a stage this slow: T >= M * bottleneck.
    if (options.microbatches * bottleneck >= best.step_seconds) break;
    for (auto& row : sum) std::fill(row.begin(), row.end(), kInfinity);
    sum[0][0] = 0.0;
    for (int32_t k = 1; k <= stages; ++k) {
      for (int32_t end = k; end <= n - (stages - k); ++end) {
        for (int32_t first = k - 1; first < end; ++first) {
          if (sum[k - 1][first] == kInfinity) continue;
          for (int remat = 0; remat < remats; ++remat) {
            const PlanStage& planned = table.at(k - 1, first, end, remat);
            if (planned.seconds > bottleneck || !Fits(options, planned)) continue;
            const double total = sum[k - 1][first] + planned.seconds;
            if (total < sum[k][end]) {
              sum[k][end] = total;
              choice[k][end] = {first, remat};
            }
          }
        }
      }
    }
    if (sum[stages][n] == kInfinity) continue;
    std::vector<PlanStage> found = Unwind(table, stages, n, choice);
    const double step = StepSeconds(found, options.microbatches);
    if (step < best.step_seconds) {
      best.stages = std::move(found);
      best.step_seconds = step;
    }
  }
  if (best.stages.empty()) return NothingFits(costs, options, table);
  return best;
}

}  // namespace tandem::schedules
