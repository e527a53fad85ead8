// The process data planes (shm and TCP) across two real processes on one
// host: actor 0 is the test process, actor 1 a forked child. Every wait is
// bounded and every child is reaped (killed when it overstays).
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
#include "absl/time/clock.h"
#include "actor/shm_transport.h"
#include "actor/tcp_transport.h"
#include "gtest/gtest.h"
#include "tests/actor/transport_test_util.h"

namespace tandem::actor {
namespace {

using ::tandem::actor::testing::ChildFailure;
using ::tandem::actor::testing::ForkedChild;
using ::tandem::actor::testing::In;
using ::tandem::actor::testing::MixedTensors;

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
  absl::StatusOr<std::unique_ptr<TcpTransport>> tcp = TcpTransport::Listen(actor, 2, {});
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
  EXPECT_LT(waited, absl::Milliseconds(700));
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
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(1500));
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
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  EXPECT_EQ(got.status().message(), "actor 3 died");
  kill(child.pid(), SIGKILL);
  EXPECT_EQ(child.Wait(absl::Seconds(5)), -1);
}

// Sends never block: with a 64 KiB ring, 32 messages of 16 KiB queue in the
// sender and its flusher writes them as the receiver frees space.
TEST(ShmTransport, FullRingQueuesSendsUntilSpaceFrees) {
  constexpr int64_t kRing = 64 << 10;
  auto message = [](int i) {
    ir::HostTensor t(ir::TensorType{ir::DType::kI32, {4096}});
    for (int k = 0; k < 4096; ++k) t.i32()[k] = i * 10000 + k;
    return std::vector<ir::HostTensor>{t};
  };
  int sockets[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sockets), 0);
  const pid_t pid = fork();
  if (pid == 0) {
    absl::StatusOr<Endpoint> e = Connect(Kind::kShm, 1, sockets[1], kRing);
    if (!e.ok()) _exit(10);
    for (int i = 0; i < 32; ++i) {
      absl::StatusOr<std::vector<ir::HostTensor>> got = e->transport().Receive(0, i, In(absl::Seconds(10)));
      if (!got.ok() || !SameTensors(*got, message(i))) {
        std::fprintf(stderr, "child: message %d: %s\n", i, got.ok() ? "differs" : std::string(got.status().message()).c_str());
        _exit(1);
      }
    }
    _exit(0);
  }
  absl::StatusOr<Endpoint> e = Connect(Kind::kShm, 0, sockets[0], kRing);
  ASSERT_TRUE(e.ok()) << e.status();
  const absl::Time start = absl::Now();
  for (int i = 0; i < 32; ++i) ASSERT_TRUE(e->transport().Send(1, i, message(i)).ok());
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(100));  // none of the Sends waited
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

INSTANTIATE_TEST_SUITE_P(Transports, DataPlaneTest, ::testing::Values(Kind::kShm, Kind::kTcp),
                         [](const ::testing::TestParamInfo<Kind>& info) {
                           return std::string(info.param == Kind::kShm ? "Shm" : "Tcp");
                         });

}  // namespace
}  // namespace tandem::actor
