// ActorService in-process: the controller's side is this test, on one KJ
// event loop (the test thread); each service runs its own compute thread;
// they are connected by capability pipes with rpc::RpcConnection, and their
// data plane is one InMemoryNetwork. Every wait is on a promise or bounded.
#include "actor/actor_service.h"

#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "actor/data_plane.h"
#include "actor/in_memory_transport.h"
#include "actor/thread_cluster.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/actor_program.h"
#include "ir/host_tensor.h"
#include "ir/interpreter.h"
#include "ir/state_source.h"
#include "ir/limits.h"
#include "kj/async-io.h"
#include "rpc/async_status.h"
#include "rpc/connection.h"
#include "rpc/program_codec.h"
#include "rpc/state_codec.h"
#include "rpc/step_codec.h"
#include "rpc/status_convert.h"
#include "tests/actor/test_programs.h"

namespace tandem::actor::testing {
namespace {

namespace wire = rpc::wire;
using ::testing::HasSubstr;

using StepReply = ir::StepOutputs;

ir::TensorMap TwoStageState() {
  return {{"w0", Iota(F32({3, 4}), -0.7f, 0.13f)}, {"w1", Iota(F32({4, 1}), 0.3f, -0.21f)}};
}

ir::StepInputs TwoStageInputs(int32_t microbatches, int64_t step) {
  ir::StepInputs inputs;
  for (int32_t m = 0; m < microbatches; ++m) {
    inputs[{"x", m}] = Iota(F32({2, 3}), 0.1f * m - 0.2f + 0.01f * step, 0.37f);
  }
  return inputs;
}

class ActorServiceTest : public ::testing::Test {
 protected:
  // KJ members may throw from destructors; a test fixture's must not.
  ~ActorServiceTest() noexcept override {}

  // Serves a new ActorService on `transport` over a capability pipe and
  // returns the controller's client of it.
  wire::Actor::Client Serve(Transport& transport, ActorServiceOptions options = {},
                            kj::Own<kj::PromiseFulfiller<void>> on_shutdown = {}) {
    kj::CapabilityPipe pipe = io_.provider->newCapabilityPipe();
    wire::Actor::Client service = kj::heap<ActorService>(transport, options, kj::mv(on_shutdown));
    connections_.push_back(std::make_unique<rpc::RpcConnection>(
        kj::mv(pipe.ends[0]), capnp::rpc::twoparty::Side::SERVER, kj::mv(service), rpc::ConnectionLimits{}));
    connections_.push_back(std::make_unique<rpc::RpcConnection>(kj::mv(pipe.ends[1]),
                                                                capnp::rpc::twoparty::Side::CLIENT,
                                                                capnp::Capability::Client(nullptr),
                                                                rpc::ConnectionLimits{}));
    return connections_.back()->Bootstrap<wire::Actor>();
  }

  // Serves a new ActorService whose transport is set up through the control
  // plane (openDataPlane / connectDataPlane).
  wire::Actor::Client ServeDataPlane(DataPlane& data_plane, ActorServiceOptions options = {}) {
    kj::CapabilityPipe pipe = io_.provider->newCapabilityPipe();
    wire::Actor::Client service = kj::heap<ActorService>(data_plane, options, kj::Own<kj::PromiseFulfiller<void>>());
    connections_.push_back(std::make_unique<rpc::RpcConnection>(
        kj::mv(pipe.ends[0]), capnp::rpc::twoparty::Side::SERVER, kj::mv(service), rpc::ConnectionLimits{}));
    connections_.push_back(std::make_unique<rpc::RpcConnection>(kj::mv(pipe.ends[1]),
                                                                capnp::rpc::twoparty::Side::CLIENT,
                                                                capnp::Capability::Client(nullptr),
                                                                rpc::ConnectionLimits{}));
    return connections_.back()->Bootstrap<wire::Actor>();
  }

  // What openDataPlane returned: the TCP address and the rings by peer.
  struct Offer {
    std::string tcp_address;
    std::map<int32_t, wire::SharedRegion::Client> regions;
  };
  absl::StatusOr<Offer> OpenDataPlane(wire::Actor::Client& actor) {
    auto response = rpc::ToStatusOr(actor.openDataPlaneRequest().send()).wait(io_.waitScope);
    if (!response.ok()) return response.status();
    Offer offer;
    offer.tcp_address = response->getTcpAddress().cStr();
    for (wire::OutboundRegion::Reader region : response->getRegions()) {
      offer.regions.emplace(region.getPeer(), region.getRegion());
    }
    return offer;
  }

  // Hands `actor` (id `self` of two) the other actor's offer.
  absl::Status ConnectDataPlane(wire::Actor::Client& actor, int32_t self, Offer& other, bool with_peer = true) {
    auto request = actor.connectDataPlaneRequest();
    request.setTimeoutMillis(5000);
    auto peers = request.initPeers(with_peer ? 1 : 0);
    if (with_peer) {
      peers[0].setActor(1 - self);
      peers[0].setTcpAddress(other.tcp_address);
      auto region = other.regions.find(self);
      if (region != other.regions.end()) peers[0].setRegion(region->second);
    }
    return rpc::ToStatus(request.send().ignoreResult()).wait(io_.waitScope);
  }

  absl::Status LoadProgram(wire::Actor::Client& actor, const ir::ActorProgram& program, uint64_t hash) {
    auto request = actor.loadProgramRequest();
    request.setHash(hash);
    rpc::EncodeProgram(program, request.initProgram());
    return rpc::ToStatus(request.send().ignoreResult()).wait(io_.waitScope);
  }
  absl::Status LoadProgram(wire::Actor::Client& actor, const ir::ActorProgram& program) {
    return LoadProgram(actor, program, ir::HashActorProgram(program));
  }

  // As the launcher does: every tensor staged in pieces of at most
  // `piece_bytes`, then loadState naming them staged.
  absl::Status LoadState(wire::Actor::Client& actor, const ir::TensorMap& state,
                         uint64_t piece_bytes = ir::kStatePieceBytes) {
    for (const auto& [name, tensor] : state) {
      uint64_t offset = 0;
      do {
        auto request = actor.stageStateRequest();
        request.setBinding(name);
        if (absl::Status status = rpc::EncodeTensorPiece(tensor, offset, piece_bytes, request.initPiece());
            !status.ok()) {
          return status;
        }
        offset += request.getPiece().getData().size();
        if (absl::Status status = rpc::ToStatus(request.send().ignoreResult()).wait(io_.waitScope); !status.ok()) {
          return status;
        }
      } while (offset < static_cast<uint64_t>(tensor.num_bytes()));
    }
    return LoadSources(actor, ir::TensorSources(state));
  }
  absl::Status LoadSources(wire::Actor::Client& actor, const ir::StateSources& sources) {
    auto request = actor.loadStateRequest();
    rpc::EncodeStateSources(sources, request.initSources(static_cast<unsigned>(sources.size())));
    return rpc::ToStatus(request.send().ignoreResult()).wait(io_.waitScope);
  }

  // Sends one runStep call (counted); the reply comes when the loop runs.
  kj::Promise<capnp::Response<wire::Actor::RunStepResults>> SendRunStep(wire::Actor::Client& actor, uint64_t step,
                                                                        uint64_t hash, const ir::StepInputs& inputs) {
    ++run_step_calls_;
    auto request = actor.runStepRequest();
    request.setStepId(step);
    request.setProgramHash(hash);
    rpc::EncodeStepInputs(inputs, request.initInputs(static_cast<unsigned>(inputs.size())));
    return request.send();
  }

  absl::StatusOr<StepReply> Await(kj::Promise<capnp::Response<wire::Actor::RunStepResults>> promise) {
    absl::StatusOr<capnp::Response<wire::Actor::RunStepResults>> response =
        rpc::ToStatusOr(kj::mv(promise)).wait(io_.waitScope);
    if (!response.ok()) return response.status();
    return rpc::DecodeStepOutputs(*response, "the step");
  }

  absl::StatusOr<StepReply> RunStep(wire::Actor::Client& actor, uint64_t step, uint64_t hash,
                                    const ir::StepInputs& inputs) {
    return Await(SendRunStep(actor, step, hash, inputs));
  }

  // One runRange call; the results of the step's last range (empty before).
  absl::StatusOr<StepReply> RunRange(wire::Actor::Client& actor, uint64_t step, uint64_t hash, int32_t begin,
                                     int32_t end, const ir::StepInputs& inputs) {
    auto request = actor.runRangeRequest();
    request.setStepId(step);
    request.setProgramHash(hash);
    request.setBegin(begin);
    request.setEnd(end);
    rpc::EncodeStepInputs(inputs, request.initInputs(static_cast<unsigned>(inputs.size())));
    auto response = rpc::ToStatusOr(request.send()).wait(io_.waitScope);
    if (!response.ok()) return response.status();
    return rpc::DecodeStepOutputs(*response, "the step");
  }

  wire::HealthState Health(wire::Actor::Client& actor, std::string* message = nullptr) {
    auto response = actor.healthRequest().send().wait(io_.waitScope);
    if (message != nullptr) *message = response.getMessage().cStr();
    return response.getState();
  }

  // Piece by piece, as the launcher reads, in pieces of at most `piece_bytes`.
  absl::StatusOr<ir::HostTensor> ReadBuffer(wire::Actor::Client& actor, const std::string& name,
                                            uint64_t piece_bytes = ir::kStatePieceBytes) {
    rpc::TensorAssembler assembler(name);
    do {
      auto request = actor.readBufferRequest();
      request.setName(name);
      request.setOffset(assembler.received());
      request.setMaxBytes(piece_bytes);
      auto response = rpc::ToStatusOr(request.send()).wait(io_.waitScope);
      if (!response.ok()) return response.status();
      if (absl::Status status = assembler.Add(response->getPiece()); !status.ok()) return status;
    } while (!assembler.complete());
    return assembler.Take();
  }

  kj::AsyncIoContext io_ = kj::setupAsyncIo();
  InMemoryNetwork network_{2};
  int run_step_calls_ = 0;
  // Last: destroyed first, which drops the services (joining their compute
  // threads) while the network they borrow still exists.
  std::vector<std::unique_ptr<rpc::RpcConnection>> connections_;
};

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

TEST_F(ActorServiceTest, StateMovesInPiecesAndReadsBackBitForBit) {
  // A state tensor of 5 MiB staged and read in pieces of 1 MiB and of the
  // largest size: no control message carries more than one piece.
  TwoStageForward programs = MakeTwoStageForward(1);
  wire::Actor::Client actor = Serve(network_.Endpoint(0));
  ASSERT_TRUE(LoadProgram(actor, programs.actor0).ok());
  ir::TensorMap state = TwoStageState();
  state["big"] = Iota(F32({5, 1 << 18}), -1.0f, 1e-5f);
  ASSERT_TRUE(LoadState(actor, state, /*piece_bytes=*/1 << 20).ok());
  for (uint64_t piece : {uint64_t{1} << 20, static_cast<uint64_t>(ir::kStatePieceBytes), uint64_t{1} << 30}) {
    for (const auto& [name, tensor] : state) {
      absl::StatusOr<ir::HostTensor> read = ReadBuffer(actor, name, piece);
      ASSERT_TRUE(read.ok()) << name << ": " << read.status();
      EXPECT_TRUE(read->BitwiseEquals(tensor)) << name << " in pieces of " << piece;
    }
  }
  // A piece asked for past the end is refused.
  auto request = actor.readBufferRequest();
  request.setName("w0");
  request.setOffset(1 << 20);
  request.setMaxBytes(16);
  absl::Status past = rpc::ToStatus(request.send().ignoreResult()).wait(io_.waitScope);
  EXPECT_EQ(past.code(), absl::StatusCode::kOutOfRange) << past;
}

TEST_F(ActorServiceTest, SeedSourcesAreGeneratedOnTheActorWithTheReferenceBits) {
  TwoStageForward programs = MakeTwoStageForward(1);
  wire::Actor::Client actor = Serve(network_.Endpoint(0));
  ASSERT_TRUE(LoadProgram(actor, programs.actor0).ok());
  const ir::TensorType type = F32({3, 4});
  const ir::Initializer normal{ir::Initializer::Kind::kNormal, 0.0, 0.02, 7};
  const ir::Initializer uniform{ir::Initializer::Kind::kUniform, -0.5, 0.5, 9};
  ASSERT_TRUE(LoadSources(actor, {{"w0", {type, normal}}, {"w1", {F32({4, 1}), uniform}}}).ok());
  absl::StatusOr<ir::HostTensor> w0 = ReadBuffer(actor, "w0");
  absl::StatusOr<ir::HostTensor> w1 = ReadBuffer(actor, "w1");
  ASSERT_TRUE(w0.ok() && w1.ok());
  EXPECT_TRUE(w0->BitwiseEquals(*ir::MakeTensor(type, normal)));
  EXPECT_TRUE(w1->BitwiseEquals(*ir::MakeTensor(F32({4, 1}), uniform)));
}

TEST_F(ActorServiceTest, AStagedTensorThatDidNotArriveWholeLeavesTheStateAsItWas) {
  TwoStageForward programs = MakeTwoStageForward(1);
  wire::Actor::Client actor = Serve(network_.Endpoint(0));
  ASSERT_TRUE(LoadProgram(actor, programs.actor0).ok());
  ASSERT_TRUE(LoadState(actor, TwoStageState()).ok());
  const ir::HostTensor replacement = Iota(F32({3, 4}), 5.0f, 1.0f);
  // Half of w0 staged, then loadState naming it staged.
  auto stage = actor.stageStateRequest();
  stage.setBinding("w0");
  ASSERT_TRUE(rpc::EncodeTensorPiece(replacement, 0, 24, stage.initPiece()).ok());
  ASSERT_TRUE(rpc::ToStatus(stage.send().ignoreResult()).wait(io_.waitScope).ok());
  absl::Status half = LoadSources(actor, ir::TensorSources({{"w0", replacement}}));
  EXPECT_EQ(half.code(), absl::StatusCode::kFailedPrecondition) << half;
  EXPECT_THAT(half.message(), HasSubstr("24 of the 48 bytes of a f32[3,4] arrived"));
  // A staged source with no piece at all.
  absl::Status none = LoadSources(actor, ir::TensorSources({{"w0", replacement}}));
  EXPECT_THAT(none.message(), HasSubstr("state 'w0' was to be staged, but no piece of it arrived"));
  // A piece that does not continue its tensor is refused as it arrives.
  auto skip = actor.stageStateRequest();
  skip.setBinding("w0");
  ASSERT_TRUE(rpc::EncodeTensorPiece(replacement, 24, 24, skip.initPiece()).ok());
  absl::Status skipped = rpc::ToStatus(skip.send().ignoreResult()).wait(io_.waitScope);
  EXPECT_EQ(skipped.code(), absl::StatusCode::kInvalidArgument) << skipped;
  EXPECT_THAT(skipped.message(), HasSubstr("the first piece is at offset 24, not 0"));
  absl::StatusOr<ir::HostTensor> w0 = ReadBuffer(actor, "w0");
  ASSERT_TRUE(w0.ok());
  EXPECT_TRUE(w0->BitwiseEquals(TwoStageState().at("w0")));
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
