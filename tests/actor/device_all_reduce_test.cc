// The all-reduce of device-resident gradients (actor/device_all_reduce.h):
// three members, each an emulated GPU of its own joined by the fake NCCL
// (DeviceTransport over an in-memory host channel), reduce buckets of two
// tensors whose sum depends on the order of addition; every member gets
// ir::SumInReplicaOrder's bits, also when the bucket has fewer elements than
// there are members.
#include "actor/device_all_reduce.h"

#include <memory>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "actor/device_transport.h"
#include "actor/in_memory_transport.h"
#include "actor/nccl/fake_nccl.h"
#include "backends/fake/fake_cuda_device.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/all_reduce.h"
#include "tests/actor/ipc_test_util.h"

namespace tandem::actor {
namespace {

using ::tandem::actor::testing::In;
using ::tandem::actor::testing::OrderSensitiveBucket;
using ::tandem::actor::testing::Upload;
using ::testing::HasSubstr;

constexpr int32_t kMembers = 3;

// One member: its emulated GPU, fake NCCL and device data plane.
struct Member {
  std::shared_ptr<fake::FakeCudaDevice> device;
  std::unique_ptr<nccl::FakeNccl> nccl;
  std::unique_ptr<DeviceTransport> transport;  // destroyed first
};

class DeviceAllReduceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int32_t actor = 0; actor < kMembers; ++actor) {
      Member& member = members_[actor];
      member.device = *fake::FakeCudaDevice::Create({});
      member.nccl = std::make_unique<nccl::FakeNccl>(member.device->fake_memory(), nccl::FakeNccl::Options{});
      member.transport = *DeviceTransport::Create(network_.Endpoint(actor), member.device->fake_memory(), kMembers,
                                                  {.nccl = member.nccl.get()});
    }
    std::vector<std::thread> connecting;
    for (Member& member : members_) {
      connecting.emplace_back([&member] { EXPECT_TRUE(member.transport->Connect({}, In(absl::Seconds(10))).ok()); });
    }
    for (std::thread& thread : connecting) thread.join();
  }
  void TearDown() override {
    for (Member& member : members_) member.transport.reset();
  }

  // Reduces, on every member at once, a bucket of tensors of `sizes`
  // elements holding OrderSensitiveBucket(member); checks every member's
  // result against ir::SumInReplicaOrder bit for bit.
  void ReduceAndCheck(const std::vector<int64_t>& sizes) {
    int64_t elements = 0;
    for (int64_t size : sizes) elements += size;
    std::vector<std::vector<float>> buckets;
    for (int32_t member = 0; member < kMembers; ++member) buckets.push_back(OrderSensitiveBucket(member, elements));
    std::vector<float> expected(static_cast<size_t>(elements));
    std::vector<const float*> shards;
    for (const std::vector<float>& bucket : buckets) shards.push_back(bucket.data());
    ir::SumInReplicaOrder(shards, expected);

    std::vector<std::thread> threads;
    for (int32_t actor = 0; actor < kMembers; ++actor) {
      threads.emplace_back([&, actor] {
        Member& member = members_[actor];
        std::vector<ir::HostTensor> host;
        int64_t at = 0;
        for (int64_t size : sizes) {
          ir::HostTensor tensor({ir::DType::kF32, {size}});
          std::copy_n(buckets[actor].data() + at, size, tensor.f32());
          at += size;
          host.push_back(std::move(tensor));
        }
        DeviceAllReduce reduce(*member.device);
        ASSERT_TRUE(reduce.Start(*member.transport, 7, {0, 1, 2}, actor, *Upload(member.device->fake_memory(), host))
                        .ok());
        absl::StatusOr<std::vector<backends::DeviceTensor>> reduced =
            reduce.Finish(*member.transport, 7, In(absl::Seconds(10)));
        ASSERT_TRUE(reduced.ok()) << reduced.status();
        ASSERT_EQ(reduced->size(), sizes.size());
        int64_t offset = 0;
        for (const backends::DeviceTensor& tensor : *reduced) {
          absl::StatusOr<ir::HostTensor> got =
              backends::CopyToHost(member.device->fake_memory(), tensor, In(absl::Seconds(10)));
          ASSERT_TRUE(got.ok()) << got.status();
          for (int64_t i = 0; i < got->num_elements(); ++i) {
            ASSERT_EQ(got->f32()[i], expected[static_cast<size_t>(offset + i)])
                << "member " << actor << ", element " << offset + i;
          }
          offset += got->num_elements();
        }
      });
    }
    for (std::thread& thread : threads) thread.join();
  }

  InMemoryNetwork network_{kMembers};
  Member members_[kMembers];
};

TEST_F(DeviceAllReduceTest, EveryMemberGetsTheReplicaOrderedSumBitForBit) {
  ReduceAndCheck({1000, 337});  // shards cut across the two tensors
}

TEST_F(DeviceAllReduceTest, ABucketSmallerThanTheGroupStillReduces) {
  ReduceAndCheck({2});  // one member's shard is empty
}

TEST_F(DeviceAllReduceTest, RefusesAStrangerAWaitWithoutStartAndAMissingMember) {
  Member& member = members_[0];
  DeviceAllReduce reduce(*member.device);
  const std::vector<backends::DeviceTensor> bucket =
      *Upload(member.device->fake_memory(), {ir::HostTensor({ir::DType::kF32, {4}})});
  EXPECT_THAT(std::string(reduce.Start(*member.transport, 1, {1, 2}, 0, bucket).message()),
              HasSubstr("actor 0 is not in replica group (actors 1, 2)"));
  EXPECT_EQ(reduce.Finish(*member.transport, 1, In(absl::Seconds(1))).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // Member 1 never starts: member 0's wait ends at its deadline.
  ASSERT_TRUE(reduce.Start(*member.transport, 2, {0, 1}, 0, bucket).ok());
  absl::StatusOr<std::vector<backends::DeviceTensor>> reduced =
      reduce.Finish(*member.transport, 2, In(absl::Milliseconds(100)));
  EXPECT_EQ(reduced.status().code(), absl::StatusCode::kDeadlineExceeded) << reduced.status();
}

}  // namespace
}  // namespace tandem::actor
