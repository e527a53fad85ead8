// The simulator against the analytic results of the papers that introduced
// each schedule, with zero link cost. Equality is exact: every cost is a
// small integer, so every time is exactly representable.
#include <string>
#include <tuple>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "schedules/generators.h"
#include "schedules/simulator.h"

namespace tandem::schedules {
namespace {

SimulationResult SimulateGenerated(const std::string& name, int p, int m, int v,
                                   const CostModel& costs) {
  GeneratorOptions options;
  options.actors = p;
  options.microbatches = m;
  options.virtual_stages = v;
  absl::StatusOr<Schedule> schedule = Generate(name, options);
  EXPECT_TRUE(schedule.ok()) << schedule.status();
  if (!schedule.ok()) return {};
  absl::StatusOr<SimulationResult> result = Simulate(*schedule, costs);
  EXPECT_TRUE(result.ok()) << result.status();
  return result.ok() ? *std::move(result) : SimulationResult{};
}

CostModel ForwardOneBackwardTwo() {
  CostModel costs;
  costs.KindCost(TaskKind::kForward) = 1.0;
  costs.KindCost(TaskKind::kBackward) = 2.0;
  return costs;
}

class FlushScheduleTest : public ::testing::TestWithParam<std::tuple<std::string, int, int>> {};

// GPipe (Huang et al. 2019, "GPipe: Efficient Training of Giant Neural
// Networks using Pipeline Parallelism", sec. 2.2) and 1F1B (Narayanan et al.
// 2021, "Memory-Efficient Pipeline-Parallel DNN Training" (PipeDream-Flush);
// Narayanan et al. SC'21, "Efficient Large-Scale Language Model Training on
// GPU Clusters Using Megatron-LM", sec. 2.2.1) both have a bubble fraction
// of (p-1)/(m+p-1) of the step: every actor idles (p-1)(F+B) of a makespan
// of (m+p-1)(F+B).
TEST_P(FlushScheduleTest, BubbleFractionIsPMinusOneOverMPlusPMinusOne) {
  const auto& [name, p, multiple] = GetParam();
  const int m = multiple * p;
  const SimulationResult result = SimulateGenerated(name, p, m, 0, ForwardOneBackwardTwo());
  const double expected = static_cast<double>(p - 1) / static_cast<double>(m + p - 1);
  EXPECT_EQ(result.makespan, (m + p - 1) * 3.0);
  EXPECT_EQ(result.bubble, expected);
  ASSERT_EQ(result.per_actor.size(), static_cast<size_t>(p));
  for (int r = 0; r < p; ++r) {
    EXPECT_EQ(result.per_actor[r].bubble, expected) << "actor " << r;
    EXPECT_EQ(result.per_actor[r].idle, (p - 1) * 3.0) << "actor " << r;
  }
}

// Peak live activations: GPipe holds every microbatch's activations before
// its first backward (Huang et al. 2019), so m on every actor; 1F1B limits
// actor r to the p - r forwards in flight (Narayanan et al. 2021), or m when
// there are fewer microbatches.
TEST_P(FlushScheduleTest, PeakActivations) {
  const auto& [name, p, multiple] = GetParam();
  const int m = multiple * p;
  const SimulationResult result = SimulateGenerated(name, p, m, 0, ForwardOneBackwardTwo());
  ASSERT_EQ(result.per_actor.size(), static_cast<size_t>(p));
  for (int r = 0; r < p; ++r) {
    const double expected = name == "gpipe" ? m : std::min(p - r, m);
    EXPECT_EQ(result.per_actor[r].peak_activations, expected) << "actor " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(
    PaperFormulas, FlushScheduleTest,
    ::testing::Combine(::testing::Values("gpipe", "1f1b"), ::testing::Values(2, 4, 8),
                       ::testing::Values(1, 2, 4)),
    [](const auto& info) {
      std::string name = std::get<0>(info.param) == "gpipe" ? "GPipe" : "OneFOneB";
      return name + "_p" + std::to_string(std::get<1>(info.param)) + "_m" +
             std::to_string(std::get<1>(info.param) * std::get<2>(info.param));
    });

class InterleavedTest : public ::testing::TestWithParam<std::tuple<int, int, int>> {};

// Interleaved 1F1B (Narayanan et al. SC'21, sec. 2.2.2): with v model chunks
// per actor the bubble time is (p-1)(t_f+t_b)/v, where t_f and t_b are an
// actor's forward and backward times for its whole share of the model. Here
// each of the v stages of an actor costs F=1, B=2, so t_f = v, t_b = 2v and
// every actor idles (p-1)(F+B) = 3(p-1), for m a multiple of p. That is 1/v
// of 1F1B's bubble on the same model (one stage per actor costing vF, vB).
TEST_P(InterleavedTest, BubbleTimeIsPMinusOneTimesFPlusB) {
  const auto& [p, v, multiple] = GetParam();
  const int m = multiple * p;
  const SimulationResult result =
      SimulateGenerated("interleaved", p, m, v, ForwardOneBackwardTwo());
  ASSERT_EQ(result.per_actor.size(), static_cast<size_t>(p));
  for (int r = 0; r < p; ++r) {
    EXPECT_EQ(result.per_actor[r].busy, m * v * 3.0) << "actor " << r;
    EXPECT_EQ(result.per_actor[r].idle, (p - 1) * 3.0) << "actor " << r;
  }

  CostModel whole_actor;
  whole_actor.KindCost(TaskKind::kForward) = v;
  whole_actor.KindCost(TaskKind::kBackward) = 2.0 * v;
  const SimulationResult one_f_one_b = SimulateGenerated("1f1b", p, m, 0, whole_actor);
  ASSERT_EQ(one_f_one_b.per_actor.size(), static_cast<size_t>(p));
  EXPECT_EQ(one_f_one_b.per_actor[0].idle, v * result.per_actor[0].idle);
}

std::string InterleavedName(const ::testing::TestParamInfo<std::tuple<int, int, int>>& info) {
  const auto& [p, v, multiple] = info.param;
  return "p" + std::to_string(p) + "_v" + std::to_string(v) + "_m" + std::to_string(p * multiple);
}

INSTANTIATE_TEST_SUITE_P(PaperFormulas, InterleavedTest,
                         ::testing::Combine(::testing::Values(2, 4, 8), ::testing::Values(2, 3, 4),
                                            ::testing::Values(1, 2, 4)),
                         InterleavedName);

class ZeroBubbleH1Test : public ::testing::TestWithParam<std::tuple<int, int>> {};

// ZB-H1 (Qi et al. 2023, "Zero Bubble Pipeline Parallelism", sec. 3.1): with
// the backward split into I and W, deferring W's into the cool-down leaves a
// bubble of (p-1)(T_F + T_B - T_W) per actor, T_B being the input-gradient
// part (our I). With F = I = W = 1 that is p - 1, a third of 1F1B's
// (p-1)(F+I+W) at the same peak memory.
TEST_P(ZeroBubbleH1Test, BubbleTimeIsPMinusOneTimesFPlusIMinusW) {
  const auto& [p, multiple] = GetParam();
  const int m = multiple * p;
  CostModel costs;
  costs.KindCost(TaskKind::kForward) = 1.0;
  costs.KindCost(TaskKind::kBackwardInput) = 1.0;
  costs.KindCost(TaskKind::kBackwardWeight) = 1.0;
  const SimulationResult result = SimulateGenerated("zb-h1", p, m, 0, costs);
  ASSERT_EQ(result.per_actor.size(), static_cast<size_t>(p));
  for (int r = 0; r < p; ++r) {
    EXPECT_EQ(result.per_actor[r].busy, m * 3.0) << "actor " << r;
    EXPECT_EQ(result.per_actor[r].idle, (p - 1) * (1.0 + 1.0 - 1.0)) << "actor " << r;
  }
  EXPECT_EQ(result.makespan, m * 3.0 + (p - 1));
}

std::string ZeroBubbleName(const ::testing::TestParamInfo<std::tuple<int, int>>& info) {
  const auto& [p, multiple] = info.param;
  return "p" + std::to_string(p) + "_m" + std::to_string(p * multiple);
}

INSTANTIATE_TEST_SUITE_P(PaperFormulas, ZeroBubbleH1Test,
                         ::testing::Combine(::testing::Values(2, 4, 8), ::testing::Values(1, 2, 4)),
                         ZeroBubbleName);

// Not a paper formula: every built-in runs to completion in the simulator,
// keeps every actor busy for exactly its own tasks' cost, and leaves a bubble
// strictly inside [0, 1).
TEST(EveryBuiltIn, SimulatesWithConsistentAccounting) {
  CostModel costs;
  for (const std::string& name : GeneratorNames()) {
    for (const int p : {2, 4, 8}) {
      const SimulationResult result = SimulateGenerated(name, p, 4 * p, 0, costs);
      ASSERT_EQ(result.per_actor.size(), static_cast<size_t>(p)) << name << " p=" << p;
      EXPECT_GE(result.bubble, 0.0) << name;
      EXPECT_LT(result.bubble, 1.0) << name;
      for (const ActorStats& stats : result.per_actor) {
        EXPECT_EQ(stats.busy + stats.idle, result.makespan) << name << " p=" << p;
        EXPECT_GT(stats.peak_activations, 0.0) << name << " p=" << p;
      }
      ASSERT_FALSE(result.critical_path.empty()) << name;
      EXPECT_EQ(result.critical_path.front().start, 0.0) << name;
      EXPECT_EQ(result.critical_path.back().end, result.makespan) << name;
    }
  }
}

}  // namespace
}  // namespace tandem::schedules
