// Behaviour of the simulator on small schedules built by hand: link costs,
// send serialization, fused slots, the memory rule, the critical path and
// invalid schedules. The analytic formulas live in simulator_formula_test.cc.
#include "schedules/simulator.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "schedules/simulation_report.h"
#include "tests/schedules/test_schedules.h"

namespace tandem::schedules {
namespace {

using testing::B;
using testing::F;
using testing::I;
using testing::MakeSchedule;
using testing::TinyOneFOneB;
using testing::W;

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<std::string> PathNames(const Schedule& schedule, const SimulationResult& result) {
  std::vector<std::string> names;
  for (const CriticalStep& step : result.critical_path) {
    names.push_back(CriticalStepName(schedule, result, step));
  }
  return names;
}

TEST(Simulator, TinyOneFOneBTimesAndCriticalPath) {
  const Schedule schedule = TinyOneFOneB();
  absl::StatusOr<SimulationResult> result = Simulate(schedule, CostModel{});
  ASSERT_TRUE(result.ok()) << result.status();
  // Makespan (m + p - 1)(F + B) = 3 * 3.
  EXPECT_EQ(result->makespan, 9.0);
  EXPECT_EQ(result->slot_times[0][2].start, 4.0);  // B0.0 waits for B1.0's gradient.
  EXPECT_EQ(result->slot_times[0][3].start, 7.0);
  EXPECT_EQ(result->slot_times[1][2].start, 4.0);  // F1.1 waits for the actor.
  EXPECT_THAT(PathNames(schedule, *result),
              ElementsAre("F0.0 on actor 0", "F0.0 from actor 0 to actor 1", "F1.0 on actor 1",
                          "B1.0 on actor 1", "F1.1 on actor 1", "B1.1 on actor 1",
                          "B1.1 from actor 1 to actor 0", "B0.1 on actor 0"));
  // The path is contiguous from 0 to the makespan.
  double time = 0.0;
  for (const CriticalStep& step : result->critical_path) {
    EXPECT_EQ(step.start, time);
    time = step.end;
  }
  EXPECT_EQ(time, result->makespan);
  // Two forward and two backward transfers; none within an actor.
  EXPECT_EQ(result->transfers.size(), 4u);
}

// Remat: B recomputes F (3 instead of 2), and a stage keeps a quarter of
// each forward until its backward, which holds the recomputed rest while
// it runs.
TEST(Simulator, RematerialisedStagesPayTheirForwardAgainAndKeepOnlyTheirInputs) {
  const Schedule schedule = TinyOneFOneB();
  CostModel costs;
  costs.remat_stages = {0, 1};
  costs.remat_kept = 0.25;
  absl::StatusOr<SimulationResult> result = Simulate(schedule, costs);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->makespan, 3 * (1.0 + 3.0));  // (m + p - 1)(F + B + F)
  // Actor 0: F0.0, F0.1 keep 0.25 each; B0.0 recomputes 0.75 on top: 1.25.
  EXPECT_EQ(result->per_actor[0].peak_activations, 1.25);
  EXPECT_EQ(result->per_actor[1].peak_activations, 1.0);
  // Only stage 1 rematerialised: actor 0 as without remat.
  costs.remat_stages = {1};
  result = Simulate(schedule, costs);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->per_actor[0].peak_activations, 2.0);
  costs.remat_kept = 1.5;
  EXPECT_EQ(Simulate(schedule, costs).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(Simulator, LinkCostLengthensTwoActorMakespanByTwoTransfers) {
  // GPipe with p=2, m=1: F0 -> F1 -> B1 -> B0, two transfers on the path.
  const Schedule schedule = MakeSchedule(1, {{{{F(0, 0)}}, {{B(0, 0)}}},
                                             {{{F(1, 0)}}, {{B(1, 0)}}}});
  absl::StatusOr<SimulationResult> free_link = Simulate(schedule, CostModel{});
  ASSERT_TRUE(free_link.ok()) << free_link.status();
  EXPECT_EQ(free_link->makespan, 6.0);

  CostModel costs;
  costs.link.alpha = 0.5;
  costs.link.beta = 0.25;
  costs.activation_bytes = 1.0;
  costs.gradient_bytes = 2.0;
  absl::StatusOr<SimulationResult> slow_link = Simulate(schedule, costs);
  ASSERT_TRUE(slow_link.ok()) << slow_link.status();
  // alpha + beta * bytes: 0.75 for the activation, 1.0 for the gradient.
  EXPECT_EQ(slow_link->makespan, 6.0 + 0.75 + 1.0);
  ASSERT_EQ(slow_link->transfers.size(), 2u);
  EXPECT_EQ(slow_link->transfers[0].start, 1.0);
  EXPECT_EQ(slow_link->transfers[0].end, 1.75);
  EXPECT_EQ(slow_link->transfers[1].start, 4.75);
  EXPECT_EQ(slow_link->transfers[1].end, 5.75);
  EXPECT_EQ(slow_link->critical_path.size(), 6u);
}

TEST(Simulator, SendsOfOneActorSerialize) {
  // Actor 0 finishes F0.0 at 1 and F0.1 at 2; each send takes 3, so the
  // second waits for the first to leave the send track.
  const Schedule schedule =
      MakeSchedule(2, {{{{F(0, 0)}}, {{F(0, 1)}}, {{B(0, 0)}}, {{B(0, 1)}}},
                       {{{F(1, 0)}}, {{F(1, 1)}}, {{B(1, 0)}}, {{B(1, 1)}}}});
  CostModel costs;
  costs.link.alpha = 3.0;
  absl::StatusOr<SimulationResult> result = Simulate(schedule, costs);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_GE(result->transfers.size(), 2u);
  EXPECT_EQ(result->transfers[0].start, 1.0);
  EXPECT_EQ(result->transfers[0].end, 4.0);
  EXPECT_EQ(result->transfers[1].start, 4.0);
  EXPECT_EQ(result->transfers[1].end, 7.0);
  EXPECT_EQ(result->slot_times[1][1].start, 7.0);
}

TEST(Simulator, LatencyDelaysArrivalWithoutHoldingTheSendTrack) {
  // As above, but each send holds the track for 1 and arrives 3 after it
  // leaves: the second leaves at 2 (not behind the first's flight) and
  // arrives at 6; F1.1 starts then, not at 7 as under alpha = 4.
  const Schedule schedule = MakeSchedule(
      2, {{{{F(0, 0)}}, {{F(0, 1)}}, {{B(0, 0)}}, {{B(0, 1)}}}, {{{F(1, 0)}}, {{F(1, 1)}}, {{B(1, 0)}}, {{B(1, 1)}}}});
  CostModel costs;
  costs.link.alpha = 1.0;
  costs.link.latency = 3.0;
  absl::StatusOr<SimulationResult> result = Simulate(schedule, costs);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_GE(result->transfers.size(), 2u);
  EXPECT_EQ(result->transfers[0].start, 1.0);
  EXPECT_EQ(result->transfers[0].end, 5.0);
  EXPECT_EQ(result->transfers[1].start, 2.0);
  EXPECT_EQ(result->transfers[1].end, 6.0);
  EXPECT_EQ(result->slot_times[1][0].start, 5.0);
  EXPECT_EQ(result->slot_times[1][1].start, 6.0);
}

TEST(Simulator, FusedSlotCostsTheMaxOfItsTasksByDefault) {
  // One actor, one stage: F0.0, then F0.1 fused with B0.0, then B0.1.
  const Schedule schedule =
      MakeSchedule(2, {{{{F(0, 0)}}, {{F(0, 1), B(0, 0)}}, {{B(0, 1)}}}});
  absl::StatusOr<SimulationResult> overlapped = Simulate(schedule, CostModel{});
  ASSERT_TRUE(overlapped.ok()) << overlapped.status();
  EXPECT_EQ(overlapped->makespan, 1.0 + 2.0 + 2.0);

  CostModel costs;
  costs.group_cost = GroupCost::kSum;
  absl::StatusOr<SimulationResult> serial = Simulate(schedule, costs);
  ASSERT_TRUE(serial.ok()) << serial.status();
  EXPECT_EQ(serial->makespan, 1.0 + 3.0 + 2.0);
  // F0.1 allocates at the fused slot's start, while F0.0's unit is live.
  EXPECT_EQ(overlapped->per_actor[0].peak_activations, 2.0);
}

TEST(Simulator, PerStageCostOverridesTheKindDefault) {
  const Schedule schedule = MakeSchedule(1, {{{{F(0, 0)}}, {{B(0, 0)}}},
                                             {{{F(1, 0)}}, {{B(1, 0)}}}});
  CostModel costs;
  costs.KindCost(TaskKind::kForward) = 2.0;
  costs.stage_cost[{TaskKind::kBackward, 1}] = 5.0;
  absl::StatusOr<SimulationResult> result = Simulate(schedule, costs);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->makespan, 2.0 + 2.0 + 5.0 + 2.0);
  EXPECT_EQ(result->per_actor[1].busy, 7.0);
  EXPECT_EQ(result->per_actor[1].idle, 4.0);
}

TEST(Simulator, SplitBackwardFreesActivationsInTwoParts) {
  // The rule: F allocates 1 at its start, I frees input_grad_frees at its
  // end, W frees the rest at its end.
  const Schedule schedule = MakeSchedule(1, {{{{F(0, 0)}}, {{I(0, 0)}}, {{W(0, 0)}}}});
  CostModel costs;
  costs.input_grad_frees = 0.25;
  absl::StatusOr<SimulationResult> result = Simulate(schedule, costs);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->makespan, 3.0);
  EXPECT_EQ(result->per_actor[0].peak_activations, 1.0);
  const std::vector<MemoryPoint>& memory = result->memory[0];
  ASSERT_EQ(memory.size(), 3u);
  EXPECT_EQ(memory[0].time, 0.0);
  EXPECT_EQ(memory[0].live, 1.0);
  EXPECT_EQ(memory[1].time, 2.0);
  EXPECT_EQ(memory[1].live, 0.75);
  EXPECT_EQ(memory[2].time, 3.0);
  EXPECT_EQ(memory[2].live, 0.0);
}

TEST(Simulator, FreesBeforeAllocationsAtEqualTimes) {
  // 1F1B's actor 1 alternates F and B: the B's free at time t comes before
  // the next F's allocation at t, so the peak stays 1.
  absl::StatusOr<SimulationResult> result = Simulate(TinyOneFOneB(), CostModel{});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->per_actor[0].peak_activations, 2.0);
  EXPECT_EQ(result->per_actor[1].peak_activations, 1.0);
}

TEST(Simulator, CyclicScheduleIsAnErrorNamingTheStuckTasks) {
  // Actor 1 runs B1.0 before F1.0, and actor 0 waits for B1.0's gradient.
  const Schedule schedule = MakeSchedule(1, {{{{F(0, 0)}}, {{B(0, 0)}}},
                                             {{{B(1, 0)}}, {{F(1, 0)}}}});
  absl::StatusOr<SimulationResult> result = Simulate(schedule, CostModel{});
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(result.status().message(), HasSubstr("cannot run to completion"));
  EXPECT_THAT(result.status().message(),
              HasSubstr("actor 0: B0.0 (slot 1) waits for B1.0 (actor 1, slot 0)"));
  EXPECT_THAT(result.status().message(),
              HasSubstr("actor 1: B1.0 (slot 0) waits for F1.0 (actor 1, slot 1)"));
}

TEST(Simulator, CrossActorCycleIsAnError) {
  // Each actor's first task needs the other actor's second task.
  const Schedule schedule = MakeSchedule(1, {{{{B(0, 0)}}, {{F(0, 0)}}},
                                             {{{B(1, 0)}}, {{F(1, 0)}}}});
  absl::StatusOr<SimulationResult> result = Simulate(schedule, CostModel{});
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(result.status().message(), HasSubstr("actor 0: B0.0"));
  EXPECT_THAT(result.status().message(), HasSubstr("actor 1: B1.0"));
}

TEST(Simulator, TaskFusedWithItsOwnInputIsStuck) {
  const Schedule schedule = MakeSchedule(1, {{{{F(0, 0), B(0, 0)}}}});
  absl::StatusOr<SimulationResult> result = Simulate(schedule, CostModel{});
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(result.status().message(), HasSubstr("waits for F0.0 in the same slot"));
}

TEST(Simulator, MissingProducerIsAnError) {
  const Schedule schedule = MakeSchedule(1, {{{{F(0, 0)}}, {{B(0, 0)}}}, {{{B(1, 0)}}}});
  absl::StatusOr<SimulationResult> result = Simulate(schedule, CostModel{});
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(result.status().message(),
              HasSubstr("actor 1: B1.0 (slot 0) waits for F1.0, which is not in the schedule"));
}

TEST(Simulator, DuplicateAndOutOfRangeTasksAreErrors) {
  absl::StatusOr<SimulationResult> duplicate =
      Simulate(MakeSchedule(1, {{{{F(0, 0)}}, {{F(0, 0)}}, {{B(0, 0)}}}}), CostModel{});
  ASSERT_FALSE(duplicate.ok());
  EXPECT_THAT(duplicate.status().message(), HasSubstr("F0.0 appears twice"));

  absl::StatusOr<SimulationResult> out_of_range =
      Simulate(MakeSchedule(1, {{{{F(0, 3)}}}}), CostModel{});
  ASSERT_FALSE(out_of_range.ok());
  EXPECT_THAT(out_of_range.status().message(), HasSubstr("names microbatch 3 of 1"));

  CostModel negative;
  negative.KindCost(TaskKind::kBackward) = -1.0;
  EXPECT_FALSE(Simulate(TinyOneFOneB(), negative).ok());
}

TEST(SimulationReport, JsonHasTheDocumentedKeys) {
  const Schedule schedule = TinyOneFOneB();
  absl::StatusOr<SimulationResult> result = Simulate(schedule, CostModel{});
  ASSERT_TRUE(result.ok()) << result.status();
  const std::string json = SimulationJson(schedule, *result);
  EXPECT_THAT(json, HasSubstr("\"makespan\":9,"));
  EXPECT_THAT(json, HasSubstr("\"bubble\":0.3333333333333333,"));
  EXPECT_THAT(json, HasSubstr("{\"actor\":0,\"busy\":6,\"idle\":3,\"bubble\":0.3333333333333333,"
                              "\"peak_activations\":2}"));
  EXPECT_THAT(json, HasSubstr("\"critical_path\":["));
  EXPECT_THAT(json, HasSubstr("{\"type\":\"transfer\",\"from\":1,\"to\":0,\"task\":\"B1.1\","
                              "\"start\":7,\"end\":7}"));
  const std::string table = SimulationTable(schedule, *result);
  EXPECT_THAT(table, HasSubstr("makespan 9, bubble 33.33%"));
  EXPECT_THAT(table, HasSubstr("critical path (8 steps)"));
}

}  // namespace
}  // namespace tandem::schedules
