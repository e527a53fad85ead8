// The control plane in-process: controller and actors on one thread and one
// KJ event loop, connected by socket pairs, a Unix socket in a private run
// directory, or TCP on loopback. Registration is a challenge-response: right
// and wrong tokens, replayed, unknown and malformed answers, and the bytes
// on the socket, which never hold the token. Deterministic: every wait is on
// a promise, bounded by a timer.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "capnp/message.h"
#include "ir/host_tensor.h"
#include "kj/async-io.h"
#include "rpc/async_status.h"
#include "rpc/auth.h"
#include "rpc/connection.h"
#include "rpc/control_tls.h"
#include "rpc/controller_service.h"
#include "rpc/program_codec.h"
#include "rpc/status_convert.h"
#include "tests/testing/recording_relay.h"
#include "tests/testing/test_programs.h"

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
  std::vector<RegistrationRefusal> refusals_;
  // The job's service: registrations land in actors_, refusals in
  // refusals_ and log_.
  kj::Own<ControllerService> NewService() {
    return kj::heap<ControllerService>(
        kToken, 4,
        [this](int32_t id, absl::string_view, wire::Actor::Client actor) {
          if (actors_.count(id) != 0) return absl::AlreadyExistsError("duplicate actor");
          actors_.emplace(id, kj::mv(actor));
          return absl::OkStatus();
        },
        [this](RegistrationRefusal refusal, absl::string_view line) {
          refusals_.push_back(refusal);
          log_.emplace_back(line);
        });
  }
  // The TCP control plane's TLS, as a launcher makes it.
  std::shared_ptr<kj::TlsContext> ServerTls(absl::Duration handshake_timeout = kTlsHandshakeTimeout) {
    absl::StatusOr<std::shared_ptr<kj::TlsContext>> tls =
        ControllerTls(identity_, io_.provider->getTimer(), handshake_timeout);
    EXPECT_TRUE(tls.ok()) << tls.status();
    return tls.ok() ? *tls : nullptr;
  }
  absl::StatusOr<ControlStream> DialTcp(const std::string& address, const std::string& certificate_pem) {
    return ToStatusOr(DialController(io_, ControlPlaneKind::kTcp, address, absl::Seconds(5), certificate_pem))
        .wait(io_.waitScope);
  }

  const ControllerIdentity identity_ = *MakeControllerIdentity();
  wire::Controller::Client controller_ = NewService();
  ConnectionLimits controller_limits_;
  std::vector<std::unique_ptr<RpcConnection>> controller_ends_;
};

TEST_F(ControlPlaneTest, RightTokenRegistersWrongTokenIsRefusedAndLogged) {
  auto fake = kj::heap<FakeActor>();
  wire::Actor::Client actor0 = kj::mv(fake);
  std::unique_ptr<RpcConnection> good = ConnectActor(actor0);
  absl::StatusOr<wire::ActorSession::Client> session = RegisterOver(*good, 0, kToken, actor0);
  ASSERT_TRUE(session.ok()) << session.status();

  // An intruder without the token: it takes a challenge (it need not check
  // the controller's proof) and answers it with the wrong token.
  std::unique_ptr<RpcConnection> intruder = ConnectActor(kj::heap<FakeActor>());
  absl::StatusOr<std::string> nonce =
      RequestChallenge(intruder->Bootstrap<wire::Controller>(), 1, kToken).wait(io_.waitScope);
  ASSERT_TRUE(nonce.ok()) << nonce.status();
  absl::StatusOr<Proof> wrong = ProveRegistration("wrong-token", AsBytes(*nonce), 1);
  ASSERT_TRUE(wrong.ok());
  absl::StatusOr<wire::ActorSession::Client> refused =
      SendRegistration(intruder->Bootstrap<wire::Controller>(), 1, AsBytes(*nonce), *wrong, kj::heap<FakeActor>())
          .wait(io_.waitScope);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(refused.status().message(), HasSubstr("wrong proof"));
  ASSERT_EQ(log_.size(), 1u);
  EXPECT_THAT(log_[0], HasSubstr("registration of actor 1 refused: wrong proof"));
  EXPECT_THAT(refusals_, ::testing::ElementsAre(RegistrationRefusal::kWrongProof));
  EXPECT_EQ(actors_.count(1), 0u);

  // The registered actor is undisturbed, in both directions.
  auto id = session->actorIdRequest().send().wait(io_.waitScope);
  EXPECT_EQ(id.getActorId(), 0);
  auto health = actors_.at(0).healthRequest().send().wait(io_.waitScope);
  EXPECT_EQ(health.getState(), wire::HealthState::IDLE);
}

// Authentication is mutual: an actor registers only with a controller
// that answers the actor's own nonce with the job's token. One of another
// job (another token) is refused before the actor hands anything over, so
// that controller registers nobody and sees no proof of this job's token.
TEST_F(ControlPlaneTest, AnActorRefusesAControllerThatCannotProveTheToken) {
  int registered = 0;
  wire::Controller::Client impostor = kj::heap<ControllerService>(
      "another-job's-token", 4,
      [&](int32_t, absl::string_view, wire::Actor::Client) {
        ++registered;
        return absl::OkStatus();
      },
      [](RegistrationRefusal, absl::string_view) {});
  kj::CapabilityPipe pipe = io_.provider->newCapabilityPipe();
  RpcConnection impostor_end(kj::mv(pipe.ends[0]), capnp::rpc::twoparty::Side::SERVER, impostor, {});
  RpcConnection actor_end(kj::mv(pipe.ends[1]), capnp::rpc::twoparty::Side::CLIENT, kj::heap<FakeActor>(), {});
  absl::StatusOr<wire::ActorSession::Client> session =
      RegisterOver(actor_end, 0, kToken, kj::heap<FakeActor>());
  EXPECT_EQ(session.status().code(), absl::StatusCode::kPermissionDenied) << session.status();
  EXPECT_THAT(session.status().message(), HasSubstr("the controller did not prove it holds the job's token"));
  EXPECT_EQ(registered, 0);
}

TEST_F(ControlPlaneTest, AChallengeWithoutTheActorsNonceIsRefused) {
  std::unique_ptr<RpcConnection> connection = ConnectActor(kj::heap<FakeActor>());
  auto request = connection->Bootstrap<wire::Controller>().challengeRequest();
  request.setActorId(0);
  auto response = ToStatusOr(request.send()).wait(io_.waitScope);
  EXPECT_EQ(response.status().code(), absl::StatusCode::kInvalidArgument) << response.status();
  EXPECT_THAT(response.status().message(), HasSubstr("a challenge needs the actor's own nonce"));
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
    ControlServer server(*std::move(listener), NewService(), small_limits,
                         [this](absl::string_view line) { log_.emplace_back(line); }, io_.provider->getTimer());
    kj::Promise<void> serving = server.Run().eagerlyEvaluate(nullptr);

    auto connect = [&](const ConnectionLimits& limits) {
      auto stream = ConnectUnix(io_, path);
      EXPECT_TRUE(stream.ok()) << stream.status();
      return std::make_unique<RpcConnection>(ControlStream::Unix(*std::move(stream)),
                                             capnp::rpc::twoparty::Side::CLIENT, kj::heap<FakeActor>(), limits);
    };
    std::unique_ptr<RpcConnection> honest = connect(small_limits);
    auto session = RegisterOver(*honest, 0, kToken, kj::heap<FakeActor>());
    ASSERT_TRUE(session.ok()) << session.status();

    // A client with looser limits sends 2 MiB: the controller's side drops it.
    ConnectionLimits loose;
    loose.max_message_bytes = 64 << 20;
    std::unique_ptr<RpcConnection> rogue = connect(loose);
    const std::vector<uint8_t> huge_proof(2 << 20, 'x');
    auto dropped = ToStatusOrWithin(io_.provider->getTimer(), 5 * kj::SECONDS, "register",
                                    SendRegistration(rogue->Bootstrap<wire::Controller>(), 1, huge_proof,
                                                     huge_proof, kj::heap<FakeActor>()))
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

TEST_F(ControlPlaneTest, ReplayedUnknownAndMalformedAnswersAreRefusedLoggedAndCounted) {
  std::vector<std::unique_ptr<RpcConnection>> connections;  // an actor lives as long as its connection
  auto register_with = [&](int32_t id, Bytes nonce, Bytes proof) {
    connections.push_back(ConnectActor(kj::heap<FakeActor>()));
    absl::StatusOr<wire::ActorSession::Client> session =
        SendRegistration(connections.back()->Bootstrap<wire::Controller>(), id, nonce, proof,
                         kj::heap<FakeActor>())
            .wait(io_.waitScope);
    return session.status();
  };
  auto fresh_nonce = [&] {
    std::unique_ptr<RpcConnection> connection = ConnectActor(kj::heap<FakeActor>());
    absl::StatusOr<std::string> nonce = RequestChallenge(connection->Bootstrap<wire::Controller>(), 0, kToken).wait(io_.waitScope);
    EXPECT_TRUE(nonce.ok()) << nonce.status();
    EXPECT_EQ(nonce->size(), kNonceBytes);
    return *nonce;
  };
  auto prove = [](const std::string& nonce, int32_t id, absl::string_view token = kToken) {
    absl::StatusOr<Proof> proof = ProveRegistration(token, AsBytes(nonce), id);
    EXPECT_TRUE(proof.ok()) << proof.status();
    return *proof;
  };

  // The honest registration, step by step.
  const std::string nonce = fresh_nonce();
  const Proof proof = prove(nonce, 0);
  ASSERT_TRUE(register_with(0, AsBytes(nonce), proof).ok());
  EXPECT_TRUE(refusals_.empty());

  // Its answer, replayed by someone who saw it go by.
  absl::Status replayed = register_with(0, AsBytes(nonce), proof);
  EXPECT_EQ(replayed.code(), absl::StatusCode::kPermissionDenied) << replayed;
  EXPECT_THAT(replayed.message(), HasSubstr("a replay"));
  // A correct answer to a challenge this controller never issued.
  Nonce made_up;
  made_up.fill(0x42);
  absl::Status unknown = register_with(1, made_up, prove(std::string(made_up.begin(), made_up.end()), 1));
  EXPECT_EQ(unknown.code(), absl::StatusCode::kPermissionDenied) << unknown;
  EXPECT_THAT(unknown.message(), HasSubstr("never issued"));
  // Sizes from the wire: a short challenge, an empty answer.
  const std::string short_nonce = fresh_nonce().substr(0, 5);
  absl::Status malformed = register_with(1, AsBytes(short_nonce), prove(fresh_nonce(), 1));
  EXPECT_EQ(malformed.code(), absl::StatusCode::kInvalidArgument) << malformed;
  EXPECT_THAT(malformed.message(), HasSubstr("a challenge of 5 bytes"));
  EXPECT_EQ(register_with(1, AsBytes(fresh_nonce()), {}).code(), absl::StatusCode::kInvalidArgument);
  // An answer made for another actor, or with another token.
  const std::string for_two = fresh_nonce();
  EXPECT_EQ(register_with(1, AsBytes(for_two), prove(for_two, 2)).code(), absl::StatusCode::kPermissionDenied);
  const std::string other_token = fresh_nonce();
  EXPECT_EQ(register_with(1, AsBytes(other_token), prove(other_token, 1, "not-the-token")).code(),
            absl::StatusCode::kPermissionDenied);
  // Proven, but not an actor of the job, or one registered already.
  const std::string outside = fresh_nonce();
  EXPECT_EQ(register_with(7, AsBytes(outside), prove(outside, 7)).code(), absl::StatusCode::kInvalidArgument);
  const std::string again = fresh_nonce();
  EXPECT_EQ(register_with(0, AsBytes(again), prove(again, 0)).code(), absl::StatusCode::kAlreadyExists);

  using R = RegistrationRefusal;
  EXPECT_THAT(refusals_, ::testing::ElementsAre(R::kReplayedChallenge, R::kStaleChallenge, R::kMalformed,
                                                R::kMalformed, R::kWrongProof, R::kWrongProof, R::kRejected,
                                                R::kRejected));
  ASSERT_EQ(log_.size(), refusals_.size());
  for (const std::string& line : log_) EXPECT_THAT(line, HasSubstr("refused")) << line;
  // The honest actor is undisturbed.
  EXPECT_EQ(actors_.at(0).healthRequest().send().wait(io_.waitScope).getState(), wire::HealthState::IDLE);
}

TEST(ControllerService, AChallengeExpires) {
  kj::AsyncIoContext io = kj::setupAsyncIo();
  std::vector<RegistrationRefusal> refusals;
  wire::Controller::Client controller = kj::heap<ControllerService>(
      kToken, 1, [](int32_t, absl::string_view, wire::Actor::Client) { return absl::OkStatus(); },
      [&](RegistrationRefusal refusal, absl::string_view) { refusals.push_back(refusal); },
      ChallengeBook::Options{.lifetime = absl::Milliseconds(50)});
  absl::StatusOr<std::string> nonce = RequestChallenge(controller, 0, kToken).wait(io.waitScope);
  ASSERT_TRUE(nonce.ok());
  io.provider->getTimer().afterDelay(100 * kj::MILLISECONDS).wait(io.waitScope);
  absl::StatusOr<Proof> proof = ProveRegistration(kToken, AsBytes(*nonce), 0);
  ASSERT_TRUE(proof.ok());
  absl::StatusOr<wire::ActorSession::Client> late =
      SendRegistration(controller, 0, AsBytes(*nonce), *proof, kj::heap<FakeActor>()).wait(io.waitScope);
  EXPECT_EQ(late.status().code(), absl::StatusCode::kPermissionDenied) << late.status();
  EXPECT_THAT(late.status().message(), HasSubstr("expired"));
  EXPECT_THAT(refusals, ::testing::ElementsAre(RegistrationRefusal::kStaleChallenge));
}

// Over TCP on loopback, through a relay that keeps every byte: the actor
// registers and is driven, and the token is nowhere on the socket while
// the challenge and its answer are.
TEST_F(ControlPlaneTest, TcpRegistrationWorksAndTheTokenNeverCrossesTheSocket) {
  absl::StatusOr<std::unique_ptr<TcpListener>> listener = TcpListener::Listen(io_, "127.0.0.1", ServerTls());
  ASSERT_TRUE(listener.ok()) << listener.status();
  EXPECT_GT((*listener)->port(), 0);
  EXPECT_EQ((*listener)->address(), absl::StrCat("127.0.0.1:", (*listener)->port()));
  test::RecordingRelay relay((*listener)->address());
  ControlServer server(*std::move(listener), NewService(), controller_limits_,
                       [this](absl::string_view line) { log_.emplace_back(line); }, io_.provider->getTimer());
  kj::Promise<void> serving = server.Run().eagerlyEvaluate(nullptr);

  absl::StatusOr<ControlStream> stream = DialTcp(relay.address(), identity_.certificate_pem);
  ASSERT_TRUE(stream.ok()) << stream.status();
  EXPECT_EQ(stream->unix_socket, nullptr);
  RpcConnection connection(*std::move(stream), capnp::rpc::twoparty::Side::CLIENT, kj::heap<FakeActor>(), {});
  absl::StatusOr<wire::ActorSession::Client> session =
      RegisterOver(connection, 3, kToken, kj::heap<FakeActor>());
  ASSERT_TRUE(session.ok()) << session.status();
  EXPECT_EQ(session->actorIdRequest().send().wait(io_.waitScope).getActorId(), 3);
  EXPECT_EQ(actors_.at(3).healthRequest().send().wait(io_.waitScope).getState(), wire::HealthState::IDLE);
  // A step whose input name would show in a plain Cap'n Proto frame.
  auto request = actors_.at(3).runStepRequest();
  auto inputs = request.initInputs(1);
  inputs[0].setName("an-input-name-in-the-clear");
  EncodeTensor(ir::HostTensor::FromFloats({2}, {1.f, 2.f}), inputs[0].initTensor());
  auto response = ToStatusOr(request.send()).wait(io_.waitScope);
  ASSERT_TRUE(response.ok()) << response.status();

  EXPECT_EQ(relay.connections(), 1);
  EXPECT_GT(relay.total_bytes(), 2 * static_cast<int64_t>(kNonceBytes));
  EXPECT_FALSE(relay.Carried(kToken));
  EXPECT_FALSE(relay.Carried(std::string(kToken).substr(0, 12)));
  // TLS: the frames are encrypted.
  EXPECT_FALSE(relay.Carried("an-input-name-in-the-clear"));
  EXPECT_TRUE(log_.empty());
}

// Over TCP an actor trusts the job's controller certificate alone: a
// controller with another identity (another job's, an impostor's) fails
// the TLS handshake, before any registration.
TEST_F(ControlPlaneTest, TcpActorsRefuseAControllerWithAnotherCertificate) {
  absl::StatusOr<std::unique_ptr<TcpListener>> listener = TcpListener::Listen(io_, "127.0.0.1", ServerTls());
  ASSERT_TRUE(listener.ok()) << listener.status();
  const std::string address = (*listener)->address();
  ControlServer server(*std::move(listener), NewService(), controller_limits_,
                       [this](absl::string_view line) { log_.emplace_back(line); }, io_.provider->getTimer());
  kj::Promise<void> serving = server.Run().eagerlyEvaluate(nullptr);
  absl::StatusOr<ControllerIdentity> other = MakeControllerIdentity();
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_NE(other->certificate_pem, identity_.certificate_pem);
  absl::StatusOr<ControlStream> stream = DialTcp(address, other->certificate_pem);
  EXPECT_EQ(stream.status().code(), absl::StatusCode::kPermissionDenied) << stream.status();
  EXPECT_THAT(stream.status().message(), HasSubstr("the TLS handshake with the controller at " + address));
  EXPECT_TRUE(actors_.empty());

  // No certificate, or one that is no certificate, is refused before dialing.
  EXPECT_THAT(DialTcp(address, "").status().message(), HasSubstr("no controller certificate"));
  EXPECT_EQ(DialTcp(address, "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(DialTcp(address, std::string(kMaxCertificateBytes + 1, 'x')).status().message(),
              HasSubstr("more than"));
}

// A connection that never completes its TLS handshake is dropped after the
// handshake timeout, and meanwhile others connect and register: no
// handshake holds up the accepting.
TEST_F(ControlPlaneTest, ASilentTcpConnectionNeitherBlocksOthersNorLingers) {
  absl::StatusOr<std::unique_ptr<TcpListener>> listener =
      TcpListener::Listen(io_, "127.0.0.1", ServerTls(absl::Seconds(1)));
  ASSERT_TRUE(listener.ok()) << listener.status();
  const std::string address = (*listener)->address();
  ControlServer server(*std::move(listener), NewService(), controller_limits_,
                       [this](absl::string_view line) { log_.emplace_back(line); }, io_.provider->getTimer());
  kj::Promise<void> serving = server.Run().eagerlyEvaluate(nullptr);
  auto silent = io_.provider->getNetwork()
                    .parseAddress(kj::StringPtr(address.c_str()))
                    .then([](kj::Own<kj::NetworkAddress> resolved) { return resolved->connect().attach(kj::mv(resolved)); })
                    .wait(io_.waitScope);

  absl::StatusOr<ControlStream> stream = DialTcp(address, identity_.certificate_pem);
  ASSERT_TRUE(stream.ok()) << stream.status();
  RpcConnection connection(*std::move(stream), capnp::rpc::twoparty::Side::CLIENT, kj::heap<FakeActor>(), {});
  EXPECT_TRUE(RegisterOver(connection, 1, kToken, kj::heap<FakeActor>()).ok());

  // The silent one is hung up on once its handshake time is over.
  char byte;
  const size_t read = silent->tryRead(&byte, 1, 1).wait(io_.waitScope);
  EXPECT_EQ(read, 0u);
  ASSERT_FALSE(log_.empty());
  EXPECT_THAT(log_[0], HasSubstr("timed out"));
}

// Issue 41, finding 7: a Unix control socket held open by something that
// never registers is closed at its deadline, as TLS's handshake timeout
// closes one over TCP; an actor that registers in time keeps its own.
TEST_F(ControlPlaneTest, AConnectionThatNeverRegistersIsClosedAtItsDeadline) {
  absl::StatusOr<std::string> directory = MakePrivateRunDirectory();
  ASSERT_TRUE(directory.ok()) << directory.status();
  const std::string path = *directory + "/control.sock";
  {
    absl::StatusOr<std::unique_ptr<UnixListener>> listener = UnixListener::Listen(io_, path);
    ASSERT_TRUE(listener.ok()) << listener.status();
    ControlServer server(*std::move(listener), NewService(), controller_limits_,
                         [this](absl::string_view line) { log_.emplace_back(line); }, io_.provider->getTimer(),
                         absl::Milliseconds(300));
    kj::Promise<void> serving = server.Run().eagerlyEvaluate(nullptr);
    absl::StatusOr<kj::Own<kj::AsyncCapabilityStream>> idle = ConnectUnix(io_, path);
    ASSERT_TRUE(idle.ok()) << idle.status();
    absl::StatusOr<kj::Own<kj::AsyncCapabilityStream>> actor_stream = ConnectUnix(io_, path);
    ASSERT_TRUE(actor_stream.ok()) << actor_stream.status();
    RpcConnection connection(ControlStream::Unix(*std::move(actor_stream)), capnp::rpc::twoparty::Side::CLIENT,
                             kj::heap<FakeActor>(), {});
    EXPECT_TRUE(RegisterOver(connection, 1, kToken, kj::heap<FakeActor>()).ok());

    // The idle one reads end of file once its deadline passed, well within
    // the bound of this wait.
    char byte;
    const size_t read = (*idle)
                            ->tryRead(&byte, 1, 1)
                            .exclusiveJoin(io_.provider->getTimer().afterDelay(10 * kj::SECONDS).then([]() -> size_t {
                              return 99;
                            }))
                            .wait(io_.waitScope);
    EXPECT_EQ(read, 0u) << "the idle connection is still open after 10 s";
    EXPECT_THAT(log_, ::testing::Contains(HasSubstr("no actor registered over it within 300ms")));
    // The registered actor's connection outlived the deadline.
    io_.provider->getTimer().afterDelay(500 * kj::MILLISECONDS).wait(io_.waitScope);
    EXPECT_EQ(server.connections(), 1);
  }
  std::filesystem::remove_all(*directory);
}

TEST_F(ControlPlaneTest, DialingABadOrDeadControllerIsAClearError) {
  auto dial = [&](ControlPlaneKind kind, const std::string& address) {
    return ToStatusOr(DialController(io_, kind, address, absl::Seconds(5), identity_.certificate_pem))
        .wait(io_.waitScope)
        .status();
  };
  absl::Status malformed = dial(ControlPlaneKind::kTcp, "localhost");
  EXPECT_EQ(malformed.code(), absl::StatusCode::kInvalidArgument) << malformed;
  EXPECT_THAT(malformed.message(), HasSubstr("'localhost' is not host:port"));
  EXPECT_EQ(dial(ControlPlaneKind::kTcp, "127.0.0.1:0").code(), absl::StatusCode::kInvalidArgument);

  // A port nobody listens on (bound, then closed).
  int port = 0;
  {
    absl::StatusOr<std::unique_ptr<TcpListener>> closed = TcpListener::Listen(io_, "127.0.0.1", ServerTls());
    ASSERT_TRUE(closed.ok());
    port = (*closed)->port();
  }
  const std::string address = absl::StrCat("127.0.0.1:", port);
  absl::Status refused = dial(ControlPlaneKind::kTcp, address);
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable) << refused;
  EXPECT_THAT(refused.message(), HasSubstr("cannot reach the controller at " + address));

  absl::Status no_socket = dial(ControlPlaneKind::kUnix, "/nonexistent/controller.sock");
  EXPECT_EQ(no_socket.code(), absl::StatusCode::kUnavailable) << no_socket;
  EXPECT_THAT(no_socket.message(), HasSubstr("/nonexistent/controller.sock"));

  EXPECT_EQ(TcpListener::Listen(io_, "no-such-host.invalid", ServerTls()).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(TcpListener::Listen(io_, "127.0.0.1", nullptr).status().message(),
              HasSubstr("needs the controller's TLS identity"));
}

}  // namespace
}  // namespace tandem::rpc
