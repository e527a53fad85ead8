// tandem-actor as a process, against a controller played by this test (a
// ControlServer on a Unix socket in a private directory, or on TCP on
// loopback): it registers by answering the challenge with the job's token,
// is refused with a wrong one, says clearly what is wrong with a malformed
// or unreachable controller address, and exits by itself soon after the
// controller's connection drops. Every wait is bounded; the ProcessGroup
// reaps every child on every path.
#include <unistd.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "actor/actor_process.h"
#include "controller/process_group.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kj/async-io.h"
#include "rpc/connection.h"
#include "rpc/control_tls.h"
#include "rpc/controller_service.h"

namespace tandem::actor {
namespace {

using ::testing::HasSubstr;

constexpr char kToken[] = "0123456789abcdef0123456789abcdef";

class ActorProcessTest : public ::testing::Test {
 protected:
  ~ActorProcessTest() noexcept override {
    server_.reset();
    if (!directory_.empty()) {
      unlink(socket_.c_str());
      rmdir(directory_.c_str());
    }
  }

  // Listens as the controller of a one-actor job.
  void Listen(rpc::ControlPlaneKind kind = rpc::ControlPlaneKind::kUnix) {
    kind_ = kind;
    std::unique_ptr<rpc::ControlListener> listener;
    if (kind == rpc::ControlPlaneKind::kUnix) {
      absl::StatusOr<std::string> directory = rpc::MakePrivateRunDirectory();
      ASSERT_TRUE(directory.ok()) << directory.status();
      directory_ = *directory;
      socket_ = absl::StrCat(directory_, "/controller.sock");
      absl::StatusOr<std::unique_ptr<rpc::UnixListener>> unix_listener = rpc::UnixListener::Listen(io_, socket_);
      ASSERT_TRUE(unix_listener.ok()) << unix_listener.status();
      listener = *std::move(unix_listener);
    } else {
      absl::StatusOr<std::unique_ptr<rpc::TcpListener>> tcp_listener =
          rpc::TcpListener::Listen(io_, "127.0.0.1", ServerTls());
      ASSERT_TRUE(tcp_listener.ok()) << tcp_listener.status();
      socket_ = (*tcp_listener)->address();
      listener = *std::move(tcp_listener);
    }
    auto on_register = [this](int32_t, absl::string_view, rpc::wire::Actor::Client) {
      ++registered_;
      return absl::OkStatus();
    };
    auto log = [this](absl::string_view line) { log_.emplace_back(line); };
    auto on_refusal = [this](rpc::RegistrationRefusal, absl::string_view line) { log_.emplace_back(line); };
    server_ = std::make_unique<rpc::ControlServer>(
        std::move(listener), kj::heap<rpc::ControllerService>(kToken, 1, on_register, on_refusal),
        rpc::ConnectionLimits{}, log, io_.provider->getTimer());
    serving_ = server_->Run().eagerlyEvaluate(nullptr);
  }

  // The TCP control plane's TLS with identity_.
  std::shared_ptr<kj::TlsContext> ServerTls() {
    absl::StatusOr<std::shared_ptr<kj::TlsContext>> tls =
        rpc::ControllerTls(identity_, io_.provider->getTimer(), rpc::kTlsHandshakeTimeout);
    EXPECT_TRUE(tls.ok()) << tls.status();
    return tls.ok() ? *tls : nullptr;
  }

  // Starts tandem-actor as actor 0 of 1 with `token` (and over TCP
  // `certificate`, default identity_'s), told to dial the controller at
  // `address` (default: where Listen listens).
  void StartActor(const std::string& token, std::optional<std::string> address = std::nullopt,
                  std::optional<std::string> certificate = std::nullopt) {
    controller::ProcessSpec spec{
        .program = TANDEM_ACTOR_BINARY,
        .args = {"--control", std::string(rpc::ControlPlaneKindName(kind_)), "--controller", address.value_or(socket_),
                 "--actor", "0", "--actors", "1"},
        .environment = {{"TANDEM_JOB_TOKEN", token},
                        {"TANDEM_CONTROLLER_CERT", certificate.value_or(identity_.certificate_pem)}}};
    controller::ProcessGroupOptions options;
    options.sink = [this](absl::string_view line) {
      absl::MutexLock lock(&output_mu_);
      output_.emplace_back(line);
    };
    absl::StatusOr<std::unique_ptr<controller::ProcessGroup>> group =
        controller::ProcessGroup::Start({spec}, std::move(options));
    ASSERT_TRUE(group.ok()) << group.status();
    group_ = *std::move(group);
  }

  // Runs the event loop until `done()` or `timeout`.
  template <typename Done>
  bool RunUntil(Done done, absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    while (!done()) {
      if (absl::Now() > deadline) return false;
      io_.provider->getTimer().afterDelay(10 * kj::MILLISECONDS).wait(io_.waitScope);
    }
    return true;
  }

  std::string Output() {
    absl::MutexLock lock(&output_mu_);
    std::string all;
    for (const std::string& line : output_) absl::StrAppend(&all, line, "\n");
    return all;
  }
  // Output() once it holds `text`, or after 10 s: an actor's last line may
  // reach the reader thread after its exit is seen.
  std::string OutputWith(const std::string& text) {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    std::string all = Output();
    while (all.find(text) == std::string::npos && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(10));
      all = Output();
    }
    return all;
  }

  // The exit of the actor, once it ended within `timeout` (the loop runs
  // meanwhile).
  std::optional<controller::ExitInfo> AwaitExit(absl::Duration timeout) {
    std::optional<controller::ExitInfo> exit;
    RunUntil(
        [&] {
          exit = group_->Poll();
          return exit.has_value();
        },
        timeout);
    return exit;
  }

  kj::AsyncIoContext io_ = kj::setupAsyncIo();
  rpc::ControlPlaneKind kind_ = rpc::ControlPlaneKind::kUnix;
  std::string directory_;
  std::string socket_;  // or host:port
  const rpc::ControllerIdentity identity_ = *rpc::MakeControllerIdentity();
  std::unique_ptr<rpc::ControlServer> server_;
  kj::Promise<void> serving_ = nullptr;
  int registered_ = 0;
  std::vector<std::string> log_;
  absl::Mutex output_mu_;
  std::vector<std::string> output_ ABSL_GUARDED_BY(output_mu_);
  // After output_: the group's reader thread writes there until the group
  // is gone, so the group goes first.
  std::unique_ptr<controller::ProcessGroup> group_;
};

class ActorProcessOverBoth : public ActorProcessTest, public ::testing::WithParamInterface<rpc::ControlPlaneKind> {};

TEST_P(ActorProcessOverBoth, RegistersByAnsweringTheChallengeAndServes) {
  ASSERT_NO_FATAL_FAILURE(Listen(GetParam()));
  ASSERT_NO_FATAL_FAILURE(StartActor(kToken));
  ASSERT_TRUE(RunUntil([&] { return registered_ == 1; }, absl::Seconds(10))) << Output();
  EXPECT_TRUE(log_.empty());
  EXPECT_THAT(Output(), ::testing::Not(HasSubstr(kToken)));
}

// Authentication is mutual: an actor given another token finds that the
// controller cannot answer its challenge, hands nothing over and exits.
TEST_P(ActorProcessOverBoth, WithAnotherTokenTheActorRefusesTheControllerAndExitsWithCode2) {
  ASSERT_NO_FATAL_FAILURE(Listen(GetParam()));
  ASSERT_NO_FATAL_FAILURE(StartActor("not-the-token"));
  std::optional<controller::ExitInfo> exit = AwaitExit(absl::Seconds(10));
  ASSERT_TRUE(exit.has_value()) << Output();
  EXPECT_EQ(exit->exit_code, kActorExitRefused);
  EXPECT_EQ(registered_, 0);
  EXPECT_THAT(Output(), HasSubstr("PERMISSION_DENIED"));
  EXPECT_THAT(Output(), HasSubstr("the controller did not prove it holds the job's token"));
  for (const std::string& line : log_) EXPECT_THAT(line, ::testing::Not(HasSubstr("registration of actor 0")));
}

// Over TCP the actor trusts the job's controller certificate alone: given
// another, it fails the TLS handshake, registers nowhere and exits.
TEST_F(ActorProcessTest, OverTcpAnotherControllerCertificateIsRefusedAndTheActorExitsWithCode2) {
  ASSERT_NO_FATAL_FAILURE(Listen(rpc::ControlPlaneKind::kTcp));
  absl::StatusOr<rpc::ControllerIdentity> other = rpc::MakeControllerIdentity();
  ASSERT_TRUE(other.ok()) << other.status();
  ASSERT_NO_FATAL_FAILURE(StartActor(kToken, std::nullopt, other->certificate_pem));
  std::optional<controller::ExitInfo> exit = AwaitExit(absl::Seconds(10));
  ASSERT_TRUE(exit.has_value()) << Output();
  EXPECT_EQ(registered_, 0);
  EXPECT_THAT(OutputWith("TLS handshake"), HasSubstr("the TLS handshake with the controller at " + socket_));
  EXPECT_EQ(exit->exit_code, kActorExitRefused) << Output();
}

INSTANTIATE_TEST_SUITE_P(ControlPlanes, ActorProcessOverBoth,
                         ::testing::Values(rpc::ControlPlaneKind::kUnix, rpc::ControlPlaneKind::kTcp),
                         [](const ::testing::TestParamInfo<rpc::ControlPlaneKind>& info) {
                           return std::string(rpc::ControlPlaneKindName(info.param));
                         });

TEST_F(ActorProcessTest, ExitsByItselfWhenTheControllerConnectionDrops) {
  ASSERT_NO_FATAL_FAILURE(Listen());
  ASSERT_NO_FATAL_FAILURE(StartActor(kToken));
  ASSERT_TRUE(RunUntil([&] { return registered_ == 1; }, absl::Seconds(10))) << Output();
  // The registration's reply leaves on a later turn of the loop: let it go,
  // so that the actor sees a registered session drop, not a refused register.
  io_.provider->getTimer().afterDelay(200 * kj::MILLISECONDS).wait(io_.waitScope);
  // The controller goes away: its server, and with it the connection.
  serving_ = nullptr;
  server_.reset();
  const absl::Time dropped_at = absl::Now();
  absl::StatusOr<controller::ExitInfo> exit = group_->WaitAny(absl::Seconds(5));
  ASSERT_TRUE(exit.ok()) << "the actor outlived its controller's connection by 5 s: " << exit.status();
  EXPECT_LT(absl::Now() - dropped_at, absl::Seconds(5));
  EXPECT_EQ(exit->signal, 0);
  EXPECT_EQ(exit->exit_code, kActorExitControllerLost);
  EXPECT_THAT(Output(), HasSubstr("the controller's connection dropped; exiting"));
}

TEST_F(ActorProcessTest, NoControllerIsASetupFailure) {
  absl::StatusOr<std::string> directory = rpc::MakePrivateRunDirectory();
  ASSERT_TRUE(directory.ok());
  directory_ = *directory;
  socket_ = absl::StrCat(directory_, "/nobody.sock");
  ASSERT_NO_FATAL_FAILURE(StartActor(kToken));
  absl::StatusOr<controller::ExitInfo> exit = group_->WaitAny(absl::Seconds(10));
  ASSERT_TRUE(exit.ok()) << exit.status();
  EXPECT_EQ(exit->exit_code, kActorExitSetupFailed);
  EXPECT_THAT(Output(), HasSubstr("cannot reach the controller"));
}

TEST_F(ActorProcessTest, NoControllerAtATcpAddressIsASetupFailureNamingIt) {
  // A port nobody listens on: bound by the OS, then closed.
  std::string address;
  {
    absl::StatusOr<std::unique_ptr<rpc::TcpListener>> closed = rpc::TcpListener::Listen(io_, "127.0.0.1", ServerTls());
    ASSERT_TRUE(closed.ok());
    address = (*closed)->address();
  }
  kind_ = rpc::ControlPlaneKind::kTcp;
  ASSERT_NO_FATAL_FAILURE(StartActor(kToken, address));
  absl::StatusOr<controller::ExitInfo> exit = group_->WaitAny(absl::Seconds(10));
  ASSERT_TRUE(exit.ok()) << exit.status();
  EXPECT_EQ(exit->exit_code, kActorExitSetupFailed);
  EXPECT_THAT(Output(), HasSubstr("cannot reach the controller at " + address));
}

TEST_F(ActorProcessTest, AMalformedTcpControllerAddressIsAClearUsageError) {
  kind_ = rpc::ControlPlaneKind::kTcp;
  for (const std::string address : {"controller.sock", "127.0.0.1:99999", "[::1", ":4000"}) {
    ASSERT_NO_FATAL_FAILURE(StartActor(kToken, address));
    absl::StatusOr<controller::ExitInfo> exit = group_->WaitAny(absl::Seconds(10));
    ASSERT_TRUE(exit.ok()) << exit.status();
    EXPECT_EQ(exit->exit_code, kActorExitSetupFailed) << address;
    const std::string expected =
        absl::StrCat("tandem-actor: --controller with --control tcp: '", address, "' is not host:port");
    EXPECT_THAT(OutputWith(expected), HasSubstr(expected));
  }
}

}  // namespace
}  // namespace tandem::actor
