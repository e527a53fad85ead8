// The device-to-device data plane between GPUs (actor/nccl_transport.h) on
// two emulated GPUs and the fake NCCL, with an in-memory host channel: the
// bits of every message in whatever order the receiver asks, the 1F1B
// crossing that would deadlock on one stream per rank, sends held until
// received, and the errors (abort, a peer's failed link, malformed records).
// The fake's channel ring is small, so every large message waits for its
// receiver as it would in NCCL.
#include "actor/nccl_transport.h"

#include <memory>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "actor/device_transport.h"
#include "actor/in_memory_transport.h"
#include "actor/ipc_record.h"
#include "actor/nccl/fake_nccl.h"
#include "backends/fake/fake_device_memory.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/actor/ipc_test_util.h"

namespace tandem::actor {
namespace {

using ::tandem::actor::testing::CheckTensors;
using ::tandem::actor::testing::In;
using ::tandem::actor::testing::IpcTestTensors;
using ::tandem::actor::testing::Pattern;
using ::tandem::actor::testing::Upload;
using ::testing::HasSubstr;

// One actor's emulated GPU and its NCCL transport to the other.
struct Side {
  std::unique_ptr<fake::FakeDeviceMemory> memory;
  std::unique_ptr<nccl::FakeNccl> nccl;
  std::unique_ptr<NcclTransport> transport;  // destroyed first
};

// Two actors joined over the fake NCCL, each on its own emulated GPU.
struct Pair {
  Pair() : network(2) {
    for (int32_t actor = 0; actor < 2; ++actor) {
      Side& side = sides[actor];
      side.memory = *fake::FakeDeviceMemory::Create({});
      side.nccl = std::make_unique<nccl::FakeNccl>(*side.memory, nccl::FakeNccl::Options{.ring_bytes = 4096});
      side.transport = *NcclTransport::Create(actor, 2, *side.nccl, network.Endpoint(actor), {1 - actor});
    }
    absl::Status other;
    std::thread one([&] { other = sides[1].transport->Connect(In(absl::Seconds(10))); });
    const absl::Status zero = sides[0].transport->Connect(In(absl::Seconds(10)));
    one.join();
    EXPECT_TRUE(zero.ok()) << zero;
    EXPECT_TRUE(other.ok()) << other;
  }
  ~Pair() {
    for (Side& side : sides) side.transport.reset();
  }
  NcclTransport& transport(int32_t actor) { return *sides[actor].transport; }
  fake::FakeDeviceMemory& memory(int32_t actor) { return *sides[actor].memory; }

  InMemoryNetwork network;
  Side sides[2];
};

TEST(NcclTransport, MessagesArriveBitwiseInWhateverOrderTheyAreAskedFor) {
  Pair pair;
  for (int tag = 1; tag <= 3; ++tag) {
    absl::StatusOr<std::vector<backends::DeviceTensor>> sent = Upload(pair.memory(0), IpcTestTensors(tag));
    ASSERT_TRUE(sent.ok()) << sent.status();
    ASSERT_TRUE(pair.transport(0).Send(1, tag, *std::move(sent)).ok());
  }
  for (int tag : {3, 1, 2}) {
    absl::StatusOr<std::vector<backends::DeviceTensor>> got =
        pair.transport(1).Receive(0, tag, In(absl::Seconds(10)));
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(CheckTensors(pair.memory(1), *got, IpcTestTensors(tag)).ok()) << "tag " << tag;
  }
  ASSERT_TRUE(pair.transport(0).Flush(In(absl::Seconds(10))).ok());
  EXPECT_EQ(pair.transport(0).sends_in_flight(), 0);
  // Nothing else was sent.
  EXPECT_EQ(pair.transport(1).Receive(0, 4, In(absl::Milliseconds(50))).status().code(),
            absl::StatusCode::kDeadlineExceeded);
}

TEST(NcclTransport, ACrossingExchangeLargerThanTheRingsNeverDeadlocks) {
  // 1F1B's steady state: both actors send before they receive, each message
  // 16 times the fake's ring, so neither send completes before the other
  // actor's receive runs.
  Pair pair;
  const ir::HostTensor forward = Pattern(7, 16 * 1024), backward = Pattern(8, 16 * 1024);
  ASSERT_TRUE(pair.transport(0).Send(1, 10, *Upload(pair.memory(0), {forward})).ok());
  ASSERT_TRUE(pair.transport(1).Send(0, 20, *Upload(pair.memory(1), {backward})).ok());
  // Held until received: a flush cannot finish yet.
  EXPECT_EQ(pair.transport(0).sends_in_flight(), 1);
  EXPECT_EQ(pair.transport(0).Flush(In(absl::Milliseconds(50))).code(), absl::StatusCode::kDeadlineExceeded);
  absl::StatusOr<std::vector<backends::DeviceTensor>> at_zero = pair.transport(0).Receive(1, 20, In(absl::Seconds(10)));
  absl::StatusOr<std::vector<backends::DeviceTensor>> at_one = pair.transport(1).Receive(0, 10, In(absl::Seconds(10)));
  ASSERT_TRUE(at_zero.ok()) << at_zero.status();
  ASSERT_TRUE(at_one.ok()) << at_one.status();
  EXPECT_TRUE(CheckTensors(pair.memory(0), *at_zero, {backward}).ok());
  EXPECT_TRUE(CheckTensors(pair.memory(1), *at_one, {forward}).ok());
  for (int32_t actor = 0; actor < 2; ++actor) {
    ASSERT_TRUE(pair.transport(actor).Flush(In(absl::Seconds(10))).ok());
    EXPECT_EQ(pair.transport(actor).sends_in_flight(), 0);
  }
}

TEST(NcclTransport, AbortWakesAWaitingReceiveAndFailsLaterCalls) {
  Pair pair;
  absl::StatusOr<std::vector<backends::DeviceTensor>> got;
  std::thread waiter([&] { got = pair.transport(1).Receive(0, 5, In(absl::Seconds(30))); });
  absl::SleepFor(absl::Milliseconds(50));
  const absl::Time start = absl::Now();
  pair.transport(1).Abort(absl::UnavailableError("actor 0 is lost"));
  waiter.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(pair.transport(1).Send(0, 6, *Upload(pair.memory(1), {Pattern(1, 4)})).code(),
            absl::StatusCode::kUnavailable);
}

TEST(NcclTransport, APeersAbortedLinkFailsTheNextCallNamingThePeer) {
  Pair pair;
  // Actor 1 aborts (its process failing): its communicators end, and actor
  // 0 learns it from NCCL before it touches the host channel.
  pair.transport(1).Abort(absl::InternalError("actor 1 failed"));
  absl::Status sent = pair.transport(0).Send(1, 1, *Upload(pair.memory(0), {Pattern(2, 8)}));
  ASSERT_FALSE(sent.ok());
  EXPECT_EQ(sent.code(), absl::StatusCode::kAborted) << sent;
  EXPECT_THAT(std::string(sent.message()),
              HasSubstr("actor 0: the NCCL link with actor 1: fake-nccl: the peer aborted the communicator"));
}

TEST(NcclTransport, AMalformedRecordIsDataLossNamingTheSender) {
  Pair pair;
  // A message record with one tensor of rank 40.
  ipc::RecordWriter record(ipc::RecordKind::kNcclMessage, 0, 1);
  record.Put64(7);
  record.Put32(1);
  record.Put32(0);
  record.Put32(40);
  for (size_t i = 2; i < ipc::kTypeWords; ++i) record.Put32(0);
  ASSERT_TRUE(pair.network.Endpoint(0).Send(1, kNcclHostTagBase + 1, {ipc::RecordTensor(record.Take())}).ok());
  absl::StatusOr<std::vector<backends::DeviceTensor>> got = pair.transport(1).Receive(0, 7, In(absl::Seconds(10)));
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss) << got.status();
  EXPECT_THAT(std::string(got.status().message()),
              HasSubstr("actor 1: malformed NCCL record from actor 0: tensor 0: dtype 0 and rank 40"));
}

// Two actors on one GPU that the launcher could not tell apart (srun tasks
// choosing their GPUs): NCCL would refuse the pair, so it gets no
// communicators, and the device transport stages it through the host.
TEST(NcclTransport, APeerOnTheSameDeviceIsLeftToTheHost) {
  InMemoryNetwork network(2);
  std::unique_ptr<fake::FakeDeviceMemory> memory[2];
  std::unique_ptr<nccl::FakeNccl> library[2];
  std::unique_ptr<DeviceTransport> transport[2];
  for (int32_t actor = 0; actor < 2; ++actor) {
    memory[actor] = *fake::FakeDeviceMemory::Create({});
    library[actor] = std::make_unique<nccl::FakeNccl>(
        *memory[actor], nccl::FakeNccl::Options{.device_id = std::string(nccl::kDeviceIdBytes, 'g')});
    transport[actor] = *DeviceTransport::Create(network.Endpoint(actor), *memory[actor], 2, {.nccl = library[actor].get()});
  }
  absl::Status one;
  std::thread joiner([&] { one = transport[1]->Connect({}, In(absl::Seconds(10))); });
  const absl::Status zero = transport[0]->Connect({}, In(absl::Seconds(10)));
  joiner.join();
  ASSERT_TRUE(zero.ok()) << zero;
  ASSERT_TRUE(one.ok()) << one;
  const ir::HostTensor values = Pattern(4, 5000);
  ASSERT_TRUE(transport[0]->SendDevice(1, 3, *Upload(*memory[0], {values})).ok());
  absl::StatusOr<std::vector<backends::DeviceTensor>> got = transport[1]->ReceiveDevice(0, 3, In(absl::Seconds(10)));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(CheckTensors(*memory[1], *got, {values}).ok());
  // The staged message went over the host channel under its own tag.
  EXPECT_TRUE(network.PendingMessages().empty());
  for (auto& t : transport) t.reset();
}

TEST(NcclTransport, RefusesBadPeersAndUseBeforeConnect) {
  std::unique_ptr<fake::FakeDeviceMemory> memory = *fake::FakeDeviceMemory::Create({});
  nccl::FakeNccl library(*memory, {});
  InMemoryNetwork network(3);
  for (const std::vector<int32_t>& peers : std::vector<std::vector<int32_t>>{{0}, {3}, {1, 1}, {-1}}) {
    absl::StatusOr<std::unique_ptr<NcclTransport>> created =
        NcclTransport::Create(0, 3, library, network.Endpoint(0), peers);
    ASSERT_FALSE(created.ok());
    EXPECT_THAT(std::string(created.status().message()), HasSubstr("bad NCCL peer"));
  }
  std::unique_ptr<NcclTransport> transport = *NcclTransport::Create(0, 3, library, network.Endpoint(0), {2});
  EXPECT_EQ(transport->Send(2, 1, {}).code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace tandem::actor
