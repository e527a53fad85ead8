// Profiling segments (controller/profile.h): the times are measured, and
// the bytes agree with what compiled pipelines really do: a one-stage-per-
// actor GPipe of the same model sends exactly each boundary's activation
// forward and its gradient back, and the parameters add up to the model's.
#include "controller/profile.h"

#include <memory>
#include <vector>

#include "controller/compiler.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "schedules/validator.h"
#include "tests/controller/parity_harness.h"

namespace tandem::controller {
namespace {

TEST(ProfileSchedule, RunsEveryForwardThenEveryIThenEveryWOnOneActor) {
  const schedules::Schedule schedule = ProfileSchedule(3, 2);
  EXPECT_TRUE(schedules::Validate(schedule).ok());
  ASSERT_EQ(schedule.programs.size(), 1u);
  EXPECT_EQ(schedule.programs[0].size(), 3u * 2 * 3);
  EXPECT_EQ(schedules::TaskName(schedule.programs[0][6].tasks[0]), "I2.0");
  EXPECT_EQ(schedules::TaskName(schedule.programs[0][17].tasks[0]), "W0.1");
}

TEST(ProfileSegments, MeasuresTimesAndBytesAGpipeOfTheSameModelConfirms) {
  constexpr int32_t kStages = 3;
  constexpr int32_t kMicrobatches = 2;
  absl::StatusOr<ir::TrainStep> step = testing_harness::TinyGpt(kStages, kMicrobatches);
  ASSERT_TRUE(step.ok()) << step.status();
  absl::StatusOr<schedules::CostFile> costs = ProfileSegments(
      *step, testing_harness::ThreadsLauncher(),
      [&](int64_t index) { return testing_harness::Batches(*step, index + 1); },
      {.steps = 2, .model = "tiny gpt", .device = "cpu"});
  ASSERT_TRUE(costs.ok()) << costs.status();
  ASSERT_EQ(costs->segments.size(), static_cast<size_t>(kStages));
  EXPECT_EQ(costs->model, "tiny gpt");

  int64_t parameters = 0;
  for (const schedules::SegmentCost& segment : costs->segments) {
    EXPECT_GT(segment.forward_s, 0.0) << segment.name;
    EXPECT_GT(segment.backward_weight_s, 0.0) << segment.name;
    EXPECT_DOUBLE_EQ(segment.backward_s, segment.backward_input_s + segment.backward_weight_s);
    EXPECT_GT(segment.stash_bytes, segment.remat_stash_bytes) << segment.name;
    EXPECT_GT(segment.working_bytes, 0) << segment.name;
    parameters += segment.parameter_bytes;
  }
  int64_t model_parameters = 0;
  for (const ir::StateSpec& spec : step->state) {
    if (spec.role == ir::StateRole::kParameter) model_parameters += spec.type.num_bytes();
  }
  EXPECT_EQ(parameters, model_parameters);
  EXPECT_EQ(costs->segments.back().activation_bytes, 0);

  // One stage per actor under GPipe: actor s sends each microbatch's
  // activation forward and the gradient of its input back.
  absl::StatusOr<CompiledStep> gpipe = Compile(*step, testing_harness::MustGenerate("gpipe", kStages, kMicrobatches));
  ASSERT_TRUE(gpipe.ok()) << gpipe.status();
  for (int32_t actor = 0; actor < kStages; ++actor) {
    const int64_t out = costs->segments[actor].activation_bytes;
    const int64_t back = actor > 0 ? costs->segments[actor - 1].activation_bytes : 0;
    EXPECT_EQ(gpipe->stats[actor].bytes_sent, kMicrobatches * (out + back)) << "actor " << actor;
  }
  EXPECT_EQ(schedules::ParseCostFile(schedules::FormatCostFile(*costs)).value(), *costs);
}

}  // namespace
}  // namespace tandem::controller
