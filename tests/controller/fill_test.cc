// Fill jobs (controller/fill.h): pieces packed into the bubbles of a 1F1B
// pipeline run beside it on the same actors; the pipeline's losses and
// state stay bit-identical to the reference, every piece either runs or
// gives way, and every output equals the fill job's own reference.
#include "controller/fill.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/base/casts.h"
#include "backends/cpu/interpreter.h"
#include "controller/session.h"
#include "controller/step_trace.h"
#include "examples/fill_job.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/initial_state.h"
#include "tests/controller/parity_harness.h"

namespace tandem::controller {
namespace {

using ::testing::HasSubstr;
using testing_harness::Batches;
using testing_harness::MustGenerate;
using testing_harness::TinyMlp;

FillJob ToFillJob(const examples::ExampleFillJob& example) {
  return FillJob{.name = example.name, .piece = example.piece, .state = example.state, .input = example.input,
                 .items = example.items};
}

std::shared_ptr<FillJob> MlpFillJob(const std::string& spec = "infer:mlp,batch=4,layers=2,dim=8") {
  absl::StatusOr<examples::ExampleFillJob> example = examples::MakeExampleFillJob(spec);
  EXPECT_TRUE(example.ok()) << example.status();
  return std::make_shared<FillJob>(ToFillJob(*example));
}

// The example job's dataset is state, shipped to the actors once with the
// model: a piece's input is the index of its batch, four bytes, and the
// index picks the batch (items cycle through the dataset).
TEST(FillExample, APieceIsSentTheIndexOfABatchOfTheDatasetItsActorHolds) {
  absl::StatusOr<examples::ExampleFillJob> job = examples::MakeExampleFillJob("infer:mlp,batch=4,layers=1,dim=8");
  ASSERT_TRUE(job.ok()) << job.status();
  const ir::HostTensor& data = job->state.at("data");
  ASSERT_EQ(data.shape().size(), 2u);
  const int64_t batches = data.shape()[0];
  EXPECT_EQ(batches, 256);
  const ir::TensorMap input = job->input(batches + 3);
  ASSERT_EQ(input.size(), 1u);
  EXPECT_EQ(input.at("item").type(), (ir::TensorType{ir::DType::kI32, {1}}));
  EXPECT_EQ(input.at("item").i32()[0], 3);
  const auto outputs = [&](int64_t item) {
    ir::TensorMap state = job->state;
    absl::StatusOr<ir::HostTensor> out = RunFillPiece(ToFillJob(*job), state, job->input(item));
    EXPECT_TRUE(out.ok()) << out.status();
    return out.ok() ? *out : ir::HostTensor();
  };
  EXPECT_TRUE(outputs(3).BitwiseEquals(outputs(batches + 3)));
  EXPECT_FALSE(outputs(3).BitwiseEquals(outputs(4)));
  // A batch too large for 256 of them in 64 MiB: fewer batches.
  absl::StatusOr<examples::ExampleFillJob> wide = examples::MakeExampleFillJob("infer:mlp,batch=65536,layers=1,dim=8");
  ASSERT_TRUE(wide.ok()) << wide.status();
  EXPECT_EQ(wide->state.at("data").shape()[0], 8);
}

// Costs in microseconds as a calibration would give them: forwards 100,
// backwards 200, pieces 40 (so five fit in a 200 us bubble at share 1).
FillCalibration Calibration(int32_t actors) {
  FillCalibration calibration;
  calibration.costs.KindCost(schedules::TaskKind::kForward) = 100;
  calibration.costs.KindCost(schedules::TaskKind::kBackward) = 200;
  calibration.update_us.assign(actors, 0.0);
  calibration.piece_us = 40;
  calibration.share = 1.0;
  return calibration;
}

TEST(FillPlan, PacksTheBubblesOfOneFOneB) {
  absl::StatusOr<ir::TrainStep> step = TinyMlp(2, 4);
  ASSERT_TRUE(step.ok()) << step.status();
  const schedules::Schedule schedule = MustGenerate("1f1b", 2, 4);
  absl::StatusOr<CompiledStep> compiled = Compile(*step, schedule);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  absl::StatusOr<FillPlan> plan = PlanFill(schedule, *compiled, *MlpFillJob(), Calibration(2));
  ASSERT_TRUE(plan.ok()) << plan.status();
  // The bubbles of schedules/bubbles_test.cc, in microseconds: actor 0
  // before B0.0 (200) and B0.3 (100); actor 1 before F1.0 (100) and at the
  // tail (200). Whatever memory allows of 5, 2, 2 and 5 pieces.
  ASSERT_EQ(plan->bubbles.size(), 4u);
  EXPECT_EQ(plan->predicted_step_us, 1500);
  EXPECT_GT(plan->piece_bytes, 0);
  EXPECT_FALSE(plan->slots.empty());
  for (const FillSlot& slot : plan->slots) {
    EXPECT_GT(slot.pieces, 0);
    EXPECT_LE(slot.pieces, 5);
  }
  // Actor 1's tail takes all five: nothing else is live there.
  EXPECT_EQ(plan->slots.back(), (FillSlot{1, 8, 5}));
}

// A tiny MLP's 1F1B pipeline on actor threads, and a fill job's plan for it.
class FillPipeline : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<ir::TrainStep> traced = TinyMlp(2, 4);
    ASSERT_TRUE(traced.ok()) << traced.status();
    step_ = *std::move(traced);
    SessionOptions options;
    options.launcher = testing_harness::ThreadsLauncher;
    absl::StatusOr<std::unique_ptr<Session>> started = Session::Start(step_, schedule_, options);
    ASSERT_TRUE(started.ok()) << started.status();
    session_ = *std::move(started);
    absl::StatusOr<FillPlan> planned = PlanFill(schedule_, session_->compiled(), *job_, Calibration(2));
    ASSERT_TRUE(planned.ok()) << planned.status();
    plan_ = *std::move(planned);
  }

  ir::TrainStep step_;
  const schedules::Schedule schedule_ = MustGenerate("1f1b", 2, 4);
  std::unique_ptr<Session> session_;
  const std::shared_ptr<FillJob> job_ = MlpFillJob();
  FillPlan plan_;
};

TEST_F(FillPipeline, TheMainJobStaysBitIdenticalAndEveryFillOutputIsRight) {
  absl::StatusOr<ir::TensorMap> reference = ir::InitialState(step_);
  ASSERT_TRUE(reference.ok());
  int64_t done = 0;
  for (int64_t number = 1; number <= 4; ++number) {
    if (number == 2) {
      ASSERT_TRUE(session_->StartFill(job_, plan_.slots).ok());
      ASSERT_NE(session_->fill_queue(), nullptr);
    }
    const std::vector<ir::TensorMap> batch = Batches(step_, number);
    absl::StatusOr<StepReport> report = session_->Step(batch);
    ASSERT_TRUE(report.ok()) << report.status();
    absl::StatusOr<cpu::StepResult> expected = cpu::RunReferenceStep(step_, *reference, batch, number);
    ASSERT_TRUE(expected.ok()) << expected.status();
    ASSERT_EQ(report->losses.size(), expected->losses.size());
    for (size_t m = 0; m < expected->losses.size(); ++m) {
      EXPECT_EQ(absl::bit_cast<uint32_t>(report->losses[m]), absl::bit_cast<uint32_t>(expected->losses[m]))
          << "step " << number << " microbatch " << m;
    }
    if (number == 1) {
      EXPECT_TRUE(report->fill_done.empty());
      continue;
    }
    // Every piece ran or gave way.
    EXPECT_EQ(static_cast<int64_t>(report->fill_done.size()) + report->fill_skipped, plan_.total_pieces());
    for (const auto& [item, output] : report->fill_done) {
      ir::TensorMap state = job_->state;
      absl::StatusOr<ir::HostTensor> want = RunFillPiece(*job_, state, job_->input(item));
      ASSERT_TRUE(want.ok()) << want.status();
      EXPECT_TRUE(want->BitwiseEquals(output)) << "fill item " << item;
    }
    done += static_cast<int64_t>(report->fill_done.size());
    // The measured peak never passes the static one, which counts the pieces.
    for (int32_t actor = 0; actor < 2; ++actor) {
      EXPECT_LE(report->peak_live_bytes[actor], session_->compiled().programs[actor].static_peak_bytes);
    }
  }
  EXPECT_GT(done, 0);
  EXPECT_EQ(session_->fill_queue()->done(), done);
  absl::StatusOr<ir::TensorMap> state = session_->State();
  ASSERT_TRUE(state.ok()) << state.status();
  ASSERT_EQ(state->size(), reference->size());  // the fill job's parameters are not the model's
  for (const auto& [name, tensor] : *reference) EXPECT_TRUE(state->at(name).BitwiseEquals(tensor)) << name;
}

// A training job: each filling actor trains its own copy of the model, one
// update per piece that ran, in its program's order; the pipeline is
// untouched.
TEST(FillTraining, EachActorTrainsItsOwnCopyPieceByPieceAsTheReferenceReplaysIt) {
  absl::StatusOr<ir::TrainStep> step = TinyMlp(2, 4);
  ASSERT_TRUE(step.ok()) << step.status();
  const schedules::Schedule schedule = MustGenerate("1f1b", 2, 4);
  SessionOptions options;
  options.launcher = testing_harness::ThreadsLauncher;
  absl::StatusOr<std::unique_ptr<Session>> session = Session::Start(*step, schedule, options);
  ASSERT_TRUE(session.ok()) << session.status();
  const std::shared_ptr<FillJob> job = MlpFillJob("train:mlp,batch=4,layers=2,dim=8,lr=0.01");
  absl::StatusOr<FillPlan> plan = PlanFill(schedule, (*session)->compiled(), *job, Calibration(2));
  ASSERT_TRUE(plan.ok()) << plan.status();
  std::vector<int32_t> actor_of_slot;
  for (const FillSlot& slot : plan->slots) actor_of_slot.insert(actor_of_slot.end(), slot.pieces, slot.actor);
  ASSERT_TRUE((*session)->StartFill(job, plan->slots).ok());

  ir::TensorMap main_reference = *ir::InitialState(*step);
  std::vector<ir::TensorMap> reference(2, job->state);
  std::vector<int64_t> updates(2, 0);
  for (int64_t number = 1; number <= 3; ++number) {
    const std::vector<ir::TensorMap> batch = Batches(*step, number);
    absl::StatusOr<StepReport> report = (*session)->Step(batch);
    ASSERT_TRUE(report.ok()) << report.status();
    absl::StatusOr<cpu::StepResult> expected = cpu::RunReferenceStep(*step, main_reference, batch, number);
    ASSERT_TRUE(expected.ok()) << expected.status();
    EXPECT_EQ(report->losses, expected->losses) << "step " << number;
    ASSERT_EQ(report->fill_items.size(), actor_of_slot.size());
    for (const auto& [slot, loss] : report->fill_outputs) {
      const int32_t actor = actor_of_slot[slot];
      absl::StatusOr<ir::HostTensor> want = RunFillPiece(*job, reference[actor], job->input(report->fill_items[slot]));
      ASSERT_TRUE(want.ok()) << want.status();
      EXPECT_TRUE(want->BitwiseEquals(loss)) << "step " << number << " slot " << slot;
      ++updates[actor];
    }
  }
  absl::StatusOr<std::vector<ir::TensorMap>> trained = (*session)->FillState();
  ASSERT_TRUE(trained.ok()) << trained.status();
  ASSERT_EQ(trained->size(), 2u);
  for (int32_t actor = 0; actor < 2; ++actor) {
    if (updates[actor] == 0) continue;
    const ir::TensorMap& state = (*trained)[actor];
    ASSERT_EQ(state.size(), job->state.size()) << "actor " << actor;
    EXPECT_EQ(state.at("step").f32()[0], static_cast<float>(updates[actor])) << "actor " << actor;
    EXPECT_FALSE(state.at("fc0.w").BitwiseEquals(job->state.at("fc0.w"))) << "actor " << actor << " never trained";
    for (const auto& [name, tensor] : reference[actor]) {
      EXPECT_TRUE(state.at(name).BitwiseEquals(tensor)) << "actor " << actor << " " << name;
    }
  }
  EXPECT_GT(updates[0] + updates[1], 0);
  absl::StatusOr<ir::TensorMap> state = (*session)->State();
  ASSERT_TRUE(state.ok()) << state.status();
  for (const auto& [name, tensor] : main_reference) EXPECT_TRUE(state->at(name).BitwiseEquals(tensor)) << name;
}

TEST_F(FillPipeline, TheTraceDrawsFillOnItsOwnTrack) {
  ASSERT_TRUE(session_->StartFill(job_, plan_.slots).ok());
  absl::StatusOr<StepReport> report = session_->Step(Batches(step_, 1));
  ASSERT_TRUE(report.ok()) << report.status();
  StepTrace trace(session_->compiled());
  trace.AddStep(*report);
  const std::string json = trace.ToJson();
  EXPECT_THAT(json, HasSubstr("\"fill\""));
  EXPECT_THAT(json, HasSubstr("\"name\":\"fill 0"));
}

TEST(AddFill, RefusesASlotBeforeATaskThatReceivesNothing) {
  absl::StatusOr<ir::TrainStep> step = TinyMlp(2, 4);
  ASSERT_TRUE(step.ok()) << step.status();
  const schedules::Schedule schedule = MustGenerate("1f1b", 2, 4);
  absl::StatusOr<CompiledStep> compiled = Compile(*step, schedule);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  // Actor 0's F0.0 reads only the step's data.
  absl::Status status = AddFill(schedule, *MlpFillJob(), {{0, 0, 1}}, *compiled);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("fill slot before F0.0 on actor 0: that task receives nothing"));
  status = AddFill(schedule, *MlpFillJob(), {{2, 0, 1}}, *compiled);
  EXPECT_THAT(status.message(), HasSubstr("is out of range"));
  status = AddFill(schedule, *MlpFillJob(), {{1, 9, 1}}, *compiled);
  EXPECT_THAT(status.message(), HasSubstr("is out of range"));
}

TEST(CheckFillJob, RefusesMissingOrMistypedStateAndAnEndOfTraining) {
  std::shared_ptr<FillJob> job = MlpFillJob();
  EXPECT_TRUE(CheckFillJob(*job).ok());
  FillJob stateless = *job;
  stateless.state.erase("fc0.w");
  EXPECT_THAT(CheckFillJob(stateless).message(), HasSubstr("no state for its parameter 'fc0.w'"));
  FillJob mistyped = *job;
  mistyped.state["fc0.w"] = ir::HostTensor::Scalar(0);
  EXPECT_THAT(CheckFillJob(mistyped).message(), HasSubstr("state 'fc0.w' is f32[] but its piece uses f32[32,8]"));
  std::shared_ptr<FillJob> training = MlpFillJob("train:mlp,batch=4,layers=1,dim=8");
  EXPECT_TRUE(training->trains());
  EXPECT_TRUE(CheckFillJob(*training).ok());
  FillJob counted = *training;
  counted.items = 5;
  EXPECT_THAT(CheckFillJob(counted).message(), HasSubstr("its items must be 0 (endless)"));
  FillJob result_is_state = *training;
  result_is_state.state["loss"] = ir::HostTensor::Scalar(0);
  EXPECT_THAT(CheckFillJob(result_is_state).message(), HasSubstr("its result, is state 'loss'"));
  FillJob sourceless = *job;
  sourceless.input = nullptr;
  EXPECT_THAT(CheckFillJob(sourceless).message(), HasSubstr("no input source"));
}

TEST(FillQueue, RetriesSkippedItemsFirstAndPadsAFinishedJob) {
  std::shared_ptr<FillJob> job = MlpFillJob("infer:mlp,batch=2,layers=1,dim=4,items=3");
  FillQueue queue(job.get());
  std::vector<int64_t> items = queue.Take(2);
  EXPECT_EQ(items, (std::vector<int64_t>{0, 1}));
  // Slot 1 gave way: item 1 comes back first.
  std::map<int64_t, ir::HostTensor> done = queue.Finish(items, {{0, ir::HostTensor::Scalar(1)}});
  EXPECT_EQ(done.size(), 1u);
  EXPECT_EQ(queue.skipped(), 1);
  items = queue.Take(3);
  EXPECT_EQ(items, (std::vector<int64_t>{1, 2, -1}));
  const std::vector<ir::TensorMap> inputs = queue.Inputs(items);
  ASSERT_EQ(inputs.size(), 3u);
  EXPECT_EQ(inputs[2].at("item").type(), inputs[0].at("item").type());
  queue.Finish(items, {{0, ir::HostTensor::Scalar(1)}, {1, ir::HostTensor::Scalar(2)}, {2, ir::HostTensor::Scalar(3)}});
  EXPECT_EQ(queue.done(), 3);
  EXPECT_TRUE(queue.finished());
}

}  // namespace
}  // namespace tandem::controller
