// The process data planes (shm and TCP) across two real processes on one
// host: actor 0 is the test process, actor 1 a forked child. Then the TCP
// data plane's challenge-response in one process: strangers refused,
// counted and logged while the peers connect, and the token never on the
// socket. Every wait is bounded and every child is reaped (killed when it
// overstays).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "actor/shm_transport.h"
#include "actor/tcp_transport.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rpc/auth.h"
#include "tests/actor/transport_test_util.h"
#include "tests/testing/recording_relay.h"

namespace tandem::actor {
namespace {

using ::tandem::actor::testing::ChildFailure;
using ::tandem::actor::testing::ForkedChild;
using ::tandem::actor::testing::GoAhead;
using ::tandem::actor::testing::In;
using ::tandem::actor::testing::MixedTensors;
using ::testing::HasSubstr;

enum class Kind { kShm, kTcp };

// One actor's transport of either kind.
struct Endpoint {
  std::unique_ptr<ShmTransport> shm;
  std::unique_ptr<TcpTransport> tcp;
  Transport& transport() { return shm ? static_cast<Transport&>(*shm) : *tcp; }
  absl::Status Flush() {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    return shm ? shm->Flush(deadline) : tcp->Flush(deadline);
  }
  absl::Status SendRaw(int32_t peer, const std::vector<std::byte>& bytes) {
    return shm ? shm->SendRawForTesting(peer, bytes) : tcp->SendRawForTesting(peer, bytes);
  }
};

// Sets up actor `actor` of two, exchanging what is needed over `socket`.
absl::StatusOr<Endpoint> Connect(Kind kind, int32_t actor, int socket, int64_t ring_bytes = int64_t{256} << 20) {
  const int32_t peer = 1 - actor;
  Endpoint endpoint;
  if (kind == Kind::kShm) {
    absl::StatusOr<std::unique_ptr<ShmTransport>> shm = ShmTransport::Create(actor, 2, {.ring_bytes = ring_bytes});
    if (!shm.ok()) return shm.status();
    if (absl::Status status = SendFd(socket, (*shm)->OutboundFd(peer)); !status.ok()) return status;
    absl::StatusOr<int> fd = ReceiveFd(socket, absl::Now() + absl::Seconds(10));
    if (!fd.ok()) return fd.status();
    if (absl::Status status = (*shm)->AttachInbound(peer, *fd); !status.ok()) return status;
    endpoint.shm = *std::move(shm);
    return endpoint;
  }
  absl::StatusOr<std::unique_ptr<TcpTransport>> tcp = TcpTransport::Listen(actor, 2, {.token = "the-job-token"});
  if (!tcp.ok()) return tcp.status();
  const int port = (*tcp)->port();
  int peer_port = 0;
  if (write(socket, &port, sizeof(port)) != sizeof(port) || read(socket, &peer_port, sizeof(peer_port)) != sizeof(port)) {
    return absl::UnavailableError("port exchange failed");
  }
  std::vector<std::string> addresses(2);
  addresses[peer] = absl::StrCat("127.0.0.1:", peer_port);
  if (absl::Status status = (*tcp)->ConnectPeers(addresses, absl::Seconds(10)); !status.ok()) return status;
  endpoint.tcp = *std::move(tcp);
  return endpoint;
}

bool SameTensors(const std::vector<ir::HostTensor>& a, const std::vector<ir::HostTensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!a[i].BitwiseEquals(b[i])) return false;
  }
  return true;
}

// A forked actor 1 running `body` on its connected endpoint; reaped (killed
// if need be) by the test.
class Child : public ForkedChild {
 public:
  Child(Kind kind, std::function<int(Endpoint&)> body)
      : ForkedChild([kind, body = std::move(body)](int socket) {
          absl::StatusOr<Endpoint> endpoint = Connect(kind, 1, socket);
          if (!endpoint.ok()) return ChildFailure(10, endpoint.status().message());
          return body(*endpoint);
        }) {}
};


class DataPlaneTest : public ::testing::TestWithParam<Kind> {};

TEST_P(DataPlaneTest, RoundTripsTensorsOfSeveralDtypesBitExact) {
  Child child(GetParam(), [](Endpoint& e) {
    absl::StatusOr<std::vector<ir::HostTensor>> got = e.transport().Receive(0, 1, In(absl::Seconds(10)));
    if (!got.ok() || !SameTensors(*got, MixedTensors(3))) return 1;
    if (!e.transport().Send(0, 2, *got).ok()) return 2;
    return e.Flush().ok() ? 0 : 3;
  });
  absl::StatusOr<Endpoint> e = Connect(GetParam(), 0, child.socket());
  ASSERT_TRUE(e.ok()) << e.status();
  ASSERT_TRUE(e->transport().Send(1, 1, MixedTensors(3)).ok());
  absl::StatusOr<std::vector<ir::HostTensor>> echo = e->transport().Receive(1, 2, In(absl::Seconds(10)));
  ASSERT_TRUE(echo.ok()) << echo.status();
  EXPECT_TRUE(SameTensors(*echo, MixedTensors(3)));
  EXPECT_EQ(child.Wait(absl::Seconds(10)), 0);
}

TEST_P(DataPlaneTest, MatchesByTagNotArrivalOrder) {
  Child child(GetParam(), [](Endpoint& e) {
    for (uint64_t tag : {5, 3, 1, 4, 2}) {
      absl::StatusOr<std::vector<ir::HostTensor>> got = e.transport().Receive(0, tag, In(absl::Seconds(10)));
      if (!got.ok() || !SameTensors(*got, MixedTensors(static_cast<int>(tag)))) return static_cast<int>(tag);
    }
    return e.transport().Send(0, 100, {ir::HostTensor::Scalar(1)}).ok() && e.Flush().ok() ? 0 : 20;
  });
  absl::StatusOr<Endpoint> e = Connect(GetParam(), 0, child.socket());
  ASSERT_TRUE(e.ok()) << e.status();
  for (uint64_t tag = 1; tag <= 5; ++tag) ASSERT_TRUE(e->transport().Send(1, tag, MixedTensors(tag)).ok());
  EXPECT_TRUE(e->transport().Receive(1, 100, In(absl::Seconds(10))).ok());
  EXPECT_EQ(child.Wait(absl::Seconds(10)), 0);
}

TEST_P(DataPlaneTest, SixtyFourMebibyteMessageArrivesIntact) {
  constexpr int64_t kElements = int64_t{16} << 20;  // 64 MiB of i32
  auto make = [] {
    ir::HostTensor big(ir::TensorType{ir::DType::kI32, {kElements}});
    for (int64_t i = 0; i < kElements; ++i) big.i32()[i] = static_cast<int32_t>(i * 2654435761u);
    return big;
  };
  Child child(GetParam(), [&](Endpoint& e) {
    absl::StatusOr<std::vector<ir::HostTensor>> got = e.transport().Receive(0, 7, In(absl::Seconds(20)));
    if (!got.ok() || got->size() != 1 || !(*got)[0].BitwiseEquals(make())) return 1;
    return e.transport().Send(0, 8, {ir::HostTensor::Scalar(1)}).ok() && e.Flush().ok() ? 0 : 2;
  });
  absl::StatusOr<Endpoint> e = Connect(GetParam(), 0, child.socket());
  ASSERT_TRUE(e.ok()) << e.status();
  ASSERT_TRUE(e->transport().Send(1, 7, {make()}).ok());
  EXPECT_TRUE(e->transport().Receive(1, 8, In(absl::Seconds(20))).ok());
  EXPECT_EQ(child.Wait(absl::Seconds(20)), 0);
}

TEST_P(DataPlaneTest, MissingMessageIsDeadlineExceededWithinTheDeadline) {
  Child child(GetParam(), [](Endpoint& e) {
    return e.transport().Receive(0, 1, In(absl::Seconds(10))).ok() ? 0 : 1;
  });
  absl::StatusOr<Endpoint> e = Connect(GetParam(), 0, child.socket());
  ASSERT_TRUE(e.ok()) << e.status();
  const absl::Time start = absl::Now();
  absl::StatusOr<std::vector<ir::HostTensor>> got = e->transport().Receive(1, 99, start + absl::Milliseconds(200));
  const absl::Duration waited = absl::Now() - start;
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDeadlineExceeded) << got.status();
  EXPECT_NE(got.status().message().find("actor 1 with tag 99"), absl::string_view::npos) << got.status();
  EXPECT_GE(waited, absl::Milliseconds(200));
  EXPECT_LT(waited, absl::Seconds(3));  // the deadline, not a longer wait, ended it
  ASSERT_TRUE(e->transport().Send(1, 1, {ir::HostTensor::Scalar(1)}).ok());
  EXPECT_EQ(child.Wait(absl::Seconds(10)), 0);
}

TEST_P(DataPlaneTest, CorruptFrameIsAnErrorNamingThePeer) {
  Child child(GetParam(), [](Endpoint& e) {
    std::vector<std::byte> garbage(256, std::byte{0xAB});
    if (!e.SendRaw(0, garbage).ok() || !e.Flush().ok()) return 1;
    absl::SleepFor(absl::Milliseconds(500));
    return 0;
  });
  absl::StatusOr<Endpoint> e = Connect(GetParam(), 0, child.socket());
  ASSERT_TRUE(e.ok()) << e.status();
  absl::StatusOr<std::vector<ir::HostTensor>> got = e->transport().Receive(1, 1, In(absl::Seconds(5)));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss) << got.status();
  EXPECT_NE(got.status().message().find("from actor 1"), absl::string_view::npos) << got.status();
  // The error sticks: later receives from that peer fail the same way.
  EXPECT_EQ(e->transport().Receive(1, 2, In(absl::Seconds(1))).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(child.Wait(absl::Seconds(10)), 0);
}

TEST_P(DataPlaneTest, KilledPeerEndsTheWaitWithAnError) {
  Child child(GetParam(), [](Endpoint&) {
    absl::SleepFor(absl::Seconds(30));
    return 0;
  });
  absl::StatusOr<Endpoint> e = Connect(GetParam(), 0, child.socket());
  ASSERT_TRUE(e.ok()) << e.status();
  kill(child.pid(), SIGKILL);
  const absl::Time start = absl::Now();
  absl::StatusOr<std::vector<ir::HostTensor>> got = e->transport().Receive(1, 7, start + absl::Seconds(1));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  // TCP sees the EOF; shared memory cannot, so the deadline ends the wait.
  const absl::StatusCode expected =
      GetParam() == Kind::kTcp ? absl::StatusCode::kUnavailable : absl::StatusCode::kDeadlineExceeded;
  EXPECT_EQ(got.status().code(), expected) << got.status();
  EXPECT_NE(got.status().message().find("actor 1"), absl::string_view::npos) << got.status();
  EXPECT_EQ(child.Wait(absl::Seconds(5)), -1);
}

TEST_P(DataPlaneTest, AbortWakesAWaitingReceive) {
  Child child(GetParam(), [](Endpoint& e) {
    return e.transport().Receive(0, 1, In(absl::Seconds(10))).ok() ? 0 : 1;
  });
  absl::StatusOr<Endpoint> e = Connect(GetParam(), 0, child.socket());
  ASSERT_TRUE(e.ok()) << e.status();
  std::thread aborter([&] {
    absl::SleepFor(absl::Milliseconds(100));
    e->transport().Abort(absl::UnavailableError("actor 3 died"));
  });
  const absl::Time start = absl::Now();
  absl::StatusOr<std::vector<ir::HostTensor>> got = e->transport().Receive(1, 5, start + absl::Seconds(5));
  aborter.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));  // the abort, not the deadline, ended it
  EXPECT_EQ(got.status().message(), "actor 3 died");
  kill(child.pid(), SIGKILL);
  EXPECT_EQ(child.Wait(absl::Seconds(5)), -1);
}

// Sends never block: with a 64 KiB ring, 32 messages of 16 KiB queue in the
// sender and its flusher writes them as the receiver frees space. The
// receiver starts only once every Send has returned (or after 5 s, failing:
// then a Send waited for it).
TEST(ShmTransport, FullRingQueuesSendsUntilSpaceFrees) {
  constexpr int64_t kRing = 64 << 10;
  auto message = [](int i) {
    ir::HostTensor t(ir::TensorType{ir::DType::kI32, {4096}});
    for (int k = 0; k < 4096; ++k) t.i32()[k] = i * 10000 + k;
    return std::vector<ir::HostTensor>{t};
  };
  int sockets[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sockets), 0);
  const GoAhead sends_returned;
  const pid_t pid = fork();
  if (pid == 0) {
    absl::StatusOr<Endpoint> e = Connect(Kind::kShm, 1, sockets[1], kRing);
    if (!e.ok()) _exit(10);
    const bool in_time = sends_returned.Wait(absl::Seconds(5));
    for (int i = 0; i < 32; ++i) {
      absl::StatusOr<std::vector<ir::HostTensor>> got = e->transport().Receive(0, i, In(absl::Seconds(10)));
      if (!got.ok() || !SameTensors(*got, message(i))) {
        std::fprintf(stderr, "child: message %d: %s\n", i, got.ok() ? "differs" : std::string(got.status().message()).c_str());
        _exit(1);
      }
    }
    if (!in_time) std::fprintf(stderr, "child: the sender's Sends did not return before this receiver started\n");
    _exit(in_time ? 0 : 3);
  }
  absl::StatusOr<Endpoint> e = Connect(Kind::kShm, 0, sockets[0], kRing);
  ASSERT_TRUE(e.ok()) << e.status();
  for (int i = 0; i < 32; ++i) ASSERT_TRUE(e->transport().Send(1, i, message(i)).ok());
  sends_returned.Give();
  EXPECT_TRUE(e->Flush().ok());
  int status = 0;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (waitpid(pid, &status, WNOHANG) != pid) {
    if (absl::Now() >= deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      FAIL() << "child overstayed";
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  close(sockets[0]);
  close(sockets[1]);
}

// --- The TCP data plane's challenge-response, in one process ---------------

constexpr char kToken[] = "5f0c1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1";

// Notices a transport logs, readable from the test thread.
struct Notices {
  absl::Mutex mu;
  std::vector<std::string> lines ABSL_GUARDED_BY(mu);
  std::function<void(absl::string_view)> Sink() {
    return [this](absl::string_view line) {
      absl::MutexLock lock(&mu);
      lines.emplace_back(line);
    };
  }
  std::vector<std::string> Lines() {
    absl::MutexLock lock(&mu);
    return lines;
  }
};

// What a stranger dialing `port` sends after reading the challenge (nothing
// at all when `bytes` is empty); whether it was then hung up on within
// `within`.
bool StrangerIsHungUpOn(int port, const std::string& bytes, absl::Duration within) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    close(fd);
    return false;
  }
  if (!bytes.empty() && send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(bytes.size())) {
    close(fd);
    return false;
  }
  // Read (and drop) the challenge, then wait for the end.
  const absl::Time deadline = absl::Now() + within;
  char buffer[256];
  bool closed = false;
  while (!closed && absl::Now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 50) <= 0) continue;
    closed = recv(fd, buffer, sizeof(buffer), 0) <= 0;
  }
  close(fd);
  return closed;
}

// A well-formed hello from `from` to `to` answering a challenge the test
// never saw with `token`'s HMAC over a made-up nonce, or the right answer
// when `nonce` is the real one; its own challenge is all 7s.
std::string Hello(int32_t from, int32_t to, absl::string_view token, const std::string& nonce) {
  const uint64_t magic = 0x54444d48454c4c4f;  // "TDMHELLO"
  absl::StatusOr<rpc::Proof> proof = rpc::ProveConnection(token, rpc::AsBytes(nonce), from, to);
  std::string hello(reinterpret_cast<const char*>(&magic), sizeof(magic));
  hello.append(reinterpret_cast<const char*>(&from), sizeof(from));
  hello.append(reinterpret_cast<const char*>(&to), sizeof(to));
  hello.append(reinterpret_cast<const char*>(proof->data()), proof->size());
  hello.append(rpc::kNonceBytes, '\x07');
  return hello;
}

// A stranger who reads the challenge first and answers it as actor `from`
// with `token`: the real answer if `token` is the job's.
bool AnsweringStrangerIsHungUpOn(int port, int32_t from, int32_t to, absl::string_view token) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  char challenge[8 + rpc::kNonceBytes];
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      !testing::ReadAll(fd, challenge, sizeof(challenge))) {
    close(fd);
    return false;
  }
  const std::string hello = Hello(from, to, token, std::string(challenge + 8, rpc::kNonceBytes));
  const bool sent = testing::WriteAll(fd, hello.data(), hello.size());
  char byte;
  pollfd p{fd, POLLIN, 0};
  const bool closed = sent && poll(&p, 1, 5000) == 1 && recv(fd, &byte, 1, 0) == 0;
  close(fd);
  return closed;
}

// Both actors of a two-actor TCP data plane, connected with ConnectPeers
// (actor 1 on a thread of its own), actor 1 dialing `dial_zero_at`.
absl::Status ConnectPair(TcpTransport& zero, TcpTransport& one, const std::string& dial_zero_at,
                         absl::Duration timeout = absl::Seconds(10)) {
  absl::Status one_status;
  std::thread dialer([&] { one_status = one.ConnectPeers({dial_zero_at, ""}, timeout); });
  // Actor 1's address marks it a TCP peer; zero waits for it to dial.
  absl::Status zero_status = zero.ConnectPeers({"", absl::StrCat("127.0.0.1:", one.port())}, timeout);
  dialer.join();
  return zero_status.ok() ? one_status : zero_status;
}

absl::Status RoundTrip(TcpTransport& zero, TcpTransport& one, uint64_t tag) {
  if (absl::Status s = one.Send(0, tag, MixedTensors(2)); !s.ok()) return s;
  absl::StatusOr<std::vector<ir::HostTensor>> got = zero.Receive(1, tag, In(absl::Seconds(10)));
  if (!got.ok()) return got.status();
  if (!SameTensors(*got, MixedTensors(2))) return absl::DataLossError("differs");
  if (absl::Status s = zero.Send(1, tag, *got); !s.ok()) return s;
  return one.Receive(0, tag, In(absl::Seconds(10))).status();
}

TEST(TcpTransportAuth, StrangersAreRefusedCountedAndLoggedAndThePeersConnectAnyway) {
  Notices notices;
  absl::StatusOr<std::unique_ptr<TcpTransport>> zero = TcpTransport::Listen(
      0, 2, {.token = kToken, .handshake_timeout = absl::Seconds(1), .log = notices.Sink()});
  absl::StatusOr<std::unique_ptr<TcpTransport>> one = TcpTransport::Listen(1, 2, {.token = kToken});
  ASSERT_TRUE(zero.ok() && one.ok());
  const int port = (*zero)->port();
  // Before the peers connect: one says nothing, one sends garbage, one a
  // hello with a made-up answer, one for another actor, one claiming to be
  // actor 0 itself.
  EXPECT_TRUE(StrangerIsHungUpOn(port, "", absl::Seconds(5)));
  EXPECT_TRUE(StrangerIsHungUpOn(port, std::string(80, '\xab'), absl::Seconds(5)));  // a hello's size
  EXPECT_TRUE(AnsweringStrangerIsHungUpOn(port, 1, 0, "not-the-token"));
  EXPECT_TRUE(AnsweringStrangerIsHungUpOn(port, 1, 5, kToken));
  EXPECT_TRUE(AnsweringStrangerIsHungUpOn(port, 0, 0, kToken));
  EXPECT_EQ((*zero)->refused_connections(), 5);

  ASSERT_TRUE(ConnectPair(**zero, **one, absl::StrCat("127.0.0.1:", port)).ok());
  EXPECT_TRUE(RoundTrip(**zero, **one, 1).ok());
  // After: even the right answer is refused, actor 1 being connected.
  EXPECT_TRUE(AnsweringStrangerIsHungUpOn(port, 1, 0, kToken));
  EXPECT_TRUE(StrangerIsHungUpOn(port, "", absl::Seconds(5)));
  EXPECT_EQ((*zero)->refused_connections(), 7);
  EXPECT_EQ((*one)->refused_connections(), 0);
  EXPECT_TRUE(RoundTrip(**zero, **one, 2).ok());

  EXPECT_EQ(notices.Lines().size(), 5u);  // rate-limited: the first five of the interval
  zero->reset();                          // ... and a count of the others when it ends
  const std::vector<std::string> lines = notices.Lines();
  ASSERT_EQ(lines.size(), 6u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_THAT(lines[i], HasSubstr("actor 0 refused a data-plane connection from 127.0.0.1:"));
  }
  EXPECT_THAT(lines[5], HasSubstr("actor 0 data plane: 2 more notices like these"));
  EXPECT_THAT(lines[0], HasSubstr("no answer to the challenge within 1s"));
  EXPECT_THAT(lines[1], HasSubstr("no Tandem data-plane hello"));
  EXPECT_THAT(lines[2], HasSubstr("not made with the job's token"));
  EXPECT_THAT(lines[3], HasSubstr("its hello is for actor 5"));
  EXPECT_THAT(lines[4], HasSubstr("claims actor 0, which does not dial this one"));
  for (const std::string& line : lines) EXPECT_THAT(line, ::testing::Not(HasSubstr(kToken)));
}

TEST(TcpTransportAuth, PeersWithDifferentTokensAreRefusedNamingTheCause) {
  Notices notices;
  absl::StatusOr<std::unique_ptr<TcpTransport>> zero = TcpTransport::Listen(0, 2, {.token = kToken, .log = notices.Sink()});
  absl::StatusOr<std::unique_ptr<TcpTransport>> one = TcpTransport::Listen(1, 2, {.token = "another job's token"});
  ASSERT_TRUE(zero.ok() && one.ok());
  absl::Status dialed = (*one)->ConnectPeers({absl::StrCat("127.0.0.1:", (*zero)->port()), ""}, absl::Seconds(5));
  EXPECT_EQ(dialed.code(), absl::StatusCode::kPermissionDenied) << dialed;
  EXPECT_THAT(dialed.message(), HasSubstr("actor 1: connecting to actor 0 at 127.0.0.1:"));
  EXPECT_THAT(dialed.message(), HasSubstr("different job tokens"));
  EXPECT_EQ((*zero)->refused_connections(), 1);
  absl::Status waited =
      (*zero)->ConnectPeers({"", absl::StrCat("127.0.0.1:", (*one)->port())}, absl::Milliseconds(200));
  EXPECT_EQ(waited.code(), absl::StatusCode::kDeadlineExceeded) << waited;
  EXPECT_THAT(waited.message(), HasSubstr("only 0 of 1 higher-numbered actors connected in time"));
}

TEST(TcpTransportAuth, AHonestPeerGetsInOnceStrangersStopCrowdingTheChallenges) {
  absl::StatusOr<std::unique_ptr<TcpTransport>> zero = TcpTransport::Listen(
      0, 2,
      {.token = kToken, .handshake_timeout = absl::Seconds(1), .max_pending_handshakes = 1,
       .log = [](absl::string_view) {}});
  absl::StatusOr<std::unique_ptr<TcpTransport>> one = TcpTransport::Listen(1, 2, {.token = kToken});
  ASSERT_TRUE(zero.ok() && one.ok());
  const int port = (*zero)->port();
  std::thread stranger([port] { StrangerIsHungUpOn(port, "", absl::Seconds(5)); });  // silent, takes the slot
  absl::SleepFor(absl::Milliseconds(100));
  const absl::Time start = absl::Now();
  EXPECT_TRUE(ConnectPair(**zero, **one, absl::StrCat("127.0.0.1:", port), absl::Seconds(5)).ok());
  stranger.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(4));  // soon after the stranger's 1 s is over
  EXPECT_GE((*zero)->refused_connections(), 2);  // the stranger, and actor 1 while the slot was taken
  EXPECT_TRUE(RoundTrip(**zero, **one, 1).ok());
}

// An impostor listening where actor 0 should be, without the token: it
// challenges the dialer, takes its hello whatever it says, and welcomes it
// with an answer it cannot make. The dialer refuses it before sending
// anything, naming why.
TEST(TcpTransportAuth, ADialerRefusesAListenerThatCannotProveTheToken) {
  const int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  ASSERT_EQ(listen(listener, 1), 0);
  ASSERT_EQ(getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length), 0);
  bool welcomed = false;
  std::thread impostor([&] {
    pollfd p{listener, POLLIN, 0};
    if (poll(&p, 1, 5000) != 1) return;
    const int fd = accept(listener, nullptr, nullptr);
    const uint64_t challenge_magic = 0x54444d43484c4e47;  // "TDMCHLNG"
    std::string challenge(reinterpret_cast<const char*>(&challenge_magic), sizeof(challenge_magic));
    challenge.append(rpc::kNonceBytes, '\x01');
    char hello[8 + 4 + 4 + rpc::kProofBytes + rpc::kNonceBytes];
    const uint64_t welcome_magic = 0x54444d57454c434d;  // "TDMWELCM"
    std::string welcome(reinterpret_cast<const char*>(&welcome_magic), sizeof(welcome_magic));
    welcome.append(rpc::kProofBytes, '\x02');
    welcomed = testing::WriteAll(fd, challenge.data(), challenge.size()) && testing::ReadAll(fd, hello, sizeof(hello)) &&
               testing::WriteAll(fd, welcome.data(), welcome.size());
    char byte;
    pollfd q{fd, POLLIN, 0};
    poll(&q, 1, 5000);  // until the dialer hangs up
    EXPECT_EQ(recv(fd, &byte, 1, 0), 0) << "the dialer sent something after the welcome";
    close(fd);
  });
  absl::StatusOr<std::unique_ptr<TcpTransport>> one = TcpTransport::Listen(1, 2, {.token = kToken});
  ASSERT_TRUE(one.ok());
  absl::Status dialed =
      (*one)->ConnectPeers({absl::StrCat("127.0.0.1:", ntohs(address.sin_port)), ""}, absl::Seconds(5));
  impostor.join();
  close(listener);
  EXPECT_TRUE(welcomed);
  EXPECT_EQ(dialed.code(), absl::StatusCode::kPermissionDenied) << dialed;
  EXPECT_THAT(dialed.message(), HasSubstr("its welcome does not answer this actor's challenge with the job's token"));
}

// Two connected actors whose connection runs through a relay that keeps
// every byte (declared first, so it goes last).
struct RelayedPair {
  std::unique_ptr<test::RecordingRelay> relay;
  std::unique_ptr<TcpTransport> zero;
  std::unique_ptr<TcpTransport> one;
};

absl::StatusOr<RelayedPair> ConnectThroughRelay() {
  absl::StatusOr<std::unique_ptr<TcpTransport>> zero = TcpTransport::Listen(0, 2, {.token = kToken});
  if (!zero.ok()) return zero.status();
  absl::StatusOr<std::unique_ptr<TcpTransport>> one = TcpTransport::Listen(1, 2, {.token = kToken});
  if (!one.ok()) return one.status();
  RelayedPair pair{std::make_unique<test::RecordingRelay>(absl::StrCat("127.0.0.1:", (*zero)->port())),
                   *std::move(zero), *std::move(one)};
  if (absl::Status connected = ConnectPair(*pair.zero, *pair.one, pair.relay->address()); !connected.ok()) {
    return connected;
  }
  return pair;
}

// Through a relay that keeps every byte: the handshake and the tensors go
// by, the token never does.
TEST(TcpTransportAuth, TheTokenNeverCrossesTheSocket) {
  absl::StatusOr<RelayedPair> pair = ConnectThroughRelay();
  ASSERT_TRUE(pair.ok()) << pair.status();
  TcpTransport& zero = *pair->zero;
  const test::RecordingRelay& relay = *pair->relay;
  for (uint64_t tag = 1; tag <= 3; ++tag) ASSERT_TRUE(RoundTrip(zero, *pair->one, tag).ok());
  ASSERT_TRUE(zero.Flush(In(absl::Seconds(5))).ok());
  EXPECT_EQ(relay.connections(), 1);
  EXPECT_TRUE(relay.Carried("TDMHELLO") || relay.Carried("OLLEHMDT"));
  EXPECT_GT(relay.total_bytes(), 200);
  EXPECT_FALSE(relay.Carried(kToken));
  EXPECT_FALSE(relay.Carried(std::string(kToken).substr(0, 16)));
  EXPECT_FALSE(relay.Carried(std::string(kToken).substr(40, 16)));
}

// Issue 41, finding 9: after the handshake, frames cross the socket sealed
// (actor/sealed_stream.h): neither the frame magic nor a tensor's bytes
// show on the wire, and the tensors arrive as sent.
TEST(TcpTransportAuth, FramesCrossTheSocketSealed) {
  absl::StatusOr<RelayedPair> pair = ConnectThroughRelay();
  ASSERT_TRUE(pair.ok()) << pair.status();
  TcpTransport& zero = *pair->zero;
  TcpTransport& one = *pair->one;
  const test::RecordingRelay& relay = *pair->relay;
  std::vector<float> values(1024);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) * 0.5f;
  std::vector<ir::HostTensor> sent = {ir::HostTensor::FromFloats({1024}, values)};
  ASSERT_TRUE(one.Send(0, 7, sent).ok());
  absl::StatusOr<std::vector<ir::HostTensor>> got = zero.Receive(1, 7, In(absl::Seconds(10)));
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 1u);
  EXPECT_TRUE((*got)[0].BitwiseEquals(sent[0]));
  ASSERT_TRUE(RoundTrip(zero, one, 8).ok());
  ASSERT_TRUE(one.Flush(In(absl::Seconds(5))).ok());
  ASSERT_TRUE(zero.Flush(In(absl::Seconds(5))).ok());
  EXPECT_GT(relay.total_bytes(), 4096);
  const std::string magic("FMDT", 4);  // kFrameMagic, little-endian
  EXPECT_FALSE(relay.Carried(magic)) << "a frame header crossed the socket in clear";
  const std::string floats(reinterpret_cast<const char*>(values.data()) + 400, 64);
  EXPECT_FALSE(relay.Carried(floats)) << "tensor bytes crossed the socket in clear";
}

INSTANTIATE_TEST_SUITE_P(Transports, DataPlaneTest, ::testing::Values(Kind::kShm, Kind::kTcp),
                         [](const ::testing::TestParamInfo<Kind>& info) {
                           return std::string(info.param == Kind::kShm ? "Shm" : "Tcp");
                         });

}  // namespace
}  // namespace tandem::actor
