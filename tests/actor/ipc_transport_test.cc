// The CUDA IPC data plane (ipc_transport.h) on FakeDeviceMemory, across real
// processes: actor 0 is the test process, actor 1 a forked child; the host
// channel is a ShmTransport pair set up over a socketpair. The fake's stream
// is a worker thread, optionally slowed per copy, so a protocol step that
// skips an event wait or reuses ring space too early shows up as wrong
// bytes. Every wait is bounded and every child is reaped (killed when it
// overstays).
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "actor/in_memory_transport.h"
#include "actor/ipc_transport.h"
#include "actor/shm_transport.h"
#include "backends/device_memory.h"
#include "backends/fake/fake_device_memory.h"
#include "gtest/gtest.h"
#include "tests/actor/ipc_test_util.h"

namespace tandem::actor {
namespace {

using ::tandem::actor::testing::CheckTensors;
using ::tandem::actor::testing::ChildFailure;
using ::tandem::actor::testing::ForkedChild;
using ::tandem::actor::testing::In;
using ::tandem::actor::testing::GoAhead;
using ::tandem::actor::testing::IpcTestTensors;
using ::tandem::actor::testing::Pattern;
using ::tandem::actor::testing::ReadAll;
using ::tandem::actor::testing::Upload;
using ::tandem::actor::testing::WriteAll;

// ---- One actor's side: host channel, fake device, IPC transport.

struct SideOptions {
  absl::Duration copy_delay = absl::ZeroDuration();
  int64_t ring_bytes = int64_t{1} << 20;
  int32_t slots = 8;
  bool connect = true;
};

struct Side {
  // Destroyed in reverse: the transport before the device and the channel.
  std::unique_ptr<ShmTransport> host;
  std::unique_ptr<fake::FakeDeviceMemory> memory;
  std::unique_ptr<IpcTransport> ipc;

  // Closes the IPC transport (both sides must) and flushes the host channel.
  absl::Status Finish() {
    if (absl::Status status = ipc->Close(In(absl::Seconds(10))); !status.ok()) return status;
    return host->Flush(In(absl::Seconds(10)));
  }
};

absl::StatusOr<std::unique_ptr<Side>> MakeSide(int32_t actor, int socket, const SideOptions& options = {}) {
  const int32_t peer = 1 - actor;
  auto side = std::make_unique<Side>();
  absl::StatusOr<std::unique_ptr<ShmTransport>> host = ShmTransport::Create(actor, 2, {.ring_bytes = 1 << 20});
  if (!host.ok()) return host.status();
  side->host = *std::move(host);
  if (absl::Status status = SendFd(socket, side->host->OutboundFd(peer)); !status.ok()) return status;
  absl::StatusOr<int> fd = ReceiveFd(socket, In(absl::Seconds(10)));
  if (!fd.ok()) return fd.status();
  if (absl::Status status = side->host->AttachInbound(peer, *fd); !status.ok()) return status;
  absl::StatusOr<std::unique_ptr<fake::FakeDeviceMemory>> memory =
      fake::FakeDeviceMemory::Create({.copy_delay = options.copy_delay});
  if (!memory.ok()) return memory.status();
  side->memory = *std::move(memory);
  absl::StatusOr<std::unique_ptr<IpcTransport>> ipc = IpcTransport::Create(
      actor, 2, *side->memory, *side->host, {.ring_bytes = options.ring_bytes, .slots = options.slots});
  if (!ipc.ok()) return ipc.status();
  side->ipc = *std::move(ipc);
  if (options.connect) {
    if (absl::Status status = side->ipc->Connect(In(absl::Seconds(10))); !status.ok()) return status;
  }
  return side;
}

// A child that plays actor 1: sets up its side, runs `body`, then closes.
ForkedChild ActorOne(std::function<int(Side&)> body, SideOptions options = {}) {
  return ForkedChild([body = std::move(body), options](int socket) {
    absl::StatusOr<std::unique_ptr<Side>> side = MakeSide(1, socket, options);
    if (!side.ok()) return ChildFailure(10, std::string(side.status().message()));
    const int code = body(**side);
    if (code != 0) return code;
    if (absl::Status status = (*side)->Finish(); !status.ok()) return ChildFailure(11, std::string(status.message()));
    return 0;
  });
}

// ==== FakeDeviceMemory.

TEST(IpcTransport, RoundTripsTensorsOfSeveralDtypesBitExact) {
  ForkedChild child = ActorOne([](Side& side) {
    absl::StatusOr<std::vector<backends::DeviceTensor>> got = side.ipc->Receive(0, 1, In(absl::Seconds(10)));
    if (!got.ok()) return ChildFailure(1, std::string(got.status().message()));
    if (absl::Status status = CheckTensors(*side.memory, *got, IpcTestTensors(3)); !status.ok()) {
      return ChildFailure(2, std::string(status.message()));
    }
    // Received tensors live on this side's device and can be sent on.
    return side.ipc->Send(0, 2, *std::move(got)).ok() ? 0 : 3;
  });
  absl::StatusOr<std::unique_ptr<Side>> side = MakeSide(0, child.socket());
  ASSERT_TRUE(side.ok()) << side.status();
  Side& s = **side;
  {
    absl::StatusOr<std::vector<backends::DeviceTensor>> tensors = Upload(*s.memory, IpcTestTensors(3));
    ASSERT_TRUE(tensors.ok());
    ASSERT_TRUE(s.ipc->Send(1, 1, *std::move(tensors)).ok());  // the sender keeps no reference
    absl::StatusOr<std::vector<backends::DeviceTensor>> echo = s.ipc->Receive(1, 2, In(absl::Seconds(10)));
    ASSERT_TRUE(echo.ok()) << echo.status();
    EXPECT_TRUE(CheckTensors(*s.memory, *echo, IpcTestTensors(3)).ok());
  }
  EXPECT_TRUE(s.Finish().ok());
  EXPECT_EQ(child.Wait(absl::Seconds(10)), 0);
  // Close freed the rings and events; received tensors were dropped above.
  EXPECT_EQ(s.memory->LiveObjectsForTesting(), 0);
}

// 300 messages of 0 to 96 KiB (14 MiB in all) through a 1 MiB ring with 6 slots: the ring
// wraps, slots recycle and Sends queue. The receiver takes each group of
// five in reverse order.
TEST(IpcTransport, ManyMessagesMatchedByTagThroughASmallRing) {
  constexpr int kMessages = 300;
  constexpr int kGroup = 5;
  auto message = [](int i) {
    std::vector<ir::HostTensor> tensors{Pattern(i, (i * 7919) % 24577)};
    if (i % 3 == 0) tensors.push_back(Pattern(i + 100000, i % 50));
    if (i % 11 == 0) tensors.clear();  // an empty message
    return tensors;
  };
  auto tag_of = [](int i) { return static_cast<uint64_t>(i) * 1000 + 17; };
  const SideOptions options{.ring_bytes = 1 << 20, .slots = 6};
  ForkedChild child = ActorOne(
      [&](Side& side) {
        for (int group = 0; group < kMessages; group += kGroup) {
          for (int i = group + kGroup - 1; i >= group; --i) {
            absl::StatusOr<std::vector<backends::DeviceTensor>> got =
                side.ipc->Receive(0, tag_of(i), In(absl::Seconds(10)));
            if (!got.ok()) return ChildFailure(1, std::string(got.status().message()));
            if (absl::Status status = CheckTensors(*side.memory, *got, message(i)); !status.ok()) {
              return ChildFailure(2, absl::StrCat("message ", i, ": ", status.message()));
            }
          }
        }
        return side.ipc->Send(0, 1, {}).ok() ? 0 : 3;
      },
      options);
  absl::StatusOr<std::unique_ptr<Side>> side = MakeSide(0, child.socket(), options);
  ASSERT_TRUE(side.ok()) << side.status();
  Side& s = **side;
  const absl::Time start = absl::Now();
  for (int i = 0; i < kMessages; ++i) {
    absl::StatusOr<std::vector<backends::DeviceTensor>> tensors = Upload(*s.memory, message(i));
    ASSERT_TRUE(tensors.ok());
    ASSERT_TRUE(s.ipc->Send(1, tag_of(i), *std::move(tensors)).ok()) << i;
  }
  EXPECT_TRUE(s.ipc->Flush(In(absl::Seconds(10))).ok());
  EXPECT_TRUE(s.ipc->Receive(1, 1, In(absl::Seconds(10))).ok());
  EXPECT_TRUE(s.Finish().ok());
  EXPECT_EQ(child.Wait(absl::Seconds(10)), 0);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

// A slow stream on either side: the receiver must wait for the sender's
// copy into the ring (ready event), and the sender must not overwrite a
// range before the receiver's copy out of it ran (consumed event). The ring
// holds two messages, so every range is reused many times. The receiver
// starts once every Send has returned: Sends queue, never waiting for it.
class SlowStreamTest : public ::testing::TestWithParam<std::pair<int, int>> {};

TEST_P(SlowStreamTest, RingReuseNeverCorruptsMessages) {
  constexpr int kMessages = 30;
  constexpr int64_t kElements = 16 << 10;  // 64 KiB per tensor, two per message
  auto message = [](int i) { return std::vector<ir::HostTensor>{Pattern(i, kElements), Pattern(~i, kElements)}; };
  const auto [sender_delay_ms, receiver_delay_ms] = GetParam();
  SideOptions receiver{.copy_delay = absl::Milliseconds(receiver_delay_ms), .ring_bytes = 256 << 10, .slots = 4};
  SideOptions sender = receiver;
  sender.copy_delay = absl::Milliseconds(sender_delay_ms);
  const GoAhead sends_returned;
  ForkedChild child = ActorOne(
      [&](Side& side) {
        if (!sends_returned.Wait(absl::Seconds(5))) {
          return ChildFailure(3, "the sender's Sends did not return before this receiver started");
        }
        for (int i = 0; i < kMessages; ++i) {
          absl::StatusOr<std::vector<backends::DeviceTensor>> got = side.ipc->Receive(0, i, In(absl::Seconds(10)));
          if (!got.ok()) return ChildFailure(1, std::string(got.status().message()));
          if (absl::Status status = CheckTensors(*side.memory, *got, message(i)); !status.ok()) {
            return ChildFailure(2, absl::StrCat("message ", i, ": ", status.message()));
          }
        }
        return 0;
      },
      receiver);
  absl::StatusOr<std::unique_ptr<Side>> side = MakeSide(0, child.socket(), sender);
  ASSERT_TRUE(side.ok()) << side.status();
  Side& s = **side;
  for (int i = 0; i < kMessages; ++i) {
    absl::StatusOr<std::vector<backends::DeviceTensor>> tensors = Upload(*s.memory, message(i));
    ASSERT_TRUE(tensors.ok());
    ASSERT_TRUE(s.ipc->Send(1, i, *std::move(tensors)).ok());
  }
  sends_returned.Give();
  EXPECT_TRUE(s.Finish().ok());
  EXPECT_EQ(child.Wait(absl::Seconds(20)), 0);
}

INSTANTIATE_TEST_SUITE_P(Delays, SlowStreamTest,
                         ::testing::Values(std::pair{0, 4}, std::pair{4, 0}, std::pair{3, 3}),
                         [](const ::testing::TestParamInfo<std::pair<int, int>>& info) {
                           return absl::StrCat("Sender", info.param.first, "msReceiver", info.param.second, "ms");
                         });

TEST(IpcTransport, RefusesBadMessagesWithClearErrors) {
  ForkedChild child = ActorOne(
      [](Side& side) {
        absl::StatusOr<std::vector<backends::DeviceTensor>> got = side.ipc->Receive(0, 5, In(absl::Seconds(10)));
        if (!got.ok()) return ChildFailure(1, std::string(got.status().message()));
        return CheckTensors(*side.memory, *got, {Pattern(5, 10)}).ok() ? 0 : 2;
      },
      {.ring_bytes = 64 << 10});
  absl::StatusOr<std::unique_ptr<Side>> side = MakeSide(0, child.socket(), {.ring_bytes = 64 << 10});
  ASSERT_TRUE(side.ok()) << side.status();
  Side& s = **side;
  {
    absl::StatusOr<std::vector<backends::DeviceTensor>> big = Upload(*s.memory, {Pattern(1, 20000)});  // 80 KB
    ASSERT_TRUE(big.ok());
    const absl::Status too_large = s.ipc->Send(1, 4, *big);
    EXPECT_EQ(too_large.code(), absl::StatusCode::kResourceExhausted) << too_large;
    EXPECT_NE(too_large.message().find("ring"), absl::string_view::npos) << too_large;
    EXPECT_NE(too_large.message().find("actor 0 -> actor 1 tag 4"), absl::string_view::npos) << too_large;

    EXPECT_EQ(s.ipc->Send(2, 4, {}).code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(s.ipc->Send(0, 4, {}).code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(s.ipc->Send(1, 4, {backends::DeviceTensor{}}).code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(s.ipc->Receive(-1, 4, In(absl::Seconds(1))).status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(s.ipc->Connect(In(absl::Seconds(1))).code(), absl::StatusCode::kFailedPrecondition);

    absl::StatusOr<std::vector<backends::DeviceTensor>> small = Upload(*s.memory, {Pattern(5, 10)});
    ASSERT_TRUE(small.ok());
    ASSERT_TRUE(s.ipc->Send(1, 5, *small).ok());
  }
  EXPECT_TRUE(s.Finish().ok());
  EXPECT_EQ(child.Wait(absl::Seconds(10)), 0);
  EXPECT_EQ(s.ipc->Send(1, 6, {}).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(IpcTransport, TagInFlightCannotBeSentAgainUntilReceived) {
  ForkedChild child = ActorOne([](Side& side) {
    // Receive tag 1 only after the parent tried to send it twice.
    absl::StatusOr<std::vector<ir::HostTensor>> wait = side.host->Receive(0, 77, In(absl::Seconds(10)));
    if (!wait.ok()) return ChildFailure(1, std::string(wait.status().message()));
    for (int round = 0; round < 2; ++round) {
      absl::StatusOr<std::vector<backends::DeviceTensor>> got = side.ipc->Receive(0, 1, In(absl::Seconds(10)));
      if (!got.ok()) return ChildFailure(2, std::string(got.status().message()));
      if (!CheckTensors(*side.memory, *got, {Pattern(round, 100)}).ok()) return ChildFailure(3, "wrong bytes");
      if (!side.ipc->Send(0, 2 + round, {}).ok()) return 4;
    }
    return 0;
  });
  absl::StatusOr<std::unique_ptr<Side>> side = MakeSide(0, child.socket());
  ASSERT_TRUE(side.ok()) << side.status();
  Side& s = **side;
  {
    absl::StatusOr<std::vector<backends::DeviceTensor>> first = Upload(*s.memory, {Pattern(0, 100)});
    absl::StatusOr<std::vector<backends::DeviceTensor>> second = Upload(*s.memory, {Pattern(1, 100)});
    ASSERT_TRUE(first.ok() && second.ok());
    ASSERT_TRUE(s.ipc->Send(1, 1, *first).ok());
    const absl::Status twice = s.ipc->Send(1, 1, *second);
    EXPECT_EQ(twice.code(), absl::StatusCode::kInvalidArgument) << twice;
    EXPECT_NE(twice.message().find("tag 1"), absl::string_view::npos) << twice;
    ASSERT_TRUE(s.host->Send(1, 77, {}).ok());
    ASSERT_TRUE(s.ipc->Receive(1, 2, In(absl::Seconds(10))).ok());
    // Received (and released) now: the tag may be used again, e.g. next step.
    ASSERT_TRUE(s.ipc->Send(1, 1, *second).ok());
    ASSERT_TRUE(s.ipc->Receive(1, 3, In(absl::Seconds(10))).ok());
  }
  EXPECT_TRUE(s.Finish().ok());
  EXPECT_EQ(child.Wait(absl::Seconds(10)), 0);
}

TEST(IpcTransport, MissingMessageIsDeadlineExceededNamingPeerAndTag) {
  ForkedChild child = ActorOne([](Side& side) {
    return side.ipc->Receive(0, 1, In(absl::Seconds(10))).ok() ? 0 : 1;
  });
  absl::StatusOr<std::unique_ptr<Side>> side = MakeSide(0, child.socket());
  ASSERT_TRUE(side.ok()) << side.status();
  Side& s = **side;
  const absl::Time start = absl::Now();
  absl::StatusOr<std::vector<backends::DeviceTensor>> got = s.ipc->Receive(1, 99, start + absl::Milliseconds(200));
  const absl::Duration waited = absl::Now() - start;
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDeadlineExceeded) << got.status();
  EXPECT_NE(got.status().message().find("actor 1 with tag 99"), absl::string_view::npos) << got.status();
  EXPECT_GE(waited, absl::Milliseconds(200));
  EXPECT_LT(waited, absl::Seconds(3));  // the deadline, not a longer wait, ended it
  ASSERT_TRUE(s.ipc->Send(1, 1, {}).ok());
  EXPECT_TRUE(s.Finish().ok());
  EXPECT_EQ(child.Wait(absl::Seconds(10)), 0);
}

TEST(IpcTransport, AbortWakesAWaitingReceive) {
  ForkedChild child = ActorOne([](Side& side) {
    // Never sends; waits to be killed.
    absl::SleepFor(absl::Seconds(20));
    return 0;
  });
  absl::StatusOr<std::unique_ptr<Side>> side = MakeSide(0, child.socket());
  ASSERT_TRUE(side.ok()) << side.status();
  Side& s = **side;
  std::thread aborter([&] {
    absl::SleepFor(absl::Milliseconds(100));
    s.ipc->Abort(absl::UnavailableError("actor 3 died"));
  });
  const absl::Time start = absl::Now();
  absl::StatusOr<std::vector<backends::DeviceTensor>> got = s.ipc->Receive(1, 5, start + absl::Seconds(5));
  aborter.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));  // the abort, not the deadline, ended it
  EXPECT_EQ(got.status().message(), "actor 3 died");
  EXPECT_EQ(s.ipc->Send(1, 6, {}).message(), "actor 3 died");
  EXPECT_EQ(s.ipc->Flush(In(absl::Seconds(1))).message(), "actor 3 died");
  kill(child.pid(), SIGKILL);
  EXPECT_EQ(child.Wait(absl::Seconds(5)), -1);
}

TEST(IpcTransport, ConnectWithoutPeerEndsAtTheDeadline) {
  ForkedChild child([](int socket) {
    absl::StatusOr<std::unique_ptr<Side>> side = MakeSide(1, socket, {.connect = false});
    if (!side.ok()) return ChildFailure(1, std::string(side.status().message()));
    char done = 0;
    ReadAll(socket, &done, 1);  // until the parent is done
    return 0;
  });
  absl::StatusOr<std::unique_ptr<Side>> side = MakeSide(0, child.socket(), {.connect = false});
  ASSERT_TRUE(side.ok()) << side.status();
  absl::StatusOr<std::vector<backends::DeviceTensor>> early = (*side)->ipc->Receive(1, 1, In(absl::Seconds(1)));
  EXPECT_EQ(early.status().code(), absl::StatusCode::kFailedPrecondition);
  const absl::Time start = absl::Now();
  const absl::Status status = (*side)->ipc->Connect(start + absl::Milliseconds(200));
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_NE(status.message().find("actor 1"), absl::string_view::npos) << status;
  ASSERT_TRUE(WriteAll(child.socket(), "D", 1));
  EXPECT_EQ(child.Wait(absl::Seconds(10)), 0);
}

TEST(IpcTransport, ReceiveFromAPeerThatClosedFailsAtOnce) {
  ForkedChild child = ActorOne([](Side& side) {
    absl::StatusOr<std::vector<backends::DeviceTensor>> tensors = Upload(*side.memory, {Pattern(1, 1000)});
    return tensors.ok() && side.ipc->Send(0, 1, *std::move(tensors)).ok() ? 0 : 1;
  });
  absl::StatusOr<std::unique_ptr<Side>> side = MakeSide(0, child.socket());
  ASSERT_TRUE(side.ok()) << side.status();
  Side& s = **side;
  const absl::Time start = absl::Now();
  {
    // Sent before the peer closed: still there to receive.
    absl::StatusOr<std::vector<backends::DeviceTensor>> got = s.ipc->Receive(1, 1, In(absl::Seconds(10)));
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(CheckTensors(*s.memory, *got, {Pattern(1, 1000)}).ok());
  }
  absl::StatusOr<std::vector<backends::DeviceTensor>> never = s.ipc->Receive(1, 2, In(absl::Seconds(10)));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));  // not the 10 s deadline
  EXPECT_EQ(never.status().code(), absl::StatusCode::kUnavailable) << never.status();
  EXPECT_NE(never.status().message().find("actor 1 with tag 2"), absl::string_view::npos) << never.status();
  EXPECT_NE(never.status().message().find("closed"), absl::string_view::npos) << never.status();
  EXPECT_TRUE(s.Finish().ok());
  EXPECT_EQ(child.Wait(absl::Seconds(10)), 0);
}

// Without a Close handshake from the peer, Close gives up at its deadline
// and names the peer; the destructor still frees everything.
TEST(IpcTransport, CloseNamesAPeerThatNeverCloses) {
  ForkedChild child = ActorOne([](Side&) {
    absl::SleepFor(absl::Seconds(20));
    return 0;
  });
  absl::StatusOr<std::unique_ptr<Side>> side = MakeSide(0, child.socket());
  ASSERT_TRUE(side.ok()) << side.status();
  const absl::Status status = (*side)->ipc->Close(In(absl::Milliseconds(200)));
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_NE(status.message().find("actors 1 did not close"), absl::string_view::npos) << status;
  (*side)->ipc.reset();
  EXPECT_EQ((*side)->memory->LiveObjectsForTesting(), 0);
  kill(child.pid(), SIGKILL);
  EXPECT_EQ(child.Wait(absl::Seconds(5)), -1);
}

// Three actors of four share the (fake) device, as threads of one process
// over an in-memory host channel: every ordered pair carries messages at
// once, each actor running one pump per peer. Actor 3 is not on the device.
TEST(IpcTransport, ThreeActorsExchangeOverEveryPairAtOnce) {
  constexpr int32_t kActors = 3;
  constexpr int kMessages = 40;
  auto tag_of = [](int32_t from, int32_t to, int i) { return static_cast<uint64_t>(from * 100000 + to * 1000 + i); };
  auto message = [&](int32_t from, int32_t to, int i) {
    return std::vector<ir::HostTensor>{Pattern(tag_of(from, to, i), 100 + (i * 997) % 6000)};
  };
  InMemoryNetwork network(kActors + 1);
  std::vector<std::unique_ptr<fake::FakeDeviceMemory>> memories;
  std::vector<std::unique_ptr<IpcTransport>> transports;
  for (int32_t actor = 0; actor < kActors; ++actor) {
    absl::StatusOr<std::unique_ptr<fake::FakeDeviceMemory>> memory =
        fake::FakeDeviceMemory::Create({.copy_delay = absl::Microseconds(200 * actor)});
    ASSERT_TRUE(memory.ok());
    memories.push_back(*std::move(memory));
    std::vector<int32_t> peers;
    for (int32_t peer = 0; peer < kActors; ++peer) {
      if (peer != actor) peers.push_back(peer);
    }
    absl::StatusOr<std::unique_ptr<IpcTransport>> transport = IpcTransport::Create(
        actor, kActors + 1, *memories.back(), network.Endpoint(actor),
        {.ring_bytes = 64 << 10, .slots = 4, .peers = peers});
    ASSERT_TRUE(transport.ok()) << transport.status();
    transports.push_back(*std::move(transport));
  }
  std::vector<absl::Status> results(kActors);
  std::vector<std::thread> threads;
  for (int32_t actor = 0; actor < kActors; ++actor) {
    threads.emplace_back([&, actor] {
      IpcTransport& ipc = *transports[actor];
      backends::DeviceMemory& memory = *memories[actor];
      absl::Status& result = results[actor];
      result = ipc.Connect(In(absl::Seconds(10)));
      if (!result.ok()) return;
      for (int i = 0; i < kMessages && result.ok(); ++i) {
        for (int32_t peer = 0; peer < kActors && result.ok(); ++peer) {
          if (peer == actor) continue;
          absl::StatusOr<std::vector<backends::DeviceTensor>> tensors = Upload(memory, message(actor, peer, i));
          result = tensors.ok() ? ipc.Send(peer, tag_of(actor, peer, i), *std::move(tensors)) : tensors.status();
        }
      }
      for (int i = 0; i < kMessages && result.ok(); ++i) {
        for (int32_t peer = 0; peer < kActors && result.ok(); ++peer) {
          if (peer == actor) continue;
          absl::StatusOr<std::vector<backends::DeviceTensor>> got =
              ipc.Receive(peer, tag_of(peer, actor, i), In(absl::Seconds(10)));
          result = got.ok() ? CheckTensors(memory, *got, message(peer, actor, i)) : got.status();
        }
      }
      if (result.ok()) result = ipc.Close(In(absl::Seconds(10)));
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int32_t actor = 0; actor < kActors; ++actor) EXPECT_TRUE(results[actor].ok()) << actor << ": " << results[actor];
  const absl::Status off_device = transports[0]->Send(3, 1, {});
  EXPECT_EQ(off_device.code(), absl::StatusCode::kInvalidArgument) << off_device;
  for (int32_t actor = 0; actor < kActors; ++actor) {
    transports[actor].reset();
    EXPECT_EQ(memories[actor]->LiveObjectsForTesting(), 0) << actor;
  }
}

}  // namespace
}  // namespace tandem::actor
