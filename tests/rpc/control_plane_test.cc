// The control plane in-process: controller and actors on one thread and one
// KJ event loop, connected by socket pairs or a Unix socket in a private run
// directory. Deterministic: every wait is on a promise, bounded by a timer.
#include <sys/stat.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "capnp/message.h"
#include "ir/host_tensor.h"
#include "kj/async-io.h"
#include "rpc/async_status.h"
#include "rpc/connection.h"
#include "rpc/controller_service.h"
#include "rpc/program_codec.h"
#include "rpc/status_convert.h"
#include "tests/actor/test_programs.h"

namespace tandem::rpc {
namespace {

using ::testing::HasSubstr;

constexpr char kToken[] = "job-token-0123456789abcdef";

// A fake actor: runStep answers "loss" = sum of each input's floats, counts
// its calls, and can be told to never answer (to test disconnects).
class FakeActor final : public wire::Actor::Server {
 public:
  int run_step_calls = 0;
  bool hang = false;

 protected:
  kj::Promise<void> loadProgram(LoadProgramContext context) override {
    absl::StatusOr<ir::ActorProgram> program =
        DecodeProgram(context.getParams().getProgram(), context.getParams().getHash());
    ThrowIfError(program.status());
    return kj::READY_NOW;
  }

  kj::Promise<void> runStep(RunStepContext context) override {
    ++run_step_calls;
    if (hang) return kj::NEVER_DONE;
    auto inputs = context.getParams().getInputs();
    auto results = context.getResults().initResults(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      absl::StatusOr<ir::HostTensor> tensor = DecodeTensor(inputs[i].getTensor(), "input");
      ThrowIfError(tensor.status());
      float sum = 0;
      for (float value : tensor->floats()) sum += value;
      results[i].setName("loss");
      results[i].setMicrobatch(inputs[i].getMicrobatch());
      EncodeTensor(ir::HostTensor::Scalar(sum), results[i].initTensor());
    }
    context.getResults().setPeakLiveBytes(1234);
    return kj::READY_NOW;
  }

  kj::Promise<void> health(HealthContext context) override {
    context.getResults().setState(wire::HealthState::IDLE);
    return kj::READY_NOW;
  }
};

class ControlPlaneTest : public ::testing::Test {
 protected:
  // KJ members may throw from destructors; a test fixture's must not.
  ~ControlPlaneTest() noexcept override {}

  // Wires a new actor connection to `controller_`: returns the actor's end.
  std::unique_ptr<RpcConnection> ConnectActor(wire::Actor::Client actor,
                                              const ConnectionLimits& actor_limits = {}) {
    kj::CapabilityPipe pipe = io_.provider->newCapabilityPipe();
    controller_ends_.push_back(std::make_unique<RpcConnection>(
        kj::mv(pipe.ends[0]), capnp::rpc::twoparty::Side::SERVER, controller_, controller_limits_));
    return std::make_unique<RpcConnection>(kj::mv(pipe.ends[1]), capnp::rpc::twoparty::Side::CLIENT,
                                           kj::mv(actor), actor_limits);
  }

  absl::StatusOr<wire::ActorSession::Client> RegisterOver(RpcConnection& connection, int32_t id,
                                                          absl::string_view token,
                                                          wire::Actor::Client actor) {
    return Register(connection.Bootstrap<wire::Controller>(), id, token, kj::mv(actor))
        .wait(io_.waitScope);
  }

  kj::AsyncIoContext io_ = kj::setupAsyncIo();
  std::vector<std::string> log_;
  std::map<int32_t, wire::Actor::Client> actors_;
  wire::Controller::Client controller_ = kj::heap<ControllerService>(
      kToken, 4,
      [this](int32_t id, wire::Actor::Client actor) {
        if (actors_.count(id) != 0) return absl::AlreadyExistsError("duplicate actor");
        actors_.emplace(id, kj::mv(actor));
        return absl::OkStatus();
      },
      [this](absl::string_view line) { log_.emplace_back(line); });
  ConnectionLimits controller_limits_;
  std::vector<std::unique_ptr<RpcConnection>> controller_ends_;
};

TEST_F(ControlPlaneTest, RightTokenRegistersWrongTokenIsRefusedAndLogged) {
  auto fake = kj::heap<FakeActor>();
  wire::Actor::Client actor0 = kj::mv(fake);
  std::unique_ptr<RpcConnection> good = ConnectActor(actor0);
  absl::StatusOr<wire::ActorSession::Client> session = RegisterOver(*good, 0, kToken, actor0);
  ASSERT_TRUE(session.ok()) << session.status();

  std::unique_ptr<RpcConnection> intruder = ConnectActor(kj::heap<FakeActor>());
  absl::StatusOr<wire::ActorSession::Client> refused =
      RegisterOver(*intruder, 1, "wrong-token", kj::heap<FakeActor>());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(refused.status().message(), HasSubstr("wrong job token"));
  ASSERT_EQ(log_.size(), 1u);
  EXPECT_THAT(log_[0], HasSubstr("actor 1"));
  EXPECT_EQ(actors_.count(1), 0u);

  // The registered actor is undisturbed, in both directions.
  auto id = session->actorIdRequest().send().wait(io_.waitScope);
  EXPECT_EQ(id.getActorId(), 0);
  auto health = actors_.at(0).healthRequest().send().wait(io_.waitScope);
  EXPECT_EQ(health.getState(), wire::HealthState::IDLE);
}

TEST_F(ControlPlaneTest, RunStepIsOneCallPerStepAndReturnsResults) {
  auto fake = kj::heap<FakeActor>();
  FakeActor& fake_ref = *fake;
  wire::Actor::Client local = kj::mv(fake);
  std::unique_ptr<RpcConnection> end = ConnectActor(local);
  ASSERT_TRUE(RegisterOver(*end, 2, kToken, kj::mv(local)).ok());

  // The actor's capability as the controller got it at registration.
  wire::Actor::Client actor = actors_.at(2);
  for (uint64_t step = 0; step < 3; ++step) {
    auto request = actor.runStepRequest();
    request.setStepId(step);
    auto inputs = request.initInputs(2);
    for (int32_t m = 0; m < 2; ++m) {
      inputs[m].setName("x");
      inputs[m].setMicrobatch(m);
      EncodeTensor(ir::HostTensor::FromFloats({3}, {1.f, 2.f, float(m + step)}),
                   inputs[m].initTensor());
    }
    auto response = ToStatusOr(request.send()).wait(io_.waitScope);
    ASSERT_TRUE(response.ok()) << response.status();
    ASSERT_EQ(response->getResults().size(), 2u);
    absl::StatusOr<ir::HostTensor> loss = DecodeTensor(response->getResults()[1].getTensor(), "loss");
    ASSERT_TRUE(loss.ok()) << loss.status();
    EXPECT_EQ(loss->floats()[0], 3.f + 1 + step);
    EXPECT_EQ(response->getPeakLiveBytes(), 1234);
  }
  EXPECT_EQ(fake_ref.run_step_calls, 3);
}

TEST_F(ControlPlaneTest, ServerErrorsArriveWithTheirAbslCode) {
  wire::Actor::Client local = kj::heap<FakeActor>();
  std::unique_ptr<RpcConnection> end = ConnectActor(local);
  ASSERT_TRUE(RegisterOver(*end, 0, kToken, kj::mv(local)).ok());
  ir::ActorProgram program = actor::testing::MakeTwoStageForward(2).actor0;
  auto request = actors_.at(0).loadProgramRequest();
  EncodeProgram(program, request.initProgram());
  request.setHash(ir::HashActorProgram(program) ^ 1);
  auto status = ToStatus(request.send().ignoreResult()).wait(io_.waitScope);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("sent under"));

  auto retry = actors_.at(0).loadProgramRequest();  // a sent request is consumed
  EncodeProgram(program, retry.initProgram());
  retry.setHash(ir::HashActorProgram(program));
  EXPECT_TRUE(ToStatus(retry.send().ignoreResult()).wait(io_.waitScope).ok());
}

TEST_F(ControlPlaneTest, SenderRefusesAMessageAboveTheLimitAndTheConnectionSurvives) {
  wire::Actor::Client local = kj::heap<FakeActor>();
  std::unique_ptr<RpcConnection> end = ConnectActor(local);
  ASSERT_TRUE(RegisterOver(*end, 0, kToken, kj::mv(local)).ok());
  wire::Actor::Client actor = actors_.at(0);

  auto big = actor.runStepRequest();
  auto input = big.initInputs(1)[0];
  input.setName("x");
  auto tensor = input.initTensor();
  EncodeTensorType({ir::DType::kF32, {int64_t{17} << 20}}, tensor.initType());
  tensor.initData(kDefaultMaxMessageBytes + (4 << 20));  // 68 MiB > 64 MiB
  auto refused = ToStatusOr(kj::evalNow([&]() -> kj::Promise<capnp::Response<wire::Actor::RunStepResults>> {
                                   return big.send();
                                 })).wait(io_.waitScope);
  EXPECT_FALSE(refused.ok());

  auto small = actor.runStepRequest();
  EncodeTensor(ir::HostTensor::Scalar(1.f), small.initInputs(1)[0].initTensor());
  EXPECT_TRUE(ToStatusOr(small.send()).wait(io_.waitScope).ok());
}

TEST_F(ControlPlaneTest, ReceiverDropsAnOversizedMessageWithoutDisturbingOthers) {
  absl::StatusOr<std::string> directory = MakePrivateRunDirectory();
  ASSERT_TRUE(directory.ok()) << directory.status();
  std::string path = *directory + "/control.sock";
  ConnectionLimits small_limits;
  small_limits.max_message_bytes = 1 << 20;
  {
    auto listener = UnixListener::Listen(io_, path);
    ASSERT_TRUE(listener.ok()) << listener.status();
    ControlServer server(*std::move(listener), controller_, small_limits,
                         [this](absl::string_view line) { log_.emplace_back(line); });
    kj::Promise<void> serving = server.Run().eagerlyEvaluate(nullptr);

    auto connect = [&](const ConnectionLimits& limits) {
      auto stream = ConnectUnix(io_, path);
      EXPECT_TRUE(stream.ok()) << stream.status();
      return std::make_unique<RpcConnection>(*std::move(stream), capnp::rpc::twoparty::Side::CLIENT,
                                             kj::heap<FakeActor>(), limits);
    };
    std::unique_ptr<RpcConnection> honest = connect(small_limits);
    auto session = RegisterOver(*honest, 0, kToken, kj::heap<FakeActor>());
    ASSERT_TRUE(session.ok()) << session.status();

    // A client with looser limits sends 2 MiB: the controller's side drops it.
    ConnectionLimits loose;
    loose.max_message_bytes = 64 << 20;
    std::unique_ptr<RpcConnection> rogue = connect(loose);
    std::string huge_token(2 << 20, 'x');
    auto dropped = ToStatusOrWithin(io_.provider->getTimer(), 5 * kj::SECONDS, "register",
                                    Register(rogue->Bootstrap<wire::Controller>(), 1, huge_token,
                                             kj::heap<FakeActor>()))
                       .wait(io_.waitScope);
    ASSERT_TRUE(dropped.ok());  // the outer promise; the inner StatusOr is the result
    EXPECT_FALSE(dropped->ok());
    EXPECT_EQ(dropped->status().code(), absl::StatusCode::kUnavailable) << dropped->status();

    // The honest actor keeps working in both directions.
    EXPECT_EQ((*session).actorIdRequest().send().wait(io_.waitScope).getActorId(), 0);
    EXPECT_EQ(actors_.at(0).healthRequest().send().wait(io_.waitScope).getState(),
              wire::HealthState::IDLE);
  }
  rmdir(directory->c_str());
}

TEST_F(ControlPlaneTest, DisconnectFailsAPendingCallWithUnavailableQuickly) {
  auto fake = kj::heap<FakeActor>();
  fake->hang = true;
  wire::Actor::Client local = kj::mv(fake);
  std::unique_ptr<RpcConnection> end = ConnectActor(local);
  ASSERT_TRUE(RegisterOver(*end, 3, kToken, kj::mv(local)).ok());

  kj::Timer& timer = io_.provider->getTimer();
  auto pending = ToStatusOrWithin(timer, 5 * kj::SECONDS, "actor 3 runStep",
                                  actors_.at(3).runStepRequest().send())
                     .eagerlyEvaluate(nullptr);
  // Let the call reach the actor, then the actor's process "dies".
  timer.afterDelay(10 * kj::MILLISECONDS).wait(io_.waitScope);
  kj::TimePoint start = timer.now();
  end.reset();
  auto result = pending.wait(io_.waitScope);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kUnavailable) << result.status();
  EXPECT_LT(timer.now() - start, 1 * kj::SECONDS);
}

TEST(PrivateRunDirectory, IsMode0700AndOthersAreRejected) {
  absl::StatusOr<std::string> directory = MakePrivateRunDirectory();
  ASSERT_TRUE(directory.ok()) << directory.status();
  struct stat info;
  ASSERT_EQ(stat(directory->c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 07777, 0700u);
  EXPECT_TRUE(CheckPrivateDirectory(*directory).ok());
  chmod(directory->c_str(), 0755);
  EXPECT_EQ(CheckPrivateDirectory(*directory).code(), absl::StatusCode::kFailedPrecondition);
  kj::AsyncIoContext io = kj::setupAsyncIo();
  EXPECT_EQ(UnixListener::Listen(io, *directory + "/control.sock").status().code(),
            absl::StatusCode::kInvalidArgument);
  rmdir(directory->c_str());
}

}  // namespace
}  // namespace tandem::rpc
