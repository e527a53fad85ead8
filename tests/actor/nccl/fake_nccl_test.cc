// The fake NCCL (actor/nccl/fake_nccl.h): two emulated GPUs (two
// FakeDeviceMemory objects) joined through a unique id, transfers larger
// than the channel's ring matched in order on side streams, the waits that
// end with an abort or a peer process's death, and the arguments it refuses.
#include "actor/nccl/fake_nccl.h"

#include <signal.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/actor/transport_test_util.h"

namespace tandem::actor::nccl {
namespace {

using ::tandem::actor::testing::ForkedChild;
using ::tandem::actor::testing::In;
using ::tandem::actor::testing::ReadAll;
using ::tandem::actor::testing::WriteAll;
using ::testing::HasSubstr;

constexpr int64_t kRing = 4096;

// One emulated GPU with its fake NCCL and a side stream.
struct Gpu {
  Gpu() {
    memory = *fake::FakeDeviceMemory::Create({});
    nccl = std::make_unique<FakeNccl>(*memory, FakeNccl::Options{.ring_bytes = kRing});
    stream = *memory->CreateSideStream();
  }
  // Bytes `seed` * i mod 251, in a fresh allocation.
  backends::DeviceAddress Filled(int64_t bytes, int seed) {
    const backends::DeviceAddress address = *memory->Allocate(bytes, backends::Sharing::kPrivate);
    std::vector<unsigned char> host(static_cast<size_t>(bytes));
    for (int64_t i = 0; i < bytes; ++i) host[i] = static_cast<unsigned char>((i * seed + 1) % 251);
    EXPECT_TRUE(memory->CopyFromHostSync(address, host.data(), bytes, In(absl::Seconds(10))).ok());
    return address;
  }
  // Waits until everything enqueued on side stream `on` (by default the
  // one made here) ran.
  absl::Status Drain(absl::Duration timeout, backends::StreamId on = 0) {
    const backends::DeviceEvent event = *memory->CreateIpcEvent();
    if (absl::Status status = memory->RecordEventOn(on == 0 ? stream : on, event); !status.ok()) return status;
    const absl::Time deadline = In(timeout);
    while (!*memory->QueryEvent(event)) {
      if (absl::Now() > deadline) return absl::DeadlineExceededError("the side stream did not drain");
      absl::SleepFor(absl::Milliseconds(1));
    }
    return memory->DestroyEvent(event);
  }
  // Members destroyed in reverse: the library before the memory.
  std::unique_ptr<fake::FakeDeviceMemory> memory;
  std::unique_ptr<FakeNccl> nccl;
  backends::StreamId stream = 0;
};

std::vector<unsigned char> Read(Gpu& gpu, backends::DeviceAddress address, int64_t bytes) {
  std::vector<unsigned char> host(static_cast<size_t>(bytes));
  EXPECT_TRUE(gpu.memory->CopyToHostSync(host.data(), address, bytes, In(absl::Seconds(10))).ok());
  return host;
}

// Joins one communicator between `a` (rank 0) and `b` (rank 1).
std::pair<NcclLibrary::Comm, NcclLibrary::Comm> Join(Gpu& a, Gpu& b) {
  const std::string id = *a.nccl->NewUniqueId();
  EXPECT_EQ(id.size(), kNcclUniqueIdBytes);
  const NcclLibrary::Comm comm_a = *a.nccl->StartJoin(id, 2, 0);
  EXPECT_EQ(*a.nccl->State(comm_a), false);  // rank 1 has not joined
  const NcclLibrary::Comm comm_b = *b.nccl->StartJoin(id, 2, 1);
  EXPECT_EQ(*a.nccl->State(comm_a), true);
  EXPECT_EQ(*b.nccl->State(comm_b), true);
  return {comm_a, comm_b};
}

TEST(FakeNccl, TransfersLargerThanTheRingArriveInOrderBitForBit) {
  Gpu a, b;
  auto [comm_a, comm_b] = Join(a, b);
  // Three sends of 2.5, 0 and 1 rings, received in the same order.
  const std::vector<int64_t> sizes = {kRing * 5 / 2, 0, kRing + 7};
  std::vector<backends::DeviceAddress> sources, targets;
  for (size_t i = 0; i < sizes.size(); ++i) {
    sources.push_back(a.Filled(sizes[i], static_cast<int>(i) + 3));
    targets.push_back(*b.memory->Allocate(sizes[i], backends::Sharing::kPrivate));
    ASSERT_TRUE(a.nccl->Send(comm_a, sources[i], sizes[i], 1, a.stream).ok());
  }
  // The sender cannot finish before the receiver takes the bytes out.
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(a.Drain(absl::Milliseconds(1)).code(), absl::StatusCode::kDeadlineExceeded);
  for (size_t i = 0; i < sizes.size(); ++i) {
    ASSERT_TRUE(b.nccl->Receive(comm_b, targets[i], sizes[i], 0, b.stream).ok());
  }
  ASSERT_TRUE(a.Drain(absl::Seconds(10)).ok());
  ASSERT_TRUE(b.Drain(absl::Seconds(10)).ok());
  for (size_t i = 0; i < sizes.size(); ++i) {
    EXPECT_EQ(Read(b, targets[i], sizes[i]), Read(a, sources[i], sizes[i])) << "transfer " << i;
  }
  EXPECT_TRUE(*a.nccl->State(comm_a));
  EXPECT_TRUE(a.nccl->Destroy(comm_a).ok());
  EXPECT_TRUE(b.nccl->Destroy(comm_b).ok());
}

TEST(FakeNccl, BothDirectionsOfOneCommunicatorMoveAtOnce) {
  Gpu a, b;
  auto [comm_a, comm_b] = Join(a, b);
  const int64_t bytes = 3 * kRing;
  const backends::DeviceAddress from_a = a.Filled(bytes, 5), from_b = b.Filled(bytes, 9);
  const backends::DeviceAddress into_a = *a.memory->Allocate(bytes, backends::Sharing::kPrivate);
  const backends::DeviceAddress into_b = *b.memory->Allocate(bytes, backends::Sharing::kPrivate);
  // Each rank sends and receives on streams of its own.
  const backends::StreamId a_recv = *a.memory->CreateSideStream(), b_recv = *b.memory->CreateSideStream();
  ASSERT_TRUE(a.nccl->Send(comm_a, from_a, bytes, 1, a.stream).ok());
  ASSERT_TRUE(b.nccl->Send(comm_b, from_b, bytes, 0, b.stream).ok());
  ASSERT_TRUE(a.nccl->Receive(comm_a, into_a, bytes, 1, a_recv).ok());
  ASSERT_TRUE(b.nccl->Receive(comm_b, into_b, bytes, 0, b_recv).ok());
  for (Gpu* gpu : {&a, &b}) {
    ASSERT_TRUE(gpu->Drain(absl::Seconds(10)).ok());
    ASSERT_TRUE(gpu->Drain(absl::Seconds(10), gpu == &a ? a_recv : b_recv).ok());
  }
  EXPECT_EQ(Read(a, into_a, bytes), Read(b, from_b, bytes));
  EXPECT_EQ(Read(b, into_b, bytes), Read(a, from_a, bytes));
}

TEST(FakeNccl, AnAbortEndsAWaitingTransferOnBothRanks) {
  Gpu a, b;
  auto [comm_a, comm_b] = Join(a, b);
  const backends::DeviceAddress target = *b.memory->Allocate(kRing, backends::Sharing::kPrivate);
  ASSERT_TRUE(b.nccl->Receive(comm_b, target, kRing, 0, b.stream).ok());  // nothing will come
  absl::SleepFor(absl::Milliseconds(20));
  const absl::Time start = absl::Now();
  a.nccl->Abort(comm_a);
  ASSERT_TRUE(b.Drain(absl::Seconds(5)).ok());
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  absl::StatusOr<bool> state = b.nccl->State(comm_b);
  ASSERT_FALSE(state.ok());
  EXPECT_EQ(state.status().code(), absl::StatusCode::kAborted) << state.status();
  EXPECT_THAT(std::string(state.status().message()), HasSubstr("aborted with 4096 of 4096 bytes to receive"));
  // The aborted communicator is gone from its rank's table.
  EXPECT_EQ(a.nccl->State(comm_a).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(FakeNccl, APeerProcessThatDiesEndsTheTransferAsUnavailable) {
  // The child makes the id, joins as rank 0, hands the id over and dies
  // when told to, without a word to the communicator.
  ForkedChild child([](int socket) {
    Gpu gpu;
    const std::string id = *gpu.nccl->NewUniqueId();
    if (!gpu.nccl->StartJoin(id, 2, 0).ok()) return 2;
    if (!WriteAll(socket, id.data(), id.size())) return 3;
    char go = 0;
    if (!ReadAll(socket, &go, 1)) return 4;
    raise(SIGKILL);
    return 5;
  });
  std::string id(kNcclUniqueIdBytes, '\0');
  ASSERT_TRUE(ReadAll(child.socket(), id.data(), id.size()));
  Gpu gpu;
  const NcclLibrary::Comm comm = *gpu.nccl->StartJoin(id, 2, 1);
  ASSERT_TRUE(*gpu.nccl->State(comm));
  const backends::DeviceAddress target = *gpu.memory->Allocate(kRing, backends::Sharing::kPrivate);
  ASSERT_TRUE(gpu.nccl->Receive(comm, target, kRing, 0, gpu.stream).ok());
  const char go = 1;
  ASSERT_TRUE(WriteAll(child.socket(), &go, 1));
  EXPECT_EQ(child.Wait(absl::Seconds(10)), -1);  // killed by its signal
  ASSERT_TRUE(gpu.Drain(absl::Seconds(5)).ok());
  absl::StatusOr<bool> state = gpu.nccl->State(comm);
  ASSERT_FALSE(state.ok());
  EXPECT_EQ(state.status().code(), absl::StatusCode::kUnavailable) << state.status();
  EXPECT_THAT(std::string(state.status().message()), HasSubstr("rank 0 (process "));
  EXPECT_THAT(std::string(state.status().message()), HasSubstr("is gone"));
  gpu.nccl->Abort(comm);
}

TEST(FakeNccl, RefusesMalformedIdsRanksAndTransfers) {
  Gpu a, b;
  EXPECT_THAT(std::string(a.nccl->StartJoin("short", 2, 0).status().message()), HasSubstr("a unique id of 5 bytes"));
  const std::string id = *a.nccl->NewUniqueId();
  EXPECT_THAT(std::string(a.nccl->StartJoin(id, 3, 0).status().message()), HasSubstr("communicators of 2 ranks"));
  EXPECT_THAT(std::string(a.nccl->StartJoin(id, 2, 2).status().message()), HasSubstr("rank 2 of 2"));
  std::string not_fake(kNcclUniqueIdBytes, 'x');
  EXPECT_THAT(std::string(a.nccl->StartJoin(not_fake, 2, 0).status().message()), HasSubstr("not a fake NCCL"));
  const NcclLibrary::Comm comm = *a.nccl->StartJoin(id, 2, 0);
  EXPECT_THAT(std::string(b.nccl->StartJoin(id, 2, 0).status().message()), HasSubstr("rank 0 joined"));
  const backends::DeviceAddress data = a.Filled(16, 1);
  EXPECT_EQ(a.nccl->Send(comm, data, 16, 0, a.stream).code(), absl::StatusCode::kInvalidArgument);  // itself
  EXPECT_EQ(a.nccl->Send(comm, data, 16, 1, 99).code(), absl::StatusCode::kInvalidArgument);        // no stream
  EXPECT_EQ(a.nccl->Send(comm, data, 16, 1, 0).code(), absl::StatusCode::kInvalidArgument);   // the main stream
  EXPECT_EQ(a.nccl->Send(comm + 100, data, 16, 1, a.stream).code(), absl::StatusCode::kInvalidArgument);
  a.nccl->Abort(comm);
}

}  // namespace
}  // namespace tandem::actor::nccl
