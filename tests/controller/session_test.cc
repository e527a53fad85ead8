// The public API's Session over actor processes: it trains, checkpoints and
// resumes, switches schedules mid-run keeping parameters and step count,
// a schedule that does not fit leaves the running pipeline alone, and with
// restarts it outlives lost actors with the results of a run that never
// failed.
#include "controller/session.h"

#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
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

TEST(Session, ACheckpointWrittenBehindTheStepsHoldsTheStateItWasBegunAt) {
  const std::string root = std::filesystem::temp_directory_path() / ("tandem-behind-" + std::to_string(getpid()));
  const ir::TrainStep step = Mlp(4);
  const schedules::Schedule schedule = *schedules::ResolveSchedule("1f1b", 2, 4);
  absl::StatusOr<std::unique_ptr<Session>> session = Session::Start(step, schedule, Options());
  ASSERT_TRUE(session.ok()) << session.status();
  absl::StatusOr<std::string> nothing = (*session)->FinishCheckpoint();
  ASSERT_TRUE(nothing.ok());
  EXPECT_EQ(*nothing, "");
  ASSERT_TRUE((*session)->Step(controller::testing_harness::Batches(step, 1)).ok());
  ASSERT_TRUE((*session)->BeginCheckpoint(root).ok());
  EXPECT_EQ((*session)->pending_checkpoint(), 1);
  absl::StatusOr<controller::StepReport> second = (*session)->Step(controller::testing_harness::Batches(step, 2));
  ASSERT_TRUE(second.ok());
  absl::StatusOr<std::string> saved = (*session)->FinishCheckpoint(/*wait=*/true);
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_THAT(*saved, HasSubstr("step-00000001"));
  EXPECT_FALSE((*session)->pending_checkpoint().has_value());

  absl::StatusOr<std::unique_ptr<Session>> resumed = Session::Resume(step, schedule, root, Options());
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ((*resumed)->steps_done(), 1);
  absl::StatusOr<controller::StepReport> again = (*resumed)->Step(controller::testing_harness::Batches(step, 2));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(Bits(again->losses), Bits(second->losses));
  std::filesystem::remove_all(root);
}

// Evaluation through a pipeline of its own, from the actors' state: the
// reference's losses bit for bit, with nothing left in the scratch root.
TEST(Session, EvaluatesThroughAForwardPipelineWithTheReferenceBits) {
  const std::string scratch = std::filesystem::temp_directory_path() / ("tandem-eval-" + std::to_string(getpid()));
  examples::MlpConfig config;
  config.input_dim = 12;
  config.hidden_dim = 12;
  config.num_layers = 2;
  config.batch_size = 4;
  config.num_stages = 2;
  const ir::TrainStep step = Mlp(4);
  absl::StatusOr<ir::TrainStep> forward =
      TraceForwardStep("mlp", examples::MlpModel(config), {.num_microbatches = 4, .seed = 5});
  ASSERT_TRUE(forward.ok()) << forward.status();
  absl::StatusOr<std::unique_ptr<Session>> session =
      Session::Start(step, *schedules::ResolveSchedule("1f1b", 2, 4), Options());
  ASSERT_TRUE(session.ok()) << session.status();
  ir::TensorMap state = *ir::InitialState(step);
  for (int64_t s = 1; s <= 2; ++s) {
    const std::vector<ir::TensorMap> batch = controller::testing_harness::Batches(step, s);
    ASSERT_TRUE((*session)->Step(batch).ok());
    ASSERT_TRUE(cpu::RunReferenceStep(step, state, batch, s).ok());
  }
  auto batches = [&step](int64_t i) -> absl::StatusOr<std::vector<ir::TensorMap>> {
    return controller::testing_harness::Batches(step, 100 + i);
  };
  absl::StatusOr<std::vector<std::vector<ir::HostTensor>>> outputs = (*session)->Evaluate(*forward, 3, batches, scratch);
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  ASSERT_EQ(outputs->size(), 3u);
  for (int64_t i = 0; i < 3; ++i) {
    absl::StatusOr<std::vector<float>> expected = cpu::EvaluateLosses(step, state, *batches(i));
    ASSERT_TRUE(expected.ok());
    ASSERT_EQ((*outputs)[i].size(), 4u);
    std::vector<float> got;
    for (const ir::HostTensor& loss : (*outputs)[i]) got.push_back(loss.f32()[0]);
    EXPECT_EQ(Bits(got), Bits(*expected)) << "batch " << i;
  }
  EXPECT_TRUE(std::filesystem::is_empty(scratch));
  // The training goes on where it was.
  EXPECT_EQ((*session)->steps_done(), 2);
  ASSERT_TRUE((*session)->Step(controller::testing_harness::Batches(step, 3)).ok());

  absl::StatusOr<std::vector<std::vector<ir::HostTensor>>> training_step =
      (*session)->Evaluate(step, 1, batches, scratch);
  EXPECT_EQ(training_step.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(training_step.status().message(), HasSubstr("forward-only step"));
  config.hidden_dim = 16;
  absl::StatusOr<ir::TrainStep> other = TraceForwardStep("mlp", examples::MlpModel(config), {.num_microbatches = 4});
  ASSERT_TRUE(other.ok());
  absl::StatusOr<std::vector<std::vector<ir::HostTensor>>> mismatched =
      (*session)->Evaluate(*other, 1, batches, scratch);
  EXPECT_EQ(mismatched.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(mismatched.status().message(), HasSubstr("is not the training step's"));
  std::filesystem::remove_all(scratch);
}

// Restarts. TANDEM_FAULT reaches the actor processes through the
// environment; actor-crash-once and actor-stop-once strike once in a
// session's life (their marker file), as a real fault would.
class SessionRestarts : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir_template[] = "/tmp/tandem-session-restart-XXXXXX";
    ASSERT_NE(mkdtemp(dir_template), nullptr);
    dir_ = dir_template;
  }
  void TearDown() override {
    unsetenv("TANDEM_FAULT");
    std::filesystem::remove_all(dir_);
  }
  void Fault(const std::string& kind, int32_t actor, int64_t step) {
    setenv("TANDEM_FAULT", absl::StrCat(kind, ":", actor, ":", step, ":", dir_, "/struck").c_str(), 1);
  }
  SessionOptions RestartOptions(int32_t max_restarts) {
    SessionOptions options = Options();
    options.max_restarts = max_restarts;
    options.on_restart = [this](const SessionRestart& restart) { told_.push_back(restart.number); };
    return options;
  }
  // Runs steps 1..steps on `session`, saving under dir_/ck after each step
  // in `saves`; every step's losses must be the reference's.
  void Train(Session& session, const ir::TrainStep& step, int64_t steps, const std::vector<int64_t>& saves) {
    ir::TensorMap state = *ir::InitialState(step);
    for (int64_t s = 1; s <= steps; ++s) {
      const std::vector<ir::TensorMap> batch = controller::testing_harness::Batches(step, s);
      absl::StatusOr<controller::StepReport> report = session.Step(batch);
      ASSERT_TRUE(report.ok()) << "step " << s << ": " << report.status();
      EXPECT_EQ(report->step, s);
      absl::StatusOr<cpu::StepResult> expected = cpu::RunReferenceStep(step, state, batch, s);
      ASSERT_TRUE(expected.ok());
      EXPECT_EQ(Bits(report->losses), Bits(expected->losses)) << "step " << s;
      if (std::find(saves.begin(), saves.end(), s) != saves.end()) {
        absl::StatusOr<std::string> saved = session.SaveCheckpoint(dir_ + "/ck");
        ASSERT_TRUE(saved.ok()) << saved.status();
      }
    }
    absl::StatusOr<ir::TensorMap> final_state = session.State();
    ASSERT_TRUE(final_state.ok()) << final_state.status();
    for (const auto& [name, tensor] : state) {
      EXPECT_TRUE(final_state->at(name).BitwiseEquals(tensor)) << name;
    }
  }

  std::string dir_;
  std::vector<int32_t> told_;
};

TEST_F(SessionRestarts, AnActorKilledMidRunIsRestartedFromTheLastCheckpointWithTheReferenceBits) {
  const ir::TrainStep step = Mlp(4);
  Fault("actor-crash-once", 1, 5);
  absl::StatusOr<std::unique_ptr<Session>> session =
      Session::Start(step, *schedules::ResolveSchedule("1f1b", 2, 4), RestartOptions(2));
  ASSERT_TRUE(session.ok()) << session.status();
  Train(**session, step, 6, {3});
  ASSERT_EQ((*session)->restarts().size(), 1u);
  const SessionRestart& restart = (*session)->restarts()[0];
  EXPECT_EQ(restart.number, 1);
  EXPECT_EQ(restart.during, "step 5");
  EXPECT_EQ(restart.fault.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(restart.fault.message(), HasSubstr("actor 1 (stage 1) died during step 5"));
  EXPECT_EQ(restart.checkpoint, dir_ + "/ck/step-00000003");
  EXPECT_EQ(restart.resumed_after, 3);
  EXPECT_EQ(restart.steps_redone, 1);  // step 4, then step 5 again
  EXPECT_GT(restart.seconds_lost, 0);
  EXPECT_EQ(told_, std::vector<int32_t>{1});
  EXPECT_THAT(restart.Describe(), HasSubstr("restart 1 of 2 during step 5: actor 1 (stage 1) died"));
  EXPECT_THAT(restart.Describe(), HasSubstr("after step 3), 1 step redone"));
}

TEST_F(SessionRestarts, AStoppedActorBeforeAnyCheckpointIsRestartedFromTheStart) {
  const ir::TrainStep step = Mlp(4);
  Fault("actor-stop-once", 0, 3);
  absl::StatusOr<std::unique_ptr<Session>> session =
      Session::Start(step, *schedules::ResolveSchedule("zb-h1", 2, 4), RestartOptions(1));
  ASSERT_TRUE(session.ok()) << session.status();
  Train(**session, step, 4, {});
  ASSERT_EQ((*session)->restarts().size(), 1u);
  const SessionRestart& restart = (*session)->restarts()[0];
  EXPECT_EQ(restart.fault.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(restart.fault.message(), HasSubstr("actor 0"));
  EXPECT_EQ(restart.checkpoint, "");
  EXPECT_EQ(restart.resumed_after, 0);
  EXPECT_EQ(restart.steps_redone, 2);
}

TEST_F(SessionRestarts, WithoutRestartsALostActorFailsTheStep) {
  const ir::TrainStep step = Mlp(4);
  Fault("actor-crash-once", 1, 2);
  absl::StatusOr<std::unique_ptr<Session>> session =
      Session::Start(step, *schedules::ResolveSchedule("1f1b", 2, 4), RestartOptions(0));
  ASSERT_TRUE(session.ok()) << session.status();
  ASSERT_TRUE((*session)->Step(controller::testing_harness::Batches(step, 1)).ok());
  absl::StatusOr<controller::StepReport> failed = (*session)->Step(controller::testing_harness::Batches(step, 2));
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(controller::IsActorLost(failed.status()));
  EXPECT_THAT(failed.status().message(), HasSubstr("actor 1 (stage 1) died during step 2"));
  EXPECT_TRUE((*session)->restarts().empty());
}

TEST_F(SessionRestarts, AfterASwitchOfScheduleThereIsNoRestartUntilTheNextCheckpoint) {
  const ir::TrainStep step = Mlp(4);
  Fault("actor-crash-once", 0, 3);
  absl::StatusOr<std::unique_ptr<Session>> session =
      Session::Start(step, *schedules::ResolveSchedule("1f1b", 2, 4), RestartOptions(3));
  ASSERT_TRUE(session.ok()) << session.status();
  ASSERT_TRUE((*session)->Step(controller::testing_harness::Batches(step, 1)).ok());
  ASSERT_TRUE((*session)->Step(controller::testing_harness::Batches(step, 2)).ok());
  ASSERT_TRUE((*session)->SetSchedule(*schedules::ResolveSchedule("zb-h1", 2, 4)).ok());
  absl::StatusOr<controller::StepReport> failed = (*session)->Step(controller::testing_harness::Batches(step, 3));
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(failed.status().message(),
              HasSubstr("(no restart: the schedule or the step changed at step 2 and no checkpoint was saved since)"));
  EXPECT_TRUE((*session)->restarts().empty());
}

TEST_F(SessionRestarts, PastTheKeptBytesThereIsNoRestartUntilTheNextCheckpoint) {
  const ir::TrainStep step = Mlp(4);
  Fault("actor-crash-once", 1, 4);
  SessionOptions options = RestartOptions(2);
  // One step's microbatches fit, two do not.
  int64_t step_bytes = 0;
  for (const ir::TensorMap& microbatch : controller::testing_harness::Batches(step, 1)) {
    for (const auto& [name, tensor] : microbatch) step_bytes += tensor.num_bytes();
  }
  options.max_kept_bytes = step_bytes + step_bytes / 2;
  absl::StatusOr<std::unique_ptr<Session>> session =
      Session::Start(step, *schedules::ResolveSchedule("1f1b", 2, 4), options);
  ASSERT_TRUE(session.ok()) << session.status();
  ASSERT_TRUE((*session)->Step(controller::testing_harness::Batches(step, 1)).ok());
  ASSERT_TRUE((*session)->SaveCheckpoint(dir_ + "/ck").ok());
  ASSERT_TRUE((*session)->Step(controller::testing_harness::Batches(step, 2)).ok());  // kept
  ASSERT_TRUE((*session)->Step(controller::testing_harness::Batches(step, 3)).ok());  // past the bytes: none kept
  absl::StatusOr<controller::StepReport> failed = (*session)->Step(controller::testing_harness::Batches(step, 4));
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(failed.status().message(),
              HasSubstr("(no restart: the microbatches since the last checkpoint passed "));
  EXPECT_THAT(failed.status().message(), HasSubstr("at step 3 and no checkpoint was saved since)"));
  EXPECT_TRUE((*session)->restarts().empty());
}

TEST_F(SessionRestarts, FillJobsAreRefused) {
  const ir::TrainStep step = Mlp(4);
  absl::StatusOr<std::unique_ptr<Session>> session =
      Session::Start(step, *schedules::ResolveSchedule("1f1b", 2, 4), RestartOptions(1));
  ASSERT_TRUE(session.ok()) << session.status();
  absl::Status fill = (*session)->StartFill(std::make_shared<controller::FillJob>(), {});
  EXPECT_EQ(fill.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(fill.message(), HasSubstr("fill jobs do not go with restarts"));
}

TEST(ActorLost, OnlyALostActorsCodesAreMarked) {
  EXPECT_TRUE(controller::IsActorLost(controller::MarkActorLost(absl::UnavailableError("actor 1 died"))));
  EXPECT_TRUE(controller::IsActorLost(controller::MarkActorLost(absl::DeadlineExceededError("actor 1 stopped"))));
  EXPECT_FALSE(controller::IsActorLost(controller::MarkActorLost(absl::InternalError("actor 1: a kernel failed"))));
  EXPECT_FALSE(controller::IsActorLost(absl::UnavailableError("cannot write ck/MANIFEST")));
}

}  // namespace
}  // namespace tandem
