// The fixture the ActorService suites share: services over capability
// pipes on an in-memory network, and the calls a controller makes, each
// waited for on the test's event loop.
#ifndef TANDEM_TESTS_ACTOR_ACTOR_SERVICE_FIXTURE_H_
#define TANDEM_TESTS_ACTOR_ACTOR_SERVICE_FIXTURE_H_

#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "actor/actor_service.h"
#include "actor/data_plane.h"
#include "actor/in_memory_transport.h"
#include "actor/thread_cluster.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/actor_program.h"
#include "ir/host_tensor.h"
#include "ir/limits.h"
#include "ir/state_source.h"
#include "kj/async-io.h"
#include "rpc/async_status.h"
#include "rpc/connection.h"
#include "rpc/program_codec.h"
#include "rpc/state_codec.h"
#include "rpc/status_convert.h"
#include "rpc/step_codec.h"
#include "tests/testing/test_programs.h"

namespace tandem::actor::testing {

namespace wire = rpc::wire;

using StepReply = ir::StepOutputs;

inline ir::TensorMap TwoStageState() {
  return {{"w0", Iota(F32({3, 4}), -0.7f, 0.13f)}, {"w1", Iota(F32({4, 1}), 0.3f, -0.21f)}};
}

inline ir::StepInputs TwoStageInputs(int32_t microbatches, int64_t step) {
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
    return Connect(kj::heap<ActorService>(transport, options, kj::mv(on_shutdown)));
  }

  // Serves a new ActorService whose transport is set up through the control
  // plane (openDataPlane / connectDataPlane).
  wire::Actor::Client ServeDataPlane(DataPlane& data_plane, ActorServiceOptions options = {}) {
    return Connect(kj::heap<ActorService>(data_plane, options, kj::Own<kj::PromiseFulfiller<void>>()));
  }

  // `service` at one end of a capability pipe; the controller's client of it
  // at the other.
  wire::Actor::Client Connect(wire::Actor::Client service) {
    kj::CapabilityPipe pipe = io_.provider->newCapabilityPipe();
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

}  // namespace tandem::actor::testing

#endif  // TANDEM_TESTS_ACTOR_ACTOR_SERVICE_FIXTURE_H_
