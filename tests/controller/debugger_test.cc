// The debugger over real actor processes: breakpoints pause actors before a
// task, where() says who waits for whom, a paused actor's live buffers can
// be read, a pause outlasts every receive deadline, and a step run task by
// task gives the fused step's bits, on actor processes and on actor
// threads.
#include "controller/debugger.h"

#include <bit>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "backends/cpu/kernels.h"
#include "controller/local_launcher.h"
#include "examples/models/mlp.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/trace.h"
#include "schedules/generators.h"
#include "tests/controller/parity_harness.h"
#include "tools/cli/threads_launcher.h"

namespace tandem::controller {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;
using State = ActorPosition::State;

constexpr int32_t kActors = 4;
constexpr int32_t kMicrobatches = 4;

// An MLP of `stages` stages, on `replicas` data-parallel replicas.
ir::TrainStep Mlp(int32_t stages = kActors, int32_t replicas = 1) {
  examples::MlpConfig config;
  config.input_dim = 12;
  config.hidden_dim = 12;
  config.num_layers = stages;
  config.batch_size = 4;
  config.num_stages = stages;
  absl::StatusOr<ir::TrainStep> step =
      TraceTrainStep("mlp", examples::MlpModel(config), Sgd({.learning_rate = 0.1}),
                     {.num_microbatches = kMicrobatches, .num_replicas = replicas, .seed = 3});
  EXPECT_TRUE(step.ok()) << step.status();
  return *step;
}

// Actor processes (the local launcher), or actor threads.
enum class Actors { kProcesses, kThreads };

std::unique_ptr<Pipeline> Start(const ir::TrainStep& step, absl::Duration receive_timeout = absl::Seconds(20),
                                Actors actors = Actors::kProcesses, int32_t pipeline_actors = kActors) {
  cpu::SetBlasThreads(1);
  std::unique_ptr<Launcher> launcher;
  if (actors == Actors::kThreads) {
    launcher = std::make_unique<cli::ThreadsLauncher>(receive_timeout);
  } else {
    LocalLauncherOptions options;
    options.actor_binary = TANDEM_ACTOR_BINARY;
    options.shm_ring_bytes = int64_t{16} << 20;
    options.receive_timeout = receive_timeout;
    launcher = std::make_unique<LocalLauncher>(std::move(options));
  }
  absl::StatusOr<schedules::Schedule> schedule =
      schedules::Generate("1f1b", {.actors = pipeline_actors, .microbatches = kMicrobatches});
  EXPECT_TRUE(schedule.ok()) << schedule.status();
  absl::StatusOr<std::unique_ptr<Pipeline>> pipeline =
      Pipeline::Create(step, *schedule, ir::SeedSources(step), std::move(launcher));
  EXPECT_TRUE(pipeline.ok()) << pipeline.status();
  return pipeline.ok() ? *std::move(pipeline) : nullptr;
}

TEST(Debugger, BreakpointPausesTheActorAndWhereSaysWhoWaitsForIt) {
  const ir::TrainStep step = Mlp();
  std::unique_ptr<Pipeline> pipeline = Start(step);
  ASSERT_NE(pipeline, nullptr);
  Debugger debugger(pipeline.get());
  ASSERT_TRUE(debugger.AddBreakpoint(2, "B2.0").ok());

  absl::StatusOr<std::optional<StepReport>> paused = debugger.Start(testing_harness::Batches(step, 1));
  ASSERT_TRUE(paused.ok()) << paused.status();
  ASSERT_FALSE(paused->has_value()) << "the step ran through its breakpoint";
  ASSERT_TRUE(debugger.in_step());
  std::vector<ActorPosition> where = debugger.Where();
  ASSERT_EQ(where.size(), 4u);
  EXPECT_EQ(where[2].state, State::kPaused);
  EXPECT_EQ(where[2].task, "B2.0");
  // 1F1B on 4 actors: actor 1 needs B2.0's gradient for B1.0, actor 0
  // needs B1.0's; actor 3 needs the forward F2.2 that actor 2 would run
  // after B2.0.
  EXPECT_EQ(where[1].state, State::kWaiting);
  EXPECT_EQ(where[1].task, "B1.0");
  EXPECT_THAT(where[1].waits_for, ElementsAre(Pair(2, "B2.0")));
  EXPECT_THAT(where[0].waits_for, ElementsAre(Pair(1, "B1.0")));
  EXPECT_THAT(where[3].waits_for, ElementsAre(Pair(2, "F2.2")));

  // Actor 2's forward activations of microbatch 0 are alive until B2.0.
  const ir::ActorProgram& program = pipeline->compiled().programs[2];
  std::string received;
  for (const ir::Instruction& instruction : program.instructions) {
    if (instruction.kind == ir::InstructionKind::kReceive && instruction.task.ToString() == "F2.0") {
      received = program.buffers[instruction.buffers[0]].name;
      break;
    }
  }
  ASSERT_FALSE(received.empty());
  absl::StatusOr<ir::HostTensor> activation = debugger.Inspect(2, received);
  ASSERT_TRUE(activation.ok()) << activation.status();
  EXPECT_EQ(activation->shape(), (ir::Shape{4, 12}));
  // A buffer of microbatch 3 is not filled yet: the answer says when it is.
  absl::Status later = debugger.Inspect(2, absl::StrCat(received.substr(0, received.find('@')), "@3")).status();
  EXPECT_EQ(later.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(later.message(), HasSubstr("holds nothing now: it lives from instruction"));
  EXPECT_EQ(debugger.Inspect(2, "no-such-buffer").status().code(), absl::StatusCode::kNotFound);

  absl::StatusOr<std::optional<StepReport>> done = debugger.Continue();
  ASSERT_TRUE(done.ok()) << done.status();
  ASSERT_TRUE(done->has_value());
  EXPECT_EQ((*done)->step, 1);
  EXPECT_FALSE(debugger.in_step());
}

class DebuggerOn : public ::testing::TestWithParam<Actors> {};

TEST_P(DebuggerOn, TaskByTaskStepsGiveTheFusedStepsBits) {
  const ir::TrainStep step = Mlp();
  std::unique_ptr<Pipeline> fused = Start(step, absl::Seconds(20), GetParam());
  std::unique_ptr<Pipeline> debugged = Start(step, absl::Seconds(20), GetParam());
  ASSERT_NE(fused, nullptr);
  ASSERT_NE(debugged, nullptr);
  Debugger debugger(debugged.get());
  ASSERT_TRUE(debugger.AddBreakpoint(-1, "F1.1").ok());
  ASSERT_TRUE(debugger.AddBreakpoint(3, "update").ok());
  for (int64_t s = 1; s <= 2; ++s) {
    const std::vector<ir::TensorMap> batch = testing_harness::Batches(step, s);
    absl::StatusOr<StepReport> expected = fused->Step(batch);
    ASSERT_TRUE(expected.ok()) << expected.status();
    absl::StatusOr<std::optional<StepReport>> report = debugger.Start(batch);
    int pauses = 0;
    while (report.ok() && !report->has_value()) {
      ++pauses;
      report = debugger.Continue();
    }
    ASSERT_TRUE(report.ok()) << report.status();
    EXPECT_EQ(pauses, 2) << "F1.1 on actor 1, then the update on actor 3";
    ASSERT_EQ((*report)->losses.size(), expected->losses.size());
    for (size_t m = 0; m < expected->losses.size(); ++m) {
      EXPECT_EQ(std::bit_cast<uint32_t>((*report)->losses[m]), std::bit_cast<uint32_t>(expected->losses[m]));
    }
  }
  absl::StatusOr<ir::TensorMap> a = fused->State();
  absl::StatusOr<ir::TensorMap> b = debugged->State();
  ASSERT_TRUE(a.ok() && b.ok());
  for (const auto& [name, tensor] : *a) EXPECT_TRUE(b->at(name).BitwiseEquals(tensor)) << name;
}

INSTANTIATE_TEST_SUITE_P(Launchers, DebuggerOn, ::testing::Values(Actors::kProcesses, Actors::kThreads),
                         [](const ::testing::TestParamInfo<Actors>& info) {
                           return info.param == Actors::kThreads ? "Threads" : "Processes";
                         });

// Two replicas of a 2-actor pipeline: actor a is position a % 2 of replica
// a / 2. Stage 1's last backward (B1.3) starts its all-reduce between
// actors 1 and 3.
class DebuggerWithReplicasOn : public ::testing::TestWithParam<Actors> {};

TEST_P(DebuggerWithReplicasOn, AReplicaPausedBeforeItsAllReduceHoldsTheOthersBeforeTheirs) {
  const ir::TrainStep step = Mlp(/*stages=*/2, /*replicas=*/2);
  // Short deadlines: a pause must outlast every receive and all-reduce timeout.
  std::unique_ptr<Pipeline> debugged = Start(step, absl::Milliseconds(300), GetParam(), /*pipeline_actors=*/2);
  std::unique_ptr<Pipeline> fused = Start(step, absl::Seconds(20), GetParam(), /*pipeline_actors=*/2);
  ASSERT_NE(debugged, nullptr);
  ASSERT_NE(fused, nullptr);
  Debugger debugger(debugged.get());
  ASSERT_TRUE(debugger.AddBreakpoint(3, "B1.3").ok());
  for (int64_t s = 1; s <= 2; ++s) {
    const std::vector<ir::TensorMap> batch = testing_harness::Batches(step, s);
    absl::StatusOr<StepReport> expected = fused->Step(batch);
    ASSERT_TRUE(expected.ok()) << expected.status();
    absl::StatusOr<std::optional<StepReport>> report = debugger.Start(batch);
    ASSERT_TRUE(report.ok()) << report.status();
    ASSERT_FALSE(report->has_value()) << "actor 3 pauses before B1.3";
    const std::vector<ActorPosition> where = debugger.Where();
    ASSERT_EQ(where.size(), 4u);
    EXPECT_EQ(where[3].state, State::kPaused);
    EXPECT_EQ(where[3].task, "B1.3");
    // Actor 1 (replica 0) holds before its own B1.3: it joins actor 3's all-reduce.
    EXPECT_EQ(where[1].state, State::kWaiting);
    EXPECT_EQ(where[1].task, "B1.3");
    EXPECT_THAT(where[1].waits_for, ElementsAre(Pair(3, "B1.3")));
    absl::SleepFor(absl::Seconds(1));  // past every deadline: nobody is inside a collective
    report = debugger.Continue();
    ASSERT_TRUE(report.ok()) << report.status();
    ASSERT_TRUE(report->has_value());
    ASSERT_EQ((*report)->losses.size(), expected->losses.size());
    for (size_t m = 0; m < expected->losses.size(); ++m) {
      EXPECT_EQ(std::bit_cast<uint32_t>((*report)->losses[m]), std::bit_cast<uint32_t>(expected->losses[m])) << m;
    }
  }
  absl::StatusOr<ir::TensorMap> a = fused->State();
  absl::StatusOr<ir::TensorMap> b = debugged->State();
  ASSERT_TRUE(a.ok() && b.ok());
  for (const auto& [name, tensor] : *a) EXPECT_TRUE(b->at(name).BitwiseEquals(tensor)) << name;
}

INSTANTIATE_TEST_SUITE_P(Launchers, DebuggerWithReplicasOn, ::testing::Values(Actors::kProcesses, Actors::kThreads),
                         [](const ::testing::TestParamInfo<Actors>& info) {
                           return info.param == Actors::kThreads ? "Threads" : "Processes";
                         });

TEST(Debugger, APauseOutlastsTheReceiveDeadline) {
  const ir::TrainStep step = Mlp();
  std::unique_ptr<Pipeline> pipeline = Start(step, /*receive_timeout=*/absl::Milliseconds(200));
  ASSERT_NE(pipeline, nullptr);
  Debugger debugger(pipeline.get());
  ASSERT_TRUE(debugger.AddBreakpoint(0, "F0.1").ok());
  absl::StatusOr<std::optional<StepReport>> paused = debugger.Start(testing_harness::Batches(step, 1));
  ASSERT_TRUE(paused.ok()) << paused.status();
  ASSERT_FALSE(paused->has_value());
  // Nobody sits in a receive while actor 0 is paused: no deadline runs out.
  absl::SleepFor(absl::Seconds(1));
  absl::StatusOr<std::optional<StepReport>> done = debugger.Continue();
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_TRUE(done->has_value());
}

TEST(Debugger, BreakpointsNameTasksThatRunThere) {
  const ir::TrainStep step = Mlp();
  std::unique_ptr<Pipeline> pipeline = Start(step);
  ASSERT_NE(pipeline, nullptr);
  Debugger debugger(pipeline.get());
  absl::Status elsewhere = debugger.AddBreakpoint(2, "B1.0").status();
  EXPECT_EQ(elsewhere.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(elsewhere.message(), HasSubstr("actor 2 runs no task B1.0; it runs on actor 1"));
  EXPECT_THAT(debugger.AddBreakpoint(-1, "X9.9").status().message(), HasSubstr("no actor runs a task X9.9"));
  EXPECT_THAT(debugger.AddBreakpoint(7, "F0.0").status().message(), HasSubstr("no actor 7"));
  absl::StatusOr<int32_t> id = debugger.AddBreakpoint(-1, "F0.0");
  ASSERT_TRUE(id.ok());
  EXPECT_TRUE(debugger.DeleteBreakpoint(*id).ok());
  EXPECT_EQ(debugger.DeleteBreakpoint(*id).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(debugger.Continue().status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace tandem::controller
