// The simulator's data-parallel gradient reduction: each actor reduces each
// of its stages once the stage's last backward task has ended, on a reduce
// track of its own (FIFO), for 2(D-1)(alpha + beta * G/D); the step ends at
// the last slot or reduction. Times are exact: every cost is dyadic.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "schedules/drawing.h"
#include "schedules/generators.h"
#include "schedules/simulation_report.h"
#include "schedules/simulator.h"
#include "tests/schedules/test_schedules.h"

namespace tandem::schedules {
namespace {

using testing::TinyOneFOneB;

using ::testing::HasSubstr;
using ::testing::Not;

Schedule Generated(const std::string& name, int p, int m, int v = 0) {
  GeneratorOptions options;
  options.actors = p;
  options.microbatches = m;
  options.virtual_stages = v;
  absl::StatusOr<Schedule> schedule = Generate(name, options);
  EXPECT_TRUE(schedule.ok()) << schedule.status();
  return schedule.ok() ? *std::move(schedule) : Schedule{};
}

SimulationResult MustSimulate(const Schedule& schedule, const CostModel& costs) {
  absl::StatusOr<SimulationResult> result = Simulate(schedule, costs);
  EXPECT_TRUE(result.ok()) << result.status();
  return result.ok() ? *std::move(result) : SimulationResult{};
}

// The end of the last slot of `actor` holding a B, I or W task of `stage`
// (-1 when there is none): when the stage's reduction is released.
double LastBackwardEnd(const Schedule& schedule, const SimulationResult& result, int actor,
                       int stage) {
  double end = -1.0;
  const std::vector<Slot>& program = schedule.programs[actor];
  for (size_t slot = 0; slot < program.size(); ++slot) {
    for (const Task& task : program[slot].tasks) {
      if (task.kind != TaskKind::kForward && task.stage.value == stage) {
        end = result.slot_times[actor][slot].end;
      }
    }
  }
  return end;
}

// The tiny case of the task: 1F1B, p=2, m=4, D=4, alpha=1, beta=0.5 (so a
// pipeline transfer of 1 unit costs 1.5), 8 gradient bytes per stage.
CostModel TinyDataParallelCosts() {
  CostModel costs;
  costs.link.alpha = 1.0;
  costs.link.beta = 0.5;
  costs.data_parallel = 4;
  costs.stage_gradient_bytes = 8.0;
  return costs;
}

TEST(DataParallel, ReductionStartsAtTheStagesLastBackwardAndTakesTheRingTime) {
  const Schedule schedule = Generated("1f1b", 2, 4);
  const CostModel costs = TinyDataParallelCosts();
  const SimulationResult result = MustSimulate(schedule, costs);
  // 2 (D-1) (alpha + beta G/D) = 2 * 3 * (1 + 0.5 * 8/4).
  EXPECT_EQ(costs.ReductionTime(StageId(0)), 12.0);
  ASSERT_EQ(result.reductions.size(), 2u);
  // Worked by hand: actor 1 ends B1.3 at 17.5; its gradient reaches actor
  // 0 at 19, which ends B0.3 at 21.
  EXPECT_EQ(SlotName(schedule.programs[0].back()), "B0.3");
  EXPECT_EQ(SlotName(schedule.programs[1].back()), "B1.3");
  EXPECT_EQ(result.slot_times[0].back().end, 21.0);
  EXPECT_EQ(result.slot_times[1].back().end, 17.5);

  const Reduction& first = result.reductions[0];
  EXPECT_EQ(first.actor, ActorId(0));
  EXPECT_EQ(first.stage, StageId(0));
  EXPECT_EQ(first.start, result.slot_times[0].back().end);
  EXPECT_EQ(first.end - first.start, 12.0);
  EXPECT_EQ(first.bytes, 2.0 * 3.0 / 4.0 * 8.0);
  const Reduction& second = result.reductions[1];
  EXPECT_EQ(second.actor, ActorId(1));
  EXPECT_EQ(second.stage, StageId(1));
  EXPECT_EQ(second.start, 17.5);
  EXPECT_EQ(second.end, 29.5);

  EXPECT_EQ(result.compute_end, 21.0);
  EXPECT_EQ(result.makespan, 33.0);
  EXPECT_EQ(result.makespan, first.end);
  EXPECT_EQ(result.data_parallel, 4);
  // Busy and idle are the compute track's; the exposed reduction is idle.
  EXPECT_EQ(result.per_actor[0].busy, 4 * 1.0 + 4 * 2.0);
  EXPECT_EQ(result.per_actor[0].idle, 33.0 - 12.0);
  EXPECT_EQ(result.per_actor[0].reduce_busy, 12.0);
  EXPECT_EQ(result.per_actor[1].reduce_busy, 12.0);
  EXPECT_EQ(result.bubble_time, 2 * 33.0 - 2 * 12.0);

  // The critical path ends in the reduction, released by B0.3.
  ASSERT_GE(result.critical_path.size(), 2u);
  const CriticalStep& last = result.critical_path.back();
  EXPECT_EQ(last.kind, CriticalStep::Kind::kReduction);
  EXPECT_EQ(last.reduction, 0);
  EXPECT_EQ(last.actor, ActorId(0));
  EXPECT_EQ(CriticalStepName(schedule, result, last), "reduction of stage 0 on actor 0");
  const CriticalStep& release = result.critical_path[result.critical_path.size() - 2];
  EXPECT_EQ(CriticalStepName(schedule, result, release), "B0.3 on actor 0");
  double time = 0.0;
  for (const CriticalStep& step : result.critical_path) {
    EXPECT_EQ(step.start, time);
    time = step.end;
  }
  EXPECT_EQ(time, result.makespan);
}

TEST(DataParallel, LastStagesReductionOverlapsTheFirstStagesDrain) {
  const Schedule schedule = Generated("1f1b", 4, 8);
  CostModel costs;
  costs.link.beta = 1.0;  // Transfers of 1 unit cost 1; reductions 2 * 1 * 8/2.
  costs.data_parallel = 2;
  costs.stage_gradient_bytes = 8.0;
  const SimulationResult result = MustSimulate(schedule, costs);
  ASSERT_EQ(result.reductions.size(), 4u);
  const Reduction& last_stage = result.reductions[3];
  ASSERT_EQ(last_stage.actor, ActorId(3));
  ASSERT_EQ(last_stage.stage, StageId(3));
  EXPECT_EQ(last_stage.start, LastBackwardEnd(schedule, result, 3, 3));
  EXPECT_EQ(last_stage.end - last_stage.start, 8.0);
  // Actor 0 still drains its backwards when the last stage's reduction starts.
  EXPECT_LT(last_stage.start, result.slot_times[0].back().end);
  EXPECT_LT(last_stage.start, result.reductions[0].start);
  // Each stage's reduction starts when its actor's drain ends, so the step
  // ends with the first stage's.
  for (int actor = 0; actor < 4; ++actor) {
    EXPECT_EQ(result.reductions[actor].start, result.slot_times[actor].back().end) << actor;
  }
  EXPECT_EQ(result.makespan, result.slot_times[0].back().end + 8.0);
}

// Interleaved 1F1B, p=2, v=2: actor 0 holds stages 0 and 2, actor 1 stages 1
// and 3. Reductions of 20 outlast the gap between an actor's two releases, so
// the second waits for the first on the reduce track.
TEST(DataParallel, ActorWithTwoStagesReducesThemOneAtATimeInReleaseOrder) {
  const Schedule schedule = Generated("interleaved", 2, 4, 2);
  CostModel costs;
  costs.link.beta = 1.0;
  costs.activation_bytes = 0.0;  // Free pipeline transfers.
  costs.gradient_bytes = 0.0;
  costs.data_parallel = 2;
  costs.stage_gradient_bytes = 20.0;  // 2 * 1 * (20/2) = 20.
  const SimulationResult result = MustSimulate(schedule, costs);
  ASSERT_EQ(result.reductions.size(), 4u);
  const std::pair<int, int> expected_order[] = {{0, 2}, {0, 0}, {1, 3}, {1, 1}};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(result.reductions[i].actor.value, expected_order[i].first) << i;
    EXPECT_EQ(result.reductions[i].stage.value, expected_order[i].second) << i;
    EXPECT_EQ(result.reductions[i].end - result.reductions[i].start, 20.0) << i;
  }
  for (int actor = 0; actor < 2; ++actor) {
    const Reduction& first = result.reductions[2 * actor];
    const Reduction& second = result.reductions[2 * actor + 1];
    const double first_release = LastBackwardEnd(schedule, result, actor, first.stage.value);
    const double second_release = LastBackwardEnd(schedule, result, actor, second.stage.value);
    EXPECT_LT(first_release, second_release) << actor;
    EXPECT_EQ(first.start, first_release) << actor;
    // Queued: released before the first one ended, it starts when that ends.
    EXPECT_LT(second_release, first.end) << actor;
    EXPECT_EQ(second.start, first.end) << actor;
    EXPECT_EQ(result.per_actor[actor].reduce_busy, 40.0) << actor;
  }
  EXPECT_EQ(result.makespan, std::max(result.reductions[1].end, result.reductions[3].end));

  // The path ends with two reductions on one track and the slot that
  // released the first of them.
  const std::vector<CriticalStep>& path = result.critical_path;
  ASSERT_GE(path.size(), 3u);
  const CriticalStep& last = path[path.size() - 1];
  const CriticalStep& queued_behind = path[path.size() - 2];
  const CriticalStep& release = path[path.size() - 3];
  ASSERT_EQ(last.kind, CriticalStep::Kind::kReduction);
  ASSERT_EQ(queued_behind.kind, CriticalStep::Kind::kReduction);
  EXPECT_EQ(queued_behind.reduction + 1, last.reduction);
  EXPECT_EQ(queued_behind.actor, last.actor);
  EXPECT_EQ(queued_behind.end, last.start);
  EXPECT_EQ(release.kind, CriticalStep::Kind::kCompute);
  EXPECT_EQ(release.end, queued_behind.start);
  EXPECT_EQ(last.end, result.makespan);
}

TEST(DataParallel, PerStageGradientBytesOverrideTheDefault) {
  const Schedule schedule = Generated("interleaved", 2, 4, 2);
  CostModel costs;
  costs.link.beta = 1.0;
  costs.activation_bytes = 0.0;
  costs.gradient_bytes = 0.0;
  costs.data_parallel = 2;
  costs.stage_gradient_bytes = 20.0;
  costs.stage_gradient_bytes_override[0] = 40.0;
  costs.stage_gradient_bytes_override[17] = 5.0;  // No such stage: ignored.
  EXPECT_EQ(costs.GradientBytes(StageId(0)), 40.0);
  EXPECT_EQ(costs.GradientBytes(StageId(2)), 20.0);
  const SimulationResult result = MustSimulate(schedule, costs);
  std::map<int, double> durations;
  std::map<int, double> bytes;
  for (const Reduction& reduction : result.reductions) {
    durations[reduction.stage.value] = reduction.end - reduction.start;
    bytes[reduction.stage.value] = reduction.bytes;
  }
  EXPECT_EQ(durations, (std::map<int, double>{{0, 40.0}, {1, 20.0}, {2, 20.0}, {3, 20.0}}));
  EXPECT_EQ(bytes, (std::map<int, double>{{0, 40.0}, {1, 20.0}, {2, 20.0}, {3, 20.0}}));
}

TEST(DataParallel, SplitBackwardReleasesAtTheStagesLastIOrW) {
  // One actor, one stage, F F I I W W at 1 each: the stage's last backward
  // task is W0.0, which ends at 6 (I0.1 ends at 4).
  const Schedule schedule = testing::MakeSchedule(
      2, {{{{testing::F(0, 0)}}, {{testing::F(0, 1)}}, {{testing::I(0, 0)}}, {{testing::I(0, 1)}},
           {{testing::W(0, 1)}}, {{testing::W(0, 0)}}}});
  CostModel costs;
  costs.link.alpha = 0.5;
  costs.data_parallel = 2;  // 2 * 1 * 0.5 = 1.
  const SimulationResult result = MustSimulate(schedule, costs);
  ASSERT_EQ(result.reductions.size(), 1u);
  EXPECT_EQ(result.reductions[0].start, 6.0);
  EXPECT_EQ(result.reductions[0].end, 7.0);
  EXPECT_EQ(result.makespan, 7.0);
  EXPECT_EQ(result.compute_end, 6.0);
}

TEST(DataParallel, StageWithoutABackwardHasNothingToReduce) {
  // Forwards only (no gradients): nothing is reduced, and the step is the
  // compute alone.
  const Schedule schedule =
      testing::MakeSchedule(2, {{{{testing::F(0, 0)}}, {{testing::F(0, 1)}}}});
  CostModel costs;
  costs.link.alpha = 1.0;
  costs.data_parallel = 8;
  const SimulationResult result = MustSimulate(schedule, costs);
  EXPECT_TRUE(result.reductions.empty());
  EXPECT_EQ(result.makespan, 2.0);
  EXPECT_EQ(result.compute_end, 2.0);
}

// Every built-in with D=4: one reduction per (actor, stage held), each
// released by the stage's last backward there, FIFO per actor, the formula's
// duration, and the step ending at the last slot or reduction.
TEST(DataParallel, EveryBuiltInKeepsTheReductionInvariants) {
  CostModel costs;
  costs.link.alpha = 0.5;
  costs.link.beta = 0.25;
  costs.data_parallel = 4;
  costs.stage_gradient_bytes = 3.0;
  const double duration = 2.0 * (4 - 1) * (0.5 + 0.25 * 3.0 / 4);
  for (const std::string& name : GeneratorNames()) {
    for (const int p : {2, 4}) {
      const Schedule schedule = Generated(name, p, 4 * p);
      const SimulationResult result = MustSimulate(schedule, costs);
      ASSERT_EQ(result.per_actor.size(), static_cast<size_t>(p)) << name;
      EXPECT_EQ(result.reductions.size(), static_cast<size_t>(schedule.num_stages)) << name;
      double last_end = result.compute_end;
      double previous_end = 0.0;
      int32_t previous_actor = -1;
      for (const Reduction& reduction : result.reductions) {
        EXPECT_GE(reduction.actor.value, previous_actor) << name;
        if (reduction.actor.value != previous_actor) previous_end = 0.0;
        const double release =
            LastBackwardEnd(schedule, result, reduction.actor.value, reduction.stage.value);
        EXPECT_GE(release, 0.0) << name;
        EXPECT_EQ(reduction.start, std::max(release, previous_end)) << name;
        EXPECT_DOUBLE_EQ(reduction.end - reduction.start, duration) << name;
        previous_end = reduction.end;
        previous_actor = reduction.actor.value;
        last_end = std::max(last_end, reduction.end);
      }
      EXPECT_EQ(result.makespan, last_end) << name;
      for (const ActorStats& stats : result.per_actor) {
        EXPECT_EQ(stats.busy + stats.idle, result.makespan) << name;
      }
      ASSERT_FALSE(result.critical_path.empty()) << name;
      EXPECT_EQ(result.critical_path.front().start, 0.0) << name;
      EXPECT_EQ(result.critical_path.back().end, result.makespan) << name;
    }
  }
}

TEST(DataParallel, OneReplicaChangesNothing) {
  const Schedule schedule = Generated("zb-h1", 4, 8);
  CostModel plain;
  plain.link.alpha = 0.5;
  CostModel one_replica = plain;
  one_replica.data_parallel = 1;
  one_replica.stage_gradient_bytes = 1000.0;
  one_replica.stage_gradient_bytes_override[0] = 7.0;
  const SimulationResult before = MustSimulate(schedule, plain);
  const SimulationResult after = MustSimulate(schedule, one_replica);
  EXPECT_TRUE(after.reductions.empty());
  EXPECT_EQ(after.makespan, after.compute_end);
  EXPECT_EQ(after.per_actor[0].reduce_busy, 0.0);
  SimulationReportOptions options;
  options.memory_timeline = true;
  const std::string json = SimulationJson(schedule, after, options);
  EXPECT_EQ(json, SimulationJson(schedule, before, options));
  EXPECT_THAT(json, Not(HasSubstr("reduc")));
  EXPECT_THAT(json, Not(HasSubstr("data_parallel")));
  EXPECT_THAT(json, Not(HasSubstr("compute_end")));
  const std::string table = SimulationTable(schedule, after);
  EXPECT_EQ(table, SimulationTable(schedule, before));
  EXPECT_THAT(table, Not(HasSubstr("data parallel")));
  EXPECT_EQ(DrawAscii(schedule, after), DrawAscii(schedule, before));
  EXPECT_EQ(DrawSvg(schedule, after), DrawSvg(schedule, before));
  const std::string trace = DrawPerfetto(schedule, after);
  EXPECT_EQ(trace, DrawPerfetto(schedule, before));
  EXPECT_THAT(trace, Not(HasSubstr("reduce")));
}

TEST(DataParallel, BadReplicaCountsAndSizesAreErrors) {
  const Schedule schedule = TinyOneFOneB();
  for (const int32_t replicas : {0, -3, kMaxDataParallel + 1}) {
    CostModel costs;
    costs.data_parallel = replicas;
    absl::StatusOr<SimulationResult> result = Simulate(schedule, costs);
    ASSERT_FALSE(result.ok()) << replicas;
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(result.status().message(),
                HasSubstr(absl::StrCat("data_parallel is ", replicas,
                                       " replicas; it must be from 1 to 65536")));
  }
  CostModel largest;
  largest.data_parallel = kMaxDataParallel;
  EXPECT_TRUE(Simulate(schedule, largest).ok());

  for (const double bytes : {-1.0, std::numeric_limits<double>::quiet_NaN(),
                             std::numeric_limits<double>::infinity()}) {
    CostModel costs;
    costs.data_parallel = 2;
    costs.stage_gradient_bytes = bytes;
    absl::StatusOr<SimulationResult> result = Simulate(schedule, costs);
    ASSERT_FALSE(result.ok()) << bytes;
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(result.status().message(),
                HasSubstr("the gradient bytes of a stage (stage_gradient_bytes) must be finite "
                          "and non-negative"));
  }
  CostModel negative_override;
  negative_override.stage_gradient_bytes_override[1] = -2.0;
  absl::StatusOr<SimulationResult> result = Simulate(schedule, negative_override);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(result.status().message(),
              HasSubstr("the gradient bytes of stage 1 must be finite and non-negative"));
}

// Interleaved stages: actor 0 holds stages 0 and 2, whose reductions are
// both in flight (the second queued behind the first) for a while, so
// their staging adds up; actor 1's (stages 1 and 3) do not overlap.
TEST(DataParallel, StagingOfReductionsInFlightAddsUpToTheActorsPeak) {
  absl::StatusOr<Schedule> schedule =
      Generate("interleaved", {.actors = 2, .microbatches = 4, .virtual_stages = 2});
  ASSERT_TRUE(schedule.ok()) << schedule.status();
  CostModel costs;
  costs.data_parallel = 2;
  costs.link.beta = 1.0;
  costs.stage_gradient_bytes = 1.0;
  costs.stage_gradient_bytes_override = {{0, 100.0}, {2, 30.0}};
  const SimulationResult result = MustSimulate(*schedule, costs);
  std::map<int32_t, Reduction> by_stage;
  for (const Reduction& reduction : result.reductions) by_stage[reduction.stage.value] = reduction;
  ASSERT_EQ(by_stage.size(), 4u);
  for (const auto& [stage, reduction] : by_stage) {
    EXPECT_EQ(reduction.staging_bytes, 2.0 * costs.GradientBytes(StageId(stage))) << stage;
    EXPECT_LE(reduction.released, reduction.start) << stage;
  }
  // Stage 2's last backward ends before stage 0's; stage 0's reduction is
  // released while stage 2's (30 long) still runs.
  const Reduction& s0 = by_stage[0];
  const Reduction& s2 = by_stage[2];
  ASSERT_LT(s2.released, s0.released);
  ASSERT_LT(s0.released, s2.end);
  EXPECT_EQ(s0.start, s2.end) << "queued behind stage 2's on the reduce track";
  EXPECT_EQ(result.per_actor[0].peak_reduce_staging, 2.0 * (100.0 + 30.0));
  const Reduction& s1 = by_stage[1];
  const Reduction& s3 = by_stage[3];
  ASSERT_TRUE(s3.end <= s1.released || s1.end <= s3.released) << "actor 1's reductions do not overlap";
  EXPECT_EQ(result.per_actor[1].peak_reduce_staging, 2.0);
}

TEST(DataParallel, ReportListsTheReductions) {
  const Schedule schedule = Generated("1f1b", 2, 4);
  const SimulationResult result = MustSimulate(schedule, TinyDataParallelCosts());
  const std::string json = SimulationJson(schedule, result);
  EXPECT_THAT(json, HasSubstr("\"bubble_time\":42,\"data_parallel\":4,\"compute_end\":21,"
                              "\"per_actor\":["));
  EXPECT_THAT(json, HasSubstr("\"peak_activations\":2,\"reduce_busy\":12,\"peak_reduce_staging\":16}"));
  EXPECT_THAT(json, HasSubstr("\"reductions\":[{\"actor\":0,\"stage\":0,\"bytes\":12,\"released\":21,"
                              "\"start\":21,\"end\":33,\"staging_bytes\":16},{\"actor\":1,\"stage\":1,"
                              "\"bytes\":12,\"released\":17.5,\"start\":17.5,\"end\":29.5,"
                              "\"staging_bytes\":16}]"));
  EXPECT_THAT(json, HasSubstr("{\"type\":\"reduction\",\"actor\":0,\"stage\":0,\"start\":21,"
                              "\"end\":33}]"));
  const std::string table = SimulationTable(schedule, result);
  EXPECT_THAT(table, HasSubstr("makespan 33,"));
  EXPECT_THAT(table, HasSubstr("data parallel 4 replicas: 2 gradient reductions, the last ending "
                               "at 33 (compute ends at 21)\n"));
  EXPECT_THAT(table, HasSubstr(" actor  reductions  reduce busy  last reduction end  peak staging\n"
                               "     0           1           12                  33            16\n"
                               "     1           1           12                29.5            16\n"));
  EXPECT_THAT(table, HasSubstr("[21, 33] reduction of stage 0 on actor 0\n"));
}

}  // namespace
}  // namespace tandem::schedules
