// The public API's Session over actor processes: it trains, checkpoints and
// resumes, switches schedules mid-run keeping parameters and step count,
// and a schedule that does not fit leaves the running pipeline alone.
#include "controller/session.h"

#include <unistd.h>

#include <bit>
#include <filesystem>
#include <string>
#include <vector>

#include "backends/cpu/interpreter.h"
#include "backends/cpu/kernels.h"
#include "examples/models/mlp.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/initial_state.h"
#include "ir/trace.h"
#include "schedules/resolve.h"
#include "tests/controller/parity_harness.h"

namespace tandem {
namespace {

using ::testing::HasSubstr;

ir::TrainStep Mlp(int32_t microbatches) {
  examples::MlpConfig config;
  config.input_dim = 12;
  config.hidden_dim = 12;
  config.num_layers = 2;
  config.batch_size = 4;
  config.num_stages = 2;
  absl::StatusOr<ir::TrainStep> step =
      TraceTrainStep("mlp", examples::MlpModel(config), Adam({.learning_rate = 0.01}),
                     {.num_microbatches = microbatches, .seed = 5});
  EXPECT_TRUE(step.ok()) << step.status();
  return *step;
}

SessionOptions Options() {
  cpu::SetBlasThreads(1);
  SessionOptions options;
  options.actor_binary = TANDEM_ACTOR_BINARY;
  return options;
}

std::vector<uint32_t> Bits(const std::vector<float>& values) {
  std::vector<uint32_t> bits;
  for (float v : values) bits.push_back(std::bit_cast<uint32_t>(v));
  return bits;
}

TEST(Session, SwitchingSchedulesKeepsTheReferenceBits) {
  const ir::TrainStep step = Mlp(4);
  absl::StatusOr<std::unique_ptr<Session>> session =
      Session::Start(step, *schedules::ResolveSchedule("1f1b", 2, 4), Options());
  ASSERT_TRUE(session.ok()) << session.status();
  ir::TensorMap state = *ir::InitialState(step);
  for (int64_t s = 1; s <= 4; ++s) {
    if (s == 3) {
      ASSERT_TRUE((*session)->SetSchedule(*schedules::ResolveSchedule("zb-h1", 2, 4)).ok());
      EXPECT_EQ((*session)->schedule().name, "zb-h1");
      EXPECT_EQ((*session)->steps_done(), 2);
    }
    const std::vector<ir::TensorMap> batch = controller::testing_harness::Batches(step, s);
    absl::StatusOr<controller::StepReport> report = (*session)->Step(batch);
    ASSERT_TRUE(report.ok()) << report.status();
    EXPECT_EQ(report->step, s);
    absl::StatusOr<cpu::StepResult> expected = cpu::RunReferenceStep(step, state, batch, s);
    ASSERT_TRUE(expected.ok());
    EXPECT_EQ(Bits(report->losses), Bits(expected->losses)) << "step " << s;
  }
}

schedules::Plan TwoStagePlan(const std::string& schedule, int32_t microbatches) {
  schedules::Plan plan;
  plan.actors = 2;
  plan.schedule = schedule;
  plan.microbatches = microbatches;
  plan.segments = 2;
  plan.stages = {{.first_segment = 0, .end_segment = 1, .remat = true, .actor = 0},
                 {.first_segment = 1, .end_segment = 2, .remat = false, .actor = 1}};
  return plan;
}

TEST(Session, APlanRunsItsScheduleAndRematerialisesTheStagesItNames) {
  const ir::TrainStep step = Mlp(4);
  absl::StatusOr<std::unique_ptr<Session>> session = Session::Start(step, TwoStagePlan("zb-h1", 4), Options());
  ASSERT_TRUE(session.ok()) << session.status();
  EXPECT_EQ((*session)->schedule().name, "zb-h1");
  EXPECT_EQ((*session)->compiled().remat, (std::vector<bool>{true, false}));
  const std::vector<ir::TensorMap> batch = controller::testing_harness::Batches(step, 1);
  absl::StatusOr<controller::StepReport> report = (*session)->Step(batch);
  ASSERT_TRUE(report.ok()) << report.status();
  ir::TensorMap state = *ir::InitialState(step);
  absl::StatusOr<cpu::StepResult> expected = cpu::RunReferenceStep(step, state, batch, 1);
  ASSERT_TRUE(expected.ok());
  EXPECT_EQ(Bits(report->losses), Bits(expected->losses));
}

TEST(Session, APlanForAnotherCutOrMicrobatchCountIsRefused) {
  absl::StatusOr<std::unique_ptr<Session>> session = Session::Start(Mlp(4), TwoStagePlan("1f1b", 8), Options());
  ASSERT_FALSE(session.ok());
  EXPECT_THAT(session.status().message(), HasSubstr("the plan runs 2 stages of 8 microbatches; the step is traced with "
                                                    "2 stages of 4"));
}

TEST(Session, AScheduleThatDoesNotFitLeavesThePipelineRunning) {
  const ir::TrainStep step = Mlp(4);
  absl::StatusOr<std::unique_ptr<Session>> session =
      Session::Start(step, *schedules::ResolveSchedule("1f1b", 2, 4), Options());
  ASSERT_TRUE(session.ok()) << session.status();
  // Interleaved over 2 actors wants 4 stages; the model has 2.
  absl::Status status = (*session)->SetSchedule(*schedules::ResolveSchedule("interleaved", 2, 4));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*session)->schedule().name, "1f1b");
  EXPECT_TRUE((*session)->Step(controller::testing_harness::Batches(step, 1)).ok());
  // Another microbatch count needs a re-traced step whose state matches.
  absl::Status other_model = (*session)->Recompile(Mlp(8), *schedules::ResolveSchedule("1f1b", 2, 8));
  EXPECT_TRUE(other_model.ok()) << other_model;
  EXPECT_EQ((*session)->compiled().num_microbatches, 8);
  EXPECT_EQ((*session)->steps_done(), 1);
}

TEST(Session, ResumesFromItsCheckpointBitForBit) {
  const std::string root = std::filesystem::temp_directory_path() / ("tandem-session-" + std::to_string(getpid()));
  const ir::TrainStep step = Mlp(4);
  const schedules::Schedule schedule = *schedules::ResolveSchedule("1f1b", 2, 4);
  absl::StatusOr<std::unique_ptr<Session>> first = Session::Start(step, schedule, Options());
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE((*first)->Step(controller::testing_harness::Batches(step, 1)).ok());
  absl::StatusOr<std::string> saved = (*first)->SaveCheckpoint(root);
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_THAT(*saved, HasSubstr("step-00000001"));
  absl::StatusOr<controller::StepReport> expected = (*first)->Step(controller::testing_harness::Batches(step, 2));
  ASSERT_TRUE(expected.ok());

  absl::StatusOr<std::unique_ptr<Session>> resumed = Session::Resume(step, schedule, root, Options());
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ((*resumed)->steps_done(), 1);
  absl::StatusOr<controller::StepReport> again = (*resumed)->Step(controller::testing_harness::Batches(step, 2));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->step, 2);
  EXPECT_EQ(Bits(again->losses), Bits(expected->losses));
  EXPECT_EQ(Session::Resume(Mlp(8), *schedules::ResolveSchedule("1f1b", 2, 8), root + "/nothing", Options())
                .status()
                .code(),
            absl::StatusCode::kNotFound);
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace tandem
