// Branch-parallel pipelines: a model traced with branches runs on a stage
// DAG schedule (graph-1f1b, graph-gpipe, a hand-written one) and on a chain
// schedule of the same stages, bit-identical to the reference; a schedule
// whose stage graph does not order a value's producer before its reader is
// refused at compile time.
#include <string>

#include "controller/compiler.h"
#include "examples/models/two_tower.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "schedules/generators.h"
#include "schedules/text_format.h"
#include "tests/controller/parity_harness.h"

namespace tandem::controller {
namespace {

using ::testing::HasSubstr;
using testing_harness::ExpectParity;

absl::StatusOr<ir::TrainStep> TwoTower(int32_t stages, int32_t microbatches, int64_t left = 3, int64_t right = 2) {
  examples::TwoTowerConfig config;
  config.num_stages = stages;
  config.left_layers = left;
  config.right_layers = right;
  config.head_layers = 2;
  config.hidden_dim = 16;
  config.input_dim = 8;
  config.batch_size = 4;
  TraceOptions options;
  options.num_microbatches = microbatches;
  return TraceTrainStep("two-tower", examples::TwoTowerModel(config), Sgd({.learning_rate = 0.1}), options);
}

schedules::Schedule Generated(const std::string& name, const ir::TrainStep& step, int32_t actors) {
  absl::StatusOr<schedules::Schedule> schedule = schedules::Generate(
      name, {.actors = actors, .microbatches = step.num_microbatches, .stage_edges = step.stage_edges});
  EXPECT_TRUE(schedule.ok()) << schedule.status();
  return schedule.ok() ? *schedule : schedules::Schedule{};
}

TEST(GraphPipeline, TwoTowersOnGraphSchedulesAreBitIdentical) {
  absl::StatusOr<ir::TrainStep> step = TwoTower(3, 4);
  ASSERT_TRUE(step.ok()) << step.status();
  ASSERT_EQ(step->stage_edges, (std::vector<ir::StageEdge>{{0, 2}, {1, 2}}));
  ExpectParity(*step, Generated("graph-1f1b", *step, 3), 2);
  ExpectParity(*step, Generated("graph-gpipe", *step, 3), 2);
}

TEST(GraphPipeline, DeeperTowersOnMoreStagesAreBitIdentical) {
  // Left tower on two stages, right on one, head: 0->1->3, 2->3.
  absl::StatusOr<ir::TrainStep> step = TwoTower(4, 4, 4, 2);
  ASSERT_TRUE(step.ok()) << step.status();
  ASSERT_EQ(step->stage_edges, (std::vector<ir::StageEdge>{{0, 1}, {1, 3}, {2, 3}}));
  ExpectParity(*step, Generated("graph-1f1b", *step, 4), 2);
}

TEST(GraphPipeline, SeveralStagesOnOneActorAreBitIdentical) {
  // The right tower and the head share actor 2.
  absl::StatusOr<ir::TrainStep> step = TwoTower(4, 4, 4, 2);
  ASSERT_TRUE(step.ok()) << step.status();
  absl::StatusOr<schedules::Schedule> schedule =
      schedules::Generate("graph-gpipe", {.actors = 3, .microbatches = 4, .stage_edges = step->stage_edges,
                                          .stage_actors = {0, 1, 2, 2}});
  ASSERT_TRUE(schedule.ok()) << schedule.status();
  ExpectParity(*step, *schedule, 2);
}

TEST(GraphPipeline, AChainScheduleRunsTheBranchesOneAfterAnother) {
  absl::StatusOr<ir::TrainStep> step = TwoTower(3, 4);
  ASSERT_TRUE(step.ok()) << step.status();
  ExpectParity(*step, testing_harness::MustGenerate("1f1b", 3, 4), 2);
}

TEST(GraphPipeline, AHandWrittenDagScheduleIsBitIdentical) {
  absl::StatusOr<ir::TrainStep> step = TwoTower(3, 2);
  ASSERT_TRUE(step.ok()) << step.status();
  absl::StatusOr<schedules::Schedule> schedule = schedules::ParseScheduleText(
      "actors 3\nmicrobatches 2\nstage-graph 0->2 1->2\n"
      "actor 0: F0.0 F0.1 B0.0 B0.1\n"
      "actor 1: F1.1 F1.0 B1.1 B1.0\n"  // the right branch takes its microbatches in another order
      "actor 2: F2.0 B2.0 F2.1 B2.1\n",
      "hand.sched");
  ASSERT_TRUE(schedule.ok()) << schedule.status();
  ExpectParity(*step, *schedule, 2);
}

TEST(GraphPipeline, AStageGraphMissingADataflowPathIsRefused) {
  absl::StatusOr<ir::TrainStep> step = TwoTower(3, 2);
  ASSERT_TRUE(step.ok()) << step.status();
  // Claims the head is fed by the left tower only, so nothing orders the
  // right tower's forward before the head reads it.
  absl::StatusOr<schedules::Schedule> schedule = schedules::ParseScheduleText(
      "actors 3\nmicrobatches 2\nstage-graph 0->2\n"
      "actor 0: F0.0 F0.1 B0.0 B0.1\n"
      "actor 1: F1.0 F1.1 B1.0 B1.1\n"
      "actor 2: F2.0 B2.0 F2.1 B2.1\n",
      "wrong.sched");
  ASSERT_TRUE(schedule.ok()) << schedule.status();
  absl::StatusOr<CompiledStep> compiled = Compile(*step, *schedule);
  ASSERT_FALSE(compiled.ok());
  EXPECT_THAT(compiled.status().message(), HasSubstr("stage 2 (actor 2, task F2.m)"));
  EXPECT_THAT(compiled.status().message(),
              HasSubstr("of stage 1 (actor 1, task F1.m): the schedule's stage graph (0->2) has no path 1->...->2"));
}

}  // namespace
}  // namespace tandem::controller
