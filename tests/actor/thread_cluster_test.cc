// InMemoryNetwork and ThreadCluster: actors as threads, messages matched by
// (sender, tag), and every failure turned into a prompt, named error.
#include "actor/thread_cluster.h"

#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "actor/in_memory_transport.h"
#include "backends/cpu/interpreter.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/test_programs.h"

namespace tandem::actor::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

absl::Time Later(absl::Duration duration) { return absl::Now() + duration; }

TEST(InMemoryNetwork, MatchesMessagesByTagNotArrivalOrder) {
  InMemoryNetwork network(3);
  ASSERT_TRUE(network.Endpoint(0).Send(2, 7, {ir::HostTensor::Scalar(7)}).ok());
  ASSERT_TRUE(network.Endpoint(0).Send(2, 9, {ir::HostTensor::Scalar(9)}).ok());
  ASSERT_TRUE(network.Endpoint(1).Send(2, 7, {ir::HostTensor::Scalar(17)}).ok());
  absl::StatusOr<std::vector<ir::HostTensor>> nine = network.Endpoint(2).Receive(0, 9, Later(absl::Seconds(5)));
  ASSERT_TRUE(nine.ok()) << nine.status();
  EXPECT_EQ((*nine)[0].f32()[0], 9);
  absl::StatusOr<std::vector<ir::HostTensor>> from1 = network.Endpoint(2).Receive(1, 7, Later(absl::Seconds(5)));
  ASSERT_TRUE(from1.ok());
  EXPECT_EQ((*from1)[0].f32()[0], 17);
  EXPECT_THAT(network.PendingMessages(), ElementsAre(PendingMessage{0, 2, 7, 1}));
  EXPECT_EQ(network.PendingMessages()[0].ToString(), "actor 0 -> actor 2 tag 7 (1 tensor)");
  network.Reset();
  EXPECT_TRUE(network.PendingMessages().empty());
}

TEST(InMemoryNetwork, DuplicateTagIsAnErrorNamingBothActors) {
  InMemoryNetwork network(2);
  ASSERT_TRUE(network.Endpoint(1).Send(0, 5, {}).ok());
  ASSERT_TRUE(network.Endpoint(0).Receive(1, 5, Later(absl::Seconds(5))).ok());
  // Even once the first was received: tags are unique per step.
  absl::Status status = network.Endpoint(1).Send(0, 5, {});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("actor 1 sent tag 5 to actor 0 twice in one step"));
}

TEST(InMemoryNetwork, RejectsBadPeers) {
  InMemoryNetwork network(2);
  EXPECT_THAT(network.Endpoint(0).Send(2, 1, {}).message(), HasSubstr("actor 0: peer 2 is outside [0, 2)"));
  EXPECT_THAT(network.Endpoint(1).Receive(1, 1, Later(absl::Seconds(1))).status().message(),
              HasSubstr("actor 1 addresses itself"));
}

TEST(InMemoryNetwork, ReceiveTimesOutNamingPeerAndTag) {
  InMemoryNetwork network(2);
  const absl::Time start = absl::Now();
  absl::StatusOr<std::vector<ir::HostTensor>> got = network.Endpoint(1).Receive(0, 42, Later(absl::Milliseconds(200)));
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(got.status().message(), HasSubstr("no message from actor 0 with tag 42 after waiting"));
  EXPECT_GE(took, absl::Milliseconds(200));
  EXPECT_LT(took, absl::Seconds(5));
}

TEST(InMemoryNetwork, AbortWakesAWaitingReceivePromptly) {
  InMemoryNetwork network(2);
  absl::Status seen;
  absl::Duration waited;
  std::thread receiver([&] {
    const absl::Time start = absl::Now();
    seen = network.Endpoint(1).Receive(0, 3, Later(absl::Seconds(60))).status();
    waited = absl::Now() - start;
  });
  absl::SleepFor(absl::Milliseconds(50));
  network.Endpoint(0).Abort(absl::UnavailableError("actor 0 failed: out of luck"));
  receiver.join();
  EXPECT_EQ(seen.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(seen.message(), HasSubstr("actor 0 failed"));
  EXPECT_LT(waited, absl::Seconds(5));
  // The first abort wins; later calls fail at once.
  network.Abort(absl::InternalError("second"));
  EXPECT_EQ(network.abort_status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(network.Endpoint(0).Send(1, 1, {}).code(), absl::StatusCode::kUnavailable);
}

std::unique_ptr<ThreadCluster> MakeCluster(std::vector<ir::ActorProgram> programs) {
  absl::StatusOr<std::unique_ptr<ThreadCluster>> cluster = ThreadCluster::Create(std::move(programs));
  EXPECT_TRUE(cluster.ok()) << cluster.status();
  return cluster.ok() ? *std::move(cluster) : nullptr;
}

TEST(ThreadCluster, TwoActorsMatchRunGraphBitwiseOverSteps) {
  constexpr int32_t kMicrobatches = 4;
  TwoStageForward programs = MakeTwoStageForward(kMicrobatches);
  const ir::Function f0 = programs.actor0.functions[0];
  const ir::Function f1 = programs.actor1.functions[0];
  const int64_t peak0 = programs.actor0.static_peak_bytes, peak1 = programs.actor1.static_peak_bytes;
  std::unique_ptr<ThreadCluster> cluster = MakeCluster({programs.actor0, programs.actor1});
  const ir::TensorMap state = {{"w0", Iota(F32({3, 4}), -0.7f, 0.13f)}, {"w1", Iota(F32({4, 1}), 0.3f, -0.21f)}};
  EXPECT_EQ(cluster->RunStep(1, ir::StepInputs(), absl::Seconds(10)).status().code(),
            absl::StatusCode::kFailedPrecondition);  // no state yet
  ASSERT_TRUE(cluster->LoadState(state).ok());
  for (int64_t step = 1; step <= 3; ++step) {
    ir::StepInputs inputs;
    for (int32_t m = 0; m < kMicrobatches; ++m) inputs[{"x", m}] = Iota(F32({2, 3}), 0.1f * m - 0.2f * step, 0.37f);
    absl::StatusOr<std::vector<ir::StepOutputs>> outputs = cluster->RunStep(step, inputs, absl::Seconds(10));
    ASSERT_TRUE(outputs.ok()) << outputs.status();
    ASSERT_EQ(outputs->size(), 2u);
    for (int32_t m = 0; m < kMicrobatches; ++m) {
      absl::StatusOr<ir::TensorMap> h = cpu::RunGraph(f0.graph, {{"x", inputs[{"x", m}]}, {"w0", state.at("w0")}});
      ASSERT_TRUE(h.ok());
      absl::StatusOr<ir::TensorMap> loss = cpu::RunGraph(f1.graph, {{"h", h->at("h")}, {"w1", state.at("w1")}});
      ASSERT_TRUE(loss.ok());
      EXPECT_TRUE((*outputs)[1].results.at("loss").at(m).BitwiseEquals(loss->at("loss"))) << "step " << step << " mb " << m;
    }
    EXPECT_EQ((*outputs)[0].peak_live_bytes, peak0);
    EXPECT_EQ((*outputs)[1].peak_live_bytes, peak1);
  }
  absl::StatusOr<ir::TensorMap> final_state = cluster->State();
  ASSERT_TRUE(final_state.ok());
  EXPECT_EQ(final_state->size(), 2u);
  EXPECT_TRUE(final_state->at("w0").BitwiseEquals(state.at("w0")));
}

TEST(ThreadCluster, PerActorInputsFeedTheirOwnActor) {
  TwoStageForward programs = MakeTwoStageForward(1);
  std::unique_ptr<ThreadCluster> cluster = MakeCluster({programs.actor0, programs.actor1});
  ASSERT_TRUE(cluster->LoadState({{"w0", Iota(F32({3, 4}), 0, 1)}, {"w1", Iota(F32({4, 1}), 0, 1)}}).ok());
  EXPECT_EQ(cluster->RunStep(1, std::vector<ir::StepInputs>(1), absl::Seconds(10)).status().code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<ir::StepInputs> inputs(2);
  inputs[0][{"x", 0}] = Iota(F32({2, 3}), 0, 1);
  absl::StatusOr<std::vector<ir::StepOutputs>> outputs = cluster->RunStep(1, inputs, absl::Seconds(10));
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  EXPECT_EQ((*outputs)[1].results.at("loss").size(), 1u);
}

TEST(ThreadCluster, ReceiveThatNeverArrivesFailsWithinItsDeadline) {
  TwoStageForward programs = MakeTwoStageForward(1);
  programs.actor0.instructions.erase(programs.actor0.instructions.begin() + 1);  // drop the send
  WithPeak(programs.actor0);
  std::unique_ptr<ThreadCluster> cluster = MakeCluster({programs.actor0, programs.actor1});
  ASSERT_TRUE(cluster->LoadState({{"w0", Iota(F32({3, 4}), 0, 1)}, {"w1", Iota(F32({4, 1}), 0, 1)}}).ok());
  const absl::Time start = absl::Now();
  absl::StatusOr<std::vector<ir::StepOutputs>> outputs =
      cluster->RunStep(5, ir::StepInputs{{{"x", 0}, Iota(F32({2, 3}), 0, 1)}}, absl::Milliseconds(200));
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(outputs.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(outputs.status().message(),
              HasSubstr("actor 1, step 5, instruction 0 (F1.0 recv <- actor 0 tag 100): no message from actor 0 "
                        "with tag 100 after waiting"));
  EXPECT_LT(took, absl::Seconds(5));
}

TEST(ThreadCluster, FailingActorAbortsItsPeersWaitPromptly) {
  ir::ActorProgram actor0;
  actor0.actor = 0;
  actor0.num_actors = 2;
  actor0.functions.push_back(TraceFunction("F0", [](Tracer& t) -> std::vector<std::pair<std::string, Tensor>> {
    Tensor table = t.Parameter("table", {5, 2}, init::Zeros());
    Tensor ids = t.Input("ids", I32({3}));
    return {{"e", embedding(table, ids)}};
  }));
  actor0.buffers = {StateBuffer("table", F32({5, 2})), InputBuffer("ids@0", "ids", 0, I32({3})),
                    TemporaryBuffer("e@0", F32({3, 2}))};
  actor0.instructions = {RunInstruction({'F', 0, 0}, 0, {0, 1}, {2}), SendInstruction({'F', 0, 0}, 1, 1, {2}),
                         FreeInstruction({'F', 0, 0}, {2})};
  ir::ActorProgram actor1;
  actor1.actor = 1;
  actor1.num_actors = 2;
  actor1.buffers = {TemporaryBuffer("e@0", F32({3, 2}))};
  actor1.instructions = {ReceiveInstruction({'F', 1, 0}, 0, 1, {0}), FreeInstruction({'F', 1, 0}, {0})};
  std::unique_ptr<ThreadCluster> cluster = MakeCluster({WithPeak(actor0), WithPeak(actor1)});
  const ir::TensorMap state = {{"table", Iota(F32({5, 2}), 0, 1)}};
  ASSERT_TRUE(cluster->LoadState(state).ok());

  const absl::Time start = absl::Now();
  absl::StatusOr<std::vector<ir::StepOutputs>> outputs = cluster->RunStep(
      1, ir::StepInputs{{{"ids", 0}, ir::HostTensor::FromInts({3}, {0, 70, 1})}}, absl::Seconds(60));
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(outputs.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(outputs.status().message(), HasSubstr("actor 0, step 1, instruction 0 (F0.0 run F0): "));
  EXPECT_THAT(outputs.status().message(), HasSubstr("embedding: id 70"));
  EXPECT_LT(took, absl::Seconds(5)) << "actor 1 waited for its deadline instead of being aborted";
  EXPECT_THAT(cluster->network().abort_status().message(), HasSubstr("actor 0 failed: "));

  // The cluster refuses to go on until its state is loaded again.
  const ir::StepInputs good = {{{"ids", 0}, ir::HostTensor::FromInts({3}, {0, 4, 1})}};
  EXPECT_EQ(cluster->RunStep(2, good, absl::Seconds(10)).status().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(cluster->LoadState(state).ok());
  absl::StatusOr<std::vector<ir::StepOutputs>> again = cluster->RunStep(2, good, absl::Seconds(10));
  EXPECT_TRUE(again.ok()) << again.status();
}

TEST(ThreadCluster, MessageThatNoOneReceivesIsAnError) {
  TwoStageForward programs = MakeTwoStageForward(1);
  programs.actor0.instructions.insert(programs.actor0.instructions.begin() + 2,
                                      SendInstruction({'F', 0, 0}, 1, 555, {2}));
  std::unique_ptr<ThreadCluster> cluster = MakeCluster({programs.actor0, programs.actor1});
  ASSERT_TRUE(cluster->LoadState({{"w0", Iota(F32({3, 4}), 0, 1)}, {"w1", Iota(F32({4, 1}), 0, 1)}}).ok());
  absl::StatusOr<std::vector<ir::StepOutputs>> outputs =
      cluster->RunStep(1, ir::StepInputs{{{"x", 0}, Iota(F32({2, 3}), 0, 1)}}, absl::Seconds(10));
  EXPECT_EQ(outputs.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(outputs.status().message(),
              HasSubstr("step 1: messages sent but never received: actor 0 -> actor 1 tag 555 (1 tensor)"));
}

TEST(ThreadCluster, CreateChecksActorNumbering) {
  TwoStageForward programs = MakeTwoStageForward(1);
  absl::StatusOr<std::unique_ptr<ThreadCluster>> cluster = ThreadCluster::Create({programs.actor1, programs.actor0});
  EXPECT_EQ(cluster.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(cluster.status().message(), HasSubstr("program 0 is for actor 1 of 2 on 1 replicas, expected actor 0 of 2"));
}

}  // namespace
}  // namespace tandem::actor::testing
