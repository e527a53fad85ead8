// The local launcher's control socket and its actors' secrets, across real
// processes on loopback: a stranger with a wrong token, floods of refusals
// (all counted, logged rate-limited), an oversized control message, and
// strangers over TCP are refused while the job runs on; the job's token
// never crosses a socket or an actor's command line. Every wait is bounded.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "controller/local_launcher.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kj/async-io.h"
#include "rpc/async_status.h"
#include "rpc/connection.h"
#include "rpc/controller_service.h"
#include "tests/controller/local_launcher_job.h"
#include "tests/testing/recording_relay.h"

namespace tandem::controller {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// What a stranger does with the job's Controller capability.
using StrangerAct =
    std::function<kj::Promise<absl::Status>(rpc::wire::Controller::Client controller, rpc::wire::Actor::Client actor)>;

// A stranger on the job's control socket (`address`: a path, or host:port
// with TCP, where it dials with the controller's `certificate`, which is
// public), sending with `limits`. Returns what its act came to.
absl::Status AsStranger(const std::string& address, rpc::ConnectionLimits limits, StrangerAct act,
                        const std::string& certificate = "") {
  kj::AsyncIoContext io = kj::setupAsyncIo();
  const rpc::ControlPlaneKind kind =
      address.front() == '/' ? rpc::ControlPlaneKind::kUnix : rpc::ControlPlaneKind::kTcp;
  absl::StatusOr<rpc::ControlStream> stream =
      rpc::ToStatusOr(rpc::DialController(io, kind, address, absl::Seconds(10), certificate)).wait(io.waitScope);
  if (!stream.ok()) return stream.status();
  rpc::RpcConnection connection(*std::move(stream), capnp::rpc::twoparty::Side::CLIENT, nullptr, limits);
  // The stranger offers a broken Actor capability: it never gets that far.
  rpc::wire::Actor::Client nobody = capnp::Capability::Client(KJ_EXCEPTION(FAILED, "stranger")).castAs<rpc::wire::Actor>();
  kj::Timer& timer = io.provider->getTimer();
  return act(connection.Bootstrap<rpc::wire::Controller>(), nobody)
      .exclusiveJoin(timer.afterDelay(10 * kj::SECONDS).then([] {
        return absl::DeadlineExceededError("no answer to the stranger");
      }))
      .wait(io.waitScope);
}

// Registers as actor 0 by answering a challenge with `token`. A stranger:
// it does not check the controller's own proof, which a stranger cannot.
absl::Status RegisterAsStranger(const std::string& address, const std::string& token,
                                const std::string& certificate = "") {
  return AsStranger(address, {}, [&](rpc::wire::Controller::Client controller, rpc::wire::Actor::Client actor) {
    auto request = controller.challengeRequest();
    request.setActorId(0);
    const std::string ours(rpc::kNonceBytes, 'z');
    request.setNonce(capnp::Data::Reader(reinterpret_cast<const uint8_t*>(ours.data()), ours.size()));
    return rpc::ToStatusOr(request.send())
        .then([controller, actor, token](auto challenge) mutable -> kj::Promise<absl::Status> {
          if (!challenge.ok()) return challenge.status();
          auto nonce = std::make_shared<std::string>(challenge->getNonce().asChars().begin(),
                                                     challenge->getNonce().size());
          absl::StatusOr<rpc::Proof> proof = rpc::ProveRegistration(token, rpc::AsBytes(*nonce), 0);
          if (!proof.ok()) return proof.status();
          auto answer = std::make_shared<rpc::Proof>(*proof);
          return rpc::SendRegistration(controller, 0, rpc::AsBytes(*nonce), *answer, actor)
              .then([nonce, answer](auto session) { return session.status(); });
        });
  }, certificate);
}

TEST(LocalLauncherSecurity, WrongTokenIsRefusedAndTheJobRunsOn) {
  Job job;
  ASSERT_NO_FATAL_FAILURE(StartJob(job, 2, 4));
  ASSERT_TRUE(job.pipeline->Step(testing_harness::Batches(job.step, 1)).ok());
  absl::Status refused = RegisterAsStranger(job.launcher->controller_address(), std::string(64, 'f'));
  EXPECT_EQ(refused.code(), absl::StatusCode::kPermissionDenied) << refused;
  EXPECT_EQ(job.launcher->Refusals().registrations(), 1);
  absl::StatusOr<StepReport> report = job.pipeline->Step(testing_harness::Batches(job.step, 2));
  EXPECT_TRUE(report.ok()) << report.status();
}

TEST(LocalLauncherSecurity, ManyRefusalsAreAllCountedButLoggedRateLimited) {
  auto mu = std::make_shared<absl::Mutex>();
  auto lines = std::make_shared<std::vector<std::string>>();
  LocalLauncherOptions options = TestOptions();
  options.log = [mu, lines](absl::string_view line) {
    absl::MutexLock lock(mu.get());
    lines->emplace_back(line);
  };
  Job job;
  ASSERT_NO_FATAL_FAILURE(StartJob(job, 2, 4, 12, 4, options));
  constexpr int kStrangers = 2000;
  for (int i = 0; i < kStrangers; ++i) {
    ASSERT_EQ(RegisterAsStranger(job.launcher->controller_address(), std::string(64, 'f')).code(),
              absl::StatusCode::kPermissionDenied);
  }
  EXPECT_EQ(job.launcher->Refusals().registrations(), kStrangers);
  // Malformed hellos: bytes that are no Cap'n Proto message.
  for (int i = 0; i < 500; ++i) {
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, job.launcher->controller_address().c_str(), sizeof(address.sun_path) - 1);
    ASSERT_EQ(connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)), 0);
    const std::string junk(64, '\xff');
    EXPECT_EQ(write(fd, junk.data(), junk.size()), static_cast<ssize_t>(junk.size()));
    close(fd);
  }
  {
    absl::MutexLock lock(mu.get());
    // A refusal and a closed connection per stranger, a failure per
    // malformed hello: thousands of notices, of which the first few are
    // logged (and a count once the interval ends).
    EXPECT_LE(lines->size(), 10u);
    EXPECT_GE(lines->size(), 1u);
  }
  absl::StatusOr<StepReport> report = job.pipeline->Step(testing_harness::Batches(job.step, 1));
  EXPECT_TRUE(report.ok()) << report.status();
}

TEST(LocalLauncherSecurity, OversizedControlMessageIsRefusedAndTheJobRunsOn) {
  Job job;
  ASSERT_NO_FATAL_FAILURE(StartJob(job, 2, 4));
  ASSERT_TRUE(job.pipeline->Step(testing_harness::Batches(job.step, 1)).ok());
  // A client with a larger limit than the controller's sends a 65 MiB
  // registration: the controller drops that connection.
  rpc::ConnectionLimits generous;
  generous.max_message_bytes = uint64_t{256} << 20;
  const std::string nonce(rpc::kNonceBytes, 'n');
  const std::string huge(size_t{65} << 20, 'x');
  absl::Status refused = AsStranger(job.launcher->controller_address(), generous,
                                    [&](rpc::wire::Controller::Client controller, rpc::wire::Actor::Client actor) {
                                      return rpc::SendRegistration(controller, 0, rpc::AsBytes(nonce),
                                                                   rpc::AsBytes(huge), actor)
                                          .then([](auto session) { return session.status(); });
                                    });
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable) << refused;
  absl::StatusOr<StepReport> report = job.pipeline->Step(testing_harness::Batches(job.step, 2));
  EXPECT_TRUE(report.ok()) << report.status();
}

// The job's token, read from an actor process's environment (where the
// launcher put it); "" if it is not there.
// A variable of process `pid`'s environment; empty when it has none.
std::string EnvironmentOf(pid_t pid, const std::string& name) {
  std::ifstream file(absl::StrCat("/proc/", pid, "/environ"), std::ios::binary);
  std::string entry;
  const std::string prefix = name + "=";
  while (std::getline(file, entry, '\0')) {
    if (entry.rfind(prefix, 0) == 0) return entry.substr(prefix.size());
  }
  return "";
}

std::string TokenOf(pid_t pid) { return EnvironmentOf(pid, "TANDEM_JOB_TOKEN"); }

std::string CommandLineOf(pid_t pid) {
  std::ifstream file(absl::StrCat("/proc/", pid, "/cmdline"), std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(file), {});
}

// Over TCP, every socket of the job runs through a recording relay: a wrong
// token, a replayed challenge answer and a stranger on an actor's data
// plane are each refused, logged and counted while the job runs on, and the
// token crosses no socket and shows in no argv or log line.
TEST(LocalLauncherSecurity, OverTcpStrangersAreRefusedCountedAndLoggedAndTheTokenNeverCrossesASocket) {
  auto mu = std::make_shared<absl::Mutex>();
  auto lines = std::make_shared<std::vector<std::string>>();
  auto relays = std::make_shared<std::vector<std::unique_ptr<test::RecordingRelay>>>();
  LocalLauncherOptions options = TestOptions(ir::DataPlaneKind::kTcp);
  options.control_plane = rpc::ControlPlaneKind::kTcp;
  options.log = [mu, lines](absl::string_view line) {
    absl::MutexLock lock(mu.get());
    lines->emplace_back(line);
  };
  options.dial_address = [mu, relays](const std::string& address) {
    absl::MutexLock lock(mu.get());
    relays->push_back(std::make_unique<test::RecordingRelay>(address));
    return relays->back()->address();
  };
  Job job;
  ASSERT_NO_FATAL_FAILURE(StartJob(job, 2, 4, 12, 4, options));
  ASSERT_TRUE(job.pipeline->Step(testing_harness::Batches(job.step, 1)).ok());
  const std::string controller = job.launcher->controller_address();
  const std::vector<pid_t> pids = ActorPids(job, 2);
  const std::string token = TokenOf(pids[0]);
  ASSERT_EQ(token.size(), 64u) << "the actor has no TANDEM_JOB_TOKEN";
  for (pid_t pid : pids) {
    const std::string argv = CommandLineOf(pid);
    EXPECT_THAT(argv, HasSubstr("--controller")) << "no command line read for pid " << pid;
    EXPECT_EQ(argv.find(token), std::string::npos) << "the token is in the argv of pid " << pid;
  }

  // Over TCP the control plane is TLS: an actor trusts the certificate it
  // is given, which strangers may know as well (it is no secret).
  const std::string certificate = EnvironmentOf(pids[0], "TANDEM_CONTROLLER_CERT");
  ASSERT_THAT(certificate, HasSubstr("BEGIN CERTIFICATE")) << "the actor has no TANDEM_CONTROLLER_CERT";

  // 1. A wrong token.
  EXPECT_EQ(RegisterAsStranger(controller, std::string(64, 'f'), certificate).code(),
            absl::StatusCode::kPermissionDenied);
  // 2. A right answer (someone who holds the token, registering an actor
  //    that is registered already), then the same answer again.
  absl::Status first;
  absl::Status replayed = AsStranger(controller, {}, [&](rpc::wire::Controller::Client controller_cap,
                                                         rpc::wire::Actor::Client actor) {
    return rpc::RequestChallenge(controller_cap, 0, token)
        .then([&, controller_cap, actor](absl::StatusOr<std::string> nonce) mutable -> kj::Promise<absl::Status> {
          if (!nonce.ok()) return nonce.status();
          auto shared_nonce = std::make_shared<std::string>(*nonce);
          absl::StatusOr<rpc::Proof> proof = rpc::ProveRegistration(token, rpc::AsBytes(*shared_nonce), 0);
          if (!proof.ok()) return proof.status();
          auto shared_proof = std::make_shared<rpc::Proof>(*proof);
          return rpc::SendRegistration(controller_cap, 0, rpc::AsBytes(*shared_nonce), *shared_proof, actor)
              .then([&, controller_cap, actor, shared_nonce, shared_proof](auto session) mutable {
                first = session.status();
                return rpc::SendRegistration(controller_cap, 0, rpc::AsBytes(*shared_nonce), *shared_proof, actor);
              })
              .then([](auto session) { return session.status(); });
        });
  }, certificate);
  EXPECT_EQ(first.code(), absl::StatusCode::kAlreadyExists) << first;
  EXPECT_EQ(replayed.code(), absl::StatusCode::kPermissionDenied) << replayed;
  EXPECT_THAT(std::string(replayed.message()), HasSubstr("a replay"));
  // 3. A stranger on each actor's data plane (dialing it directly).
  std::vector<std::string> data_planes;
  {
    absl::MutexLock lock(mu.get());
    for (const auto& relay : *relays) {
      if (relay->target() != controller) data_planes.push_back(relay->target());
    }
  }
  ASSERT_EQ(data_planes.size(), 2u);
  for (const std::string& address : data_planes) {
    absl::StatusOr<rpc::HostPort> endpoint = rpc::ParseHostPort(address);
    ASSERT_TRUE(endpoint.ok()) << endpoint.status();
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(static_cast<uint16_t>(endpoint->port));
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(connect(fd, reinterpret_cast<const sockaddr*>(&to), sizeof(to)), 0);
    const std::string hello(96, '\x42');
    EXPECT_EQ(write(fd, hello.data(), hello.size()), static_cast<ssize_t>(hello.size()));
    close(fd);
  }

  // The job runs on, and every refusal was counted.
  absl::StatusOr<StepReport> report = job.pipeline->Step(testing_harness::Batches(job.step, 2));
  ASSERT_TRUE(report.ok()) << report.status();
  RefusalCounts refused;
  for (const absl::Time deadline = absl::Now() + absl::Seconds(10); absl::Now() < deadline;) {
    refused = job.launcher->Refusals();
    if (refused.data_plane >= 2) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_EQ(refused.wrong_proof, 1);
  EXPECT_EQ(refused.replayed_challenge, 1);
  EXPECT_EQ(refused.rejected, 1);  // the proven registration of an actor that had one
  EXPECT_EQ(refused.data_plane, 2);
  ASSERT_TRUE(job.launcher->Shutdown().ok());

  absl::MutexLock lock(mu.get());
  EXPECT_GE(lines->size(), 3u);
  for (const std::string& line : *lines) EXPECT_EQ(line.find(token), std::string::npos) << line;
  ASSERT_EQ(relays->size(), 3u);  // the controller's socket and two data planes
  int64_t control_bytes = 0;
  int64_t data_bytes = 0;
  for (const auto& relay : *relays) {
    (relay->target() == controller ? control_bytes : data_bytes) += relay->total_bytes();
    EXPECT_FALSE(relay->Carried(token)) << "the token crossed the socket to " << relay->target();
  }
  // Both planes ran through the relays (actor 1 dials actor 0; nobody dials 1).
  EXPECT_GT(control_bytes, 0);
  EXPECT_GT(data_bytes, 0);
}

}  // namespace
}  // namespace tandem::controller
