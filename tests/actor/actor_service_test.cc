// ActorService in-process: the controller's side is this test, on one KJ
// event loop (the test thread); each service runs its own compute thread;
// they are connected by capability pipes with rpc::RpcConnection, and their
// data plane is one InMemoryNetwork. Every wait is on a promise or bounded.
#include "actor/actor_service.h"

#include "tests/actor/actor_service_fixture.h"

namespace tandem::actor::testing {
namespace {

using ::testing::HasSubstr;

TEST_F(ActorServiceTest, StepsOverRpcMatchThreadClusterBitwiseWithOneCallPerActorPerStep) {
  constexpr int32_t kMicrobatches = 3;
  constexpr int64_t kSteps = 3;
  TwoStageForward programs = MakeTwoStageForward(kMicrobatches);

  // The reference first (it also sets BLAS to one thread, as actors use).
  absl::StatusOr<std::unique_ptr<ThreadCluster>> cluster = ThreadCluster::Create({programs.actor0, programs.actor1});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ASSERT_TRUE((*cluster)->LoadState(TwoStageState()).ok());
  std::vector<std::vector<ir::StepOutputs>> expected;
  for (int64_t step = 0; step < kSteps; ++step) {
    auto outputs = (*cluster)->RunStep(step, TwoStageInputs(kMicrobatches, step), absl::Seconds(10));
    ASSERT_TRUE(outputs.ok()) << outputs.status();
    expected.push_back(*std::move(outputs));
  }

  std::vector<wire::Actor::Client> actors;
  actors.push_back(Serve(network_.Endpoint(0)));
  actors.push_back(Serve(network_.Endpoint(1)));
  const std::vector<const ir::ActorProgram*> mine = {&programs.actor0, &programs.actor1};
  std::vector<uint64_t> hashes;
  for (int32_t a = 0; a < 2; ++a) {
    hashes.push_back(ir::HashActorProgram(*mine[a]));
    ASSERT_TRUE(LoadProgram(actors[a], *mine[a]).ok());
    ASSERT_TRUE(LoadProgram(actors[a], *mine[a]).ok());  // a second load of a cached hash: no-op
    ASSERT_TRUE(LoadState(actors[a], TwoStageState()).ok());  // each takes its own bindings
  }

  for (int64_t step = 0; step < kSteps; ++step) {
    network_.Reset();
    const ir::StepInputs inputs = TwoStageInputs(kMicrobatches, step);
    // Both calls are in flight at once; each actor computes on its own thread.
    auto pending0 = SendRunStep(actors[0], step, hashes[0], inputs);
    auto pending1 = SendRunStep(actors[1], step, hashes[1], inputs);
    absl::StatusOr<StepReply> reply0 = Await(kj::mv(pending0));
    absl::StatusOr<StepReply> reply1 = Await(kj::mv(pending1));
    ASSERT_TRUE(reply0.ok()) << reply0.status();
    ASSERT_TRUE(reply1.ok()) << reply1.status();
    EXPECT_TRUE(network_.PendingMessages().empty());

    EXPECT_TRUE(reply0->results.empty());
    const auto& losses = expected[step][1].results.at("loss");
    ASSERT_EQ(reply1->results.at("loss").size(), losses.size());
    for (const auto& [m, loss] : losses) {
      EXPECT_TRUE(reply1->results.at("loss").at(m).BitwiseEquals(loss)) << "step " << step << " microbatch " << m;
    }
    EXPECT_EQ(reply0->peak_live_bytes, expected[step][0].peak_live_bytes);
    EXPECT_EQ(reply1->peak_live_bytes, expected[step][1].peak_live_bytes);
    EXPECT_EQ(reply0->timings.size(), programs.actor0.instructions.size());
    EXPECT_EQ(reply1->timings.size(), programs.actor1.instructions.size());
  }
  // Exactly one runStep call per actor per step produced every result.
  EXPECT_EQ(run_step_calls_, 2 * kSteps);

  absl::StatusOr<ir::TensorMap> reference_state = (*cluster)->State();
  ASSERT_TRUE(reference_state.ok());
  absl::StatusOr<ir::HostTensor> w1 = ReadBuffer(actors[1], "w1");
  ASSERT_TRUE(w1.ok()) << w1.status();
  EXPECT_TRUE(w1->BitwiseEquals(reference_state->at("w1")));
  EXPECT_EQ(ReadBuffer(actors[1], "w0").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Health(actors[0]), wire::HealthState::IDLE);
}

TEST_F(ActorServiceTest, RangesPerTaskGiveTheSameResultsAsOneStep) {
  constexpr int32_t kMicrobatches = 2;
  TwoStageForward programs = MakeTwoStageForward(kMicrobatches);
  wire::Actor::Client actor0 = Serve(network_.Endpoint(0));
  wire::Actor::Client actor1 = Serve(network_.Endpoint(1));
  const uint64_t hash0 = ir::HashActorProgram(programs.actor0);
  const uint64_t hash1 = ir::HashActorProgram(programs.actor1);
  ASSERT_TRUE(LoadProgram(actor0, programs.actor0).ok());
  ASSERT_TRUE(LoadProgram(actor1, programs.actor1).ok());
  ASSERT_TRUE(LoadState(actor0, TwoStageState()).ok());
  ASSERT_TRUE(LoadState(actor1, TwoStageState()).ok());
  const ir::StepInputs inputs = TwoStageInputs(kMicrobatches, 0);
  ASSERT_TRUE(RunStep(actor0, 0, hash0, inputs).ok());  // sends never block
  absl::StatusOr<StepReply> fused = RunStep(actor1, 0, hash1, inputs);
  ASSERT_TRUE(fused.ok()) << fused.status();

  network_.Reset();
  // Task by task: actor 0's whole stream, then actor 1's.
  StepReply last;
  for (auto [actor, program, hash] : {std::tuple(&actor0, &programs.actor0, hash0),
                                      std::tuple(&actor1, &programs.actor1, hash1)}) {
    std::vector<int32_t> bounds = program->task_starts;
    bounds.push_back(static_cast<int32_t>(program->instructions.size()));
    for (size_t i = 0; i + 1 < bounds.size(); ++i) {
      absl::StatusOr<StepReply> reply = RunRange(*actor, 1, hash, bounds[i], bounds[i + 1], inputs);
      ASSERT_TRUE(reply.ok()) << reply.status();
      if (i + 2 < bounds.size()) {
        EXPECT_TRUE(reply->results.empty());
      }
      last = *std::move(reply);
    }
  }
  EXPECT_EQ(last.timings.size(), programs.actor1.instructions.size());
  ASSERT_EQ(last.results.at("loss").size(), fused->results.at("loss").size());
  for (const auto& [m, loss] : fused->results.at("loss")) {
    EXPECT_TRUE(last.results.at("loss").at(m).BitwiseEquals(loss)) << "microbatch " << m;
  }
  // A range that does not continue the step in progress is refused.
  network_.Reset();
  absl::StatusOr<StepReply> skipped = RunRange(actor0, 2, hash0, programs.actor0.task_starts[1],
                                               static_cast<int32_t>(programs.actor0.instructions.size()), inputs);
  EXPECT_EQ(skipped.status().code(), absl::StatusCode::kFailedPrecondition) << skipped.status();
}

TEST_F(ActorServiceTest, WrongOrUnknownHashKeepsItsCode) {
  TwoStageForward programs = MakeTwoStageForward(1);
  wire::Actor::Client actor = Serve(network_.Endpoint(0));
  const uint64_t hash = ir::HashActorProgram(programs.actor0);

  absl::Status wrong = LoadProgram(actor, programs.actor0, hash ^ 1);
  EXPECT_EQ(wrong.code(), absl::StatusCode::kInvalidArgument) << wrong;
  EXPECT_THAT(wrong.message(), HasSubstr("sent under"));
  // Actor 1's program does not belong on actor 0's transport.
  EXPECT_EQ(LoadProgram(actor, programs.actor1).code(), absl::StatusCode::kInvalidArgument);

  ASSERT_TRUE(LoadState(actor, TwoStageState()).ok());
  absl::StatusOr<StepReply> unknown = RunStep(actor, 0, hash, TwoStageInputs(1, 0));
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kFailedPrecondition) << unknown.status();
  EXPECT_THAT(unknown.status().message(), HasSubstr("no program loaded under hash"));

  ASSERT_TRUE(LoadProgram(actor, programs.actor0).ok());
  EXPECT_TRUE(RunStep(actor, 0, hash, TwoStageInputs(1, 0)).ok());
}

TEST_F(ActorServiceTest, StepBeforeLoadStateIsFailedPrecondition) {
  TwoStageForward programs = MakeTwoStageForward(1);
  wire::Actor::Client actor = Serve(network_.Endpoint(0));
  ASSERT_TRUE(LoadProgram(actor, programs.actor0).ok());
  absl::StatusOr<StepReply> reply = RunStep(actor, 0, ir::HashActorProgram(programs.actor0), TwoStageInputs(1, 0));
  EXPECT_EQ(reply.status().code(), absl::StatusCode::kFailedPrecondition) << reply.status();
  EXPECT_THAT(reply.status().message(), HasSubstr("loadState"));
  // A state that lacks the program's buffer is refused with the executor's words.
  network_.Reset();
  absl::Status missing = LoadState(actor, {{"w1", Iota(F32({4, 1}), 0, 1)}});
  ASSERT_TRUE(missing.ok()) << missing;  // stored: no executor yet
  reply = RunStep(actor, 0, ir::HashActorProgram(programs.actor0), TwoStageInputs(1, 0));
  EXPECT_EQ(reply.status().code(), absl::StatusCode::kInvalidArgument) << reply.status();
}

TEST_F(ActorServiceTest, KernelErrorComesBackWithTheExecutorsMessageAndCode) {
  ir::ActorProgram program = MakeEmbeddingLookup();
  const uint64_t hash = ir::HashActorProgram(program);
  InMemoryNetwork network(1);
  wire::Actor::Client actor = Serve(network.Endpoint(0));
  ASSERT_TRUE(LoadProgram(actor, program).ok());
  const ir::TensorMap state = {{"table", Iota(F32({5, 2}), 0, 1)}};
  ASSERT_TRUE(LoadState(actor, state).ok());

  absl::StatusOr<StepReply> failed =
      RunStep(actor, 7, hash, {{{"ids", 0}, ir::HostTensor::FromInts({3}, {1, 9, 2})}});
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kInvalidArgument) << failed.status();
  EXPECT_THAT(failed.status().message(), HasSubstr("actor 0, step 7, instruction 0 (F0.0 run F0): "));
  EXPECT_THAT(failed.status().message(), HasSubstr("embedding: id 9"));
  std::string message;
  EXPECT_EQ(Health(actor, &message), wire::HealthState::FAILED);
  EXPECT_THAT(message, HasSubstr("embedding: id 9"));

  // Refused until the state is reloaded; then the actor works again.
  const ir::StepInputs good = {{{"ids", 0}, ir::HostTensor::FromInts({3}, {0, 1, 2})}};
  absl::StatusOr<StepReply> refused = RunStep(actor, 8, hash, good);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition) << refused.status();
  EXPECT_THAT(refused.status().message(), HasSubstr("step 7 failed"));
  network.Reset();  // the failure aborted the data plane
  ASSERT_TRUE(LoadState(actor, state).ok());
  EXPECT_EQ(Health(actor), wire::HealthState::IDLE);
  EXPECT_TRUE(RunStep(actor, 8, hash, good).ok());
}

TEST_F(ActorServiceTest, HealthAnswersWhileAStepWaitsOnAReceive) {
  constexpr int32_t kMicrobatches = 2;
  TwoStageForward programs = MakeTwoStageForward(kMicrobatches);
  ActorServiceOptions options;
  options.receive_timeout = absl::Seconds(20);
  wire::Actor::Client sender = Serve(network_.Endpoint(0), options);
  wire::Actor::Client receiver = Serve(network_.Endpoint(1), options);
  ASSERT_TRUE(LoadProgram(sender, programs.actor0).ok());
  ASSERT_TRUE(LoadProgram(receiver, programs.actor1).ok());
  ASSERT_TRUE(LoadState(sender, TwoStageState()).ok());
  ASSERT_TRUE(LoadState(receiver, TwoStageState()).ok());
  const ir::StepInputs inputs = TwoStageInputs(kMicrobatches, 0);
  const uint64_t hash1 = ir::HashActorProgram(programs.actor1);

  // The receiver's step blocks in its first Receive on its compute thread.
  bool received = false;
  kj::Promise<void> blocked = SendRunStep(receiver, 0, hash1, inputs)
                                  .then([&](capnp::Response<wire::Actor::RunStepResults>&& response) {
                                    received = response.getResults().size() == kMicrobatches;
                                  })
                                  .eagerlyEvaluate(nullptr);
  kj::Timer& timer = io_.provider->getTimer();
  const kj::TimePoint start = timer.now();
  wire::HealthState state = wire::HealthState::IDLE;
  while (state != wire::HealthState::RUNNING && timer.now() - start < 5 * kj::SECONDS) {
    timer.afterDelay(2 * kj::MILLISECONDS).wait(io_.waitScope);
    state = Health(receiver);
  }
  EXPECT_EQ(state, wire::HealthState::RUNNING);
  // Still answering, promptly, while the step waits.
  const kj::TimePoint asked = timer.now();
  EXPECT_EQ(Health(receiver), wire::HealthState::RUNNING);
  EXPECT_LT(timer.now() - asked, 1 * kj::SECONDS);
  EXPECT_FALSE(received);
  // A second step call for the same actor meanwhile is refused.
  absl::StatusOr<StepReply> second = RunStep(receiver, 1, hash1, inputs);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition) << second.status();

  // The sender's step releases the receive.
  ASSERT_TRUE(RunStep(sender, 0, ir::HashActorProgram(programs.actor0), inputs).ok());
  blocked.wait(io_.waitScope);
  EXPECT_TRUE(received);
  EXPECT_EQ(Health(receiver), wire::HealthState::IDLE);
}

TEST_F(ActorServiceTest, AbandonedStepRequiresLoadStateAgain) {
  TwoStageForward programs = MakeTwoStageForward(1);
  ActorServiceOptions options;
  options.receive_timeout = absl::Milliseconds(200);
  wire::Actor::Client receiver = Serve(network_.Endpoint(1), options);
  ASSERT_TRUE(LoadProgram(receiver, programs.actor1).ok());
  ASSERT_TRUE(LoadState(receiver, TwoStageState()).ok());
  const uint64_t hash = ir::HashActorProgram(programs.actor1);
  kj::Timer& timer = io_.provider->getTimer();
  {
    // The controller gives up on the call: the service sees it cancelled.
    auto dropped = SendRunStep(receiver, 0, hash, {});
    timer.afterDelay(20 * kj::MILLISECONDS).wait(io_.waitScope);
  }
  timer.afterDelay(20 * kj::MILLISECONDS).wait(io_.waitScope);
  absl::StatusOr<StepReply> refused = RunStep(receiver, 1, hash, {});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition) << refused.status();
  EXPECT_THAT(refused.status().message(), HasSubstr("abandoned"));
  // loadState runs after the abandoned step ends (its receive times out).
  ASSERT_TRUE(LoadState(receiver, TwoStageState()).ok());
  network_.Reset();
  ASSERT_TRUE(network_.Endpoint(0).Send(1, 100, {Iota(F32({2, 4}), 0, 1)}).ok());
  absl::StatusOr<StepReply> again = RunStep(receiver, 1, hash, {});
  EXPECT_TRUE(again.ok()) << again.status();
}

TEST_F(ActorServiceTest, ShutdownRepliesThenFulfilsTheOwnersPromiseAndRefusesCalls) {
  auto stopped = kj::newPromiseAndFulfiller<void>();
  wire::Actor::Client actor = Serve(network_.Endpoint(0), {}, kj::mv(stopped.fulfiller));
  EXPECT_TRUE(rpc::ToStatus(actor.shutdownRequest().send().ignoreResult()).wait(io_.waitScope).ok());
  kj::Timer& timer = io_.provider->getTimer();
  bool fulfilled = stopped.promise.then([] { return true; })
                       .exclusiveJoin(timer.afterDelay(5 * kj::SECONDS).then([] { return false; }))
                       .wait(io_.waitScope);
  EXPECT_TRUE(fulfilled);
  EXPECT_EQ(LoadState(actor, TwoStageState()).code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace tandem::actor::testing

namespace tandem::actor::testing {
namespace {

class DataPlaneSetupTest : public ActorServiceTest, public ::testing::WithParamInterface<ir::DataPlaneKind> {};

TEST_P(DataPlaneSetupTest, StepsRunOnlyOnceTheDataPlaneIsConnectedThroughTheControlPlane) {
  constexpr int32_t kMicrobatches = 2;
  TwoStageForward programs = MakeTwoStageForward(kMicrobatches);
  std::vector<std::unique_ptr<DataPlane>> planes;
  std::vector<wire::Actor::Client> actors;
  for (int32_t a = 0; a < 2; ++a) {
    absl::StatusOr<std::unique_ptr<DataPlane>> plane =
        CreateDataPlane(GetParam(), a, 2, {.shm_ring_bytes = int64_t{1} << 20});
    ASSERT_TRUE(plane.ok()) << plane.status();
    planes.push_back(*std::move(plane));
    actors.push_back(ServeDataPlane(*planes.back()));
  }
  const std::vector<const ir::ActorProgram*> mine = {&programs.actor0, &programs.actor1};
  for (int32_t a = 0; a < 2; ++a) {
    ASSERT_TRUE(LoadProgram(actors[a], *mine[a]).ok());
    ASSERT_TRUE(LoadState(actors[a], TwoStageState()).ok());
  }
  const ir::StepInputs inputs = TwoStageInputs(kMicrobatches, 0);
  absl::StatusOr<StepReply> early = RunStep(actors[0], 0, ir::HashActorProgram(programs.actor0), inputs);
  EXPECT_EQ(early.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(early.status().message()), HasSubstr("the data plane is not connected"));

  absl::StatusOr<Offer> offer0 = OpenDataPlane(actors[0]);
  absl::StatusOr<Offer> offer1 = OpenDataPlane(actors[1]);
  ASSERT_TRUE(offer0.ok()) << offer0.status();
  ASSERT_TRUE(offer1.ok()) << offer1.status();
  EXPECT_EQ(OpenDataPlane(actors[0]).status().code(), absl::StatusCode::kFailedPrecondition);
  if (GetParam() == ir::DataPlaneKind::kShm) {
    EXPECT_EQ(offer0->regions.size(), 1u);
    EXPECT_TRUE(offer0->tcp_address.empty());
  } else {
    EXPECT_THAT(offer0->tcp_address, HasSubstr("127.0.0.1:"));
  }
  // TCP connects both ways at once: actor 1 accepts while actor 0 dials.
  auto connect1 = [&] {
    auto request = actors[1].connectDataPlaneRequest();
    request.setTimeoutMillis(5000);
    auto peers = request.initPeers(1);
    peers[0].setActor(0);
    peers[0].setTcpAddress(offer0->tcp_address);
    auto region = offer0->regions.find(1);
    if (region != offer0->regions.end()) peers[0].setRegion(region->second);
    return rpc::ToStatus(request.send().ignoreResult());
  }();
  ASSERT_TRUE(ConnectDataPlane(actors[0], 0, *offer1).ok());
  ASSERT_TRUE(connect1.wait(io_.waitScope).ok());

  auto pending0 = SendRunStep(actors[0], 1, ir::HashActorProgram(programs.actor0), inputs);
  auto pending1 = SendRunStep(actors[1], 1, ir::HashActorProgram(programs.actor1), inputs);
  absl::StatusOr<StepReply> reply0 = Await(kj::mv(pending0));
  absl::StatusOr<StepReply> reply1 = Await(kj::mv(pending1));
  ASSERT_TRUE(reply0.ok()) << reply0.status();
  ASSERT_TRUE(reply1.ok()) << reply1.status();
  EXPECT_EQ(reply1->results.at("loss").size(), static_cast<size_t>(kMicrobatches));
}

TEST_P(DataPlaneSetupTest, ConnectWithoutEveryPeerIsInvalidArgumentNamingTheMissingOne) {
  absl::StatusOr<std::unique_ptr<DataPlane>> plane = CreateDataPlane(GetParam(), 0, 2, {.shm_ring_bytes = 4096});
  ASSERT_TRUE(plane.ok()) << plane.status();
  wire::Actor::Client actor = ServeDataPlane(**plane);
  ASSERT_TRUE(OpenDataPlane(actor).ok());
  Offer none;
  absl::Status status = ConnectDataPlane(actor, 0, none, /*with_peer=*/false);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr("data-plane peer 1 is missing"));
}

INSTANTIATE_TEST_SUITE_P(Transports, DataPlaneSetupTest, ::testing::Values(ir::DataPlaneKind::kShm, ir::DataPlaneKind::kTcp),
                         [](const ::testing::TestParamInfo<ir::DataPlaneKind>& info) {
                           return std::string(ir::DataPlaneKindName(info.param));
                         });

TEST_F(ActorServiceTest, ConnectBeforeOpenIsFailedPrecondition) {
  absl::StatusOr<std::unique_ptr<DataPlane>> plane = CreateDataPlane(ir::DataPlaneKind::kShm, 0, 2, {.shm_ring_bytes = 4096});
  ASSERT_TRUE(plane.ok()) << plane.status();
  wire::Actor::Client actor = ServeDataPlane(**plane);
  Offer none;
  absl::Status status = ConnectDataPlane(actor, 0, none);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr("needs one openDataPlane before it"));
}

TEST_F(ActorServiceTest, ShmPeerWithoutItsRingIsInvalidArgument) {
  absl::StatusOr<std::unique_ptr<DataPlane>> plane = CreateDataPlane(ir::DataPlaneKind::kShm, 0, 2, {.shm_ring_bytes = 4096});
  ASSERT_TRUE(plane.ok()) << plane.status();
  wire::Actor::Client actor = ServeDataPlane(**plane);
  ASSERT_TRUE(OpenDataPlane(actor).ok());
  Offer none;
  absl::Status status = ConnectDataPlane(actor, 0, none);  // a peer entry with no region
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr("came without its shared-memory ring"));
}

TEST_F(ActorServiceTest, BareTransportNeedsNoDataPlaneSetup) {
  wire::Actor::Client actor = Serve(network_.Endpoint(0));
  absl::StatusOr<Offer> offer = OpenDataPlane(actor);
  EXPECT_EQ(offer.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(offer.status().message()), HasSubstr("needs no setup"));
}

TEST(DataPlaneKindTest, UnknownNameIsInvalidArgumentListingTheChoices) {
  absl::StatusOr<ir::DataPlaneKind> kind = ir::ParseDataPlaneKind("udp");
  EXPECT_EQ(kind.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(kind.status().message()), HasSubstr("unknown transport 'udp' (expected shm, tcp or auto)"));
}

}  // namespace
}  // namespace tandem::actor::testing
