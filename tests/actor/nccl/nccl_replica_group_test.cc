// The GPU replica group (actor/nccl/nccl_replica_group.h): its ordered sum
// kernel gives ir::SumInReplicaOrder's bits and a member that never joins is
// a deadline (one GPU); with two or more GPUs, every member ends with the
// replica-ordered sum, bit for bit. Label `gpu`: skips without the GPUs.
#include "actor/nccl/nccl_replica_group.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "backends/cuda/cuda_kernels.cuh"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/all_reduce.h"
#include "tests/actor/transport_test_util.h"
#include "tests/backends/cuda/probe_in_child.h"

namespace tandem::actor::nccl {
namespace {

using ::testing::HasSubstr;

using ::tandem::actor::testing::OrderSensitiveBucket;

std::vector<float> OrderedSum(const std::vector<std::vector<float>>& buckets) {
  std::vector<const float*> shards;
  for (const std::vector<float>& bucket : buckets) shards.push_back(bucket.data());
  std::vector<float> sum(buckets[0].size());
  ir::SumInReplicaOrder(shards, sum);
  return sum;
}

uint32_t Bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

TEST(NcclReplicaGroup, RefusesAMalformedIdOrGroup) {
  EXPECT_THAT(NcclReplicaGroup::Join("short", {0, 1}, 0, 0, absl::Now()).status().message(),
              HasSubstr("128 bytes, not 5"));
  EXPECT_EQ(NcclReplicaGroup::Join(std::string(kNcclUniqueIdBytes, 'x'), {0}, 0, 0, absl::Now()).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(NcclReplicaGroup::Join(std::string(kNcclUniqueIdBytes, 'x'), {0, 1}, 2, 0, absl::Now()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(NcclReplicaGroup, TheOrderedSumKernelGivesTheReferenceBits) {
  if (cuda::ProbeInChild().count < 1) GTEST_SKIP() << "no CUDA device: " << cuda::ProbeInChild().why;
  const int32_t replicas = 5;
  const int64_t elements = 1000, stride = 1024;
  std::vector<std::vector<float>> buckets;
  std::vector<float> slots(replicas * stride);
  for (int32_t r = 0; r < replicas; ++r) {
    buckets.push_back(OrderSensitiveBucket(r, elements));
    std::copy(buckets[r].begin(), buckets[r].end(), slots.begin() + r * stride);
  }
  float* device_slots = nullptr;
  float* device_sum = nullptr;
  ASSERT_EQ(cudaMalloc(&device_slots, slots.size() * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&device_sum, elements * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(device_slots, slots.data(), slots.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cuda::kernels::LaunchSumInOrder(device_slots, stride, replicas, device_sum, elements, nullptr),
            cudaSuccess);
  std::vector<float> sum(elements);
  ASSERT_EQ(cudaMemcpy(sum.data(), device_sum, elements * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(device_slots);
  cudaFree(device_sum);
  const std::vector<float> expected = OrderedSum(buckets);
  for (int64_t i = 0; i < elements; ++i) EXPECT_EQ(Bits(sum[i]), Bits(expected[i])) << i;
}

TEST(NcclReplicaGroup, AMemberThatNeverJoinsIsADeadlineNotAHang) {
  if (cuda::ProbeInChild().count < 1) GTEST_SKIP() << "no CUDA device: " << cuda::ProbeInChild().why;
  absl::StatusOr<std::string> id = NewNcclUniqueId();
  ASSERT_TRUE(id.ok()) << id.status();
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<NcclReplicaGroup>> joined =
      NcclReplicaGroup::Join(*id, {0, 2}, 0, 0, absl::Now() + absl::Seconds(2));
  ASSERT_FALSE(joined.ok());
  EXPECT_EQ(joined.status().code(), absl::StatusCode::kDeadlineExceeded) << joined.status();
  EXPECT_THAT(joined.status().message(), HasSubstr("replica group (actors 0, 2)"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
}

TEST(NcclReplicaGroup, EveryMemberGetsTheReplicaOrderedSumBitForBit) {
  const int gpus = cuda::ProbeInChild().count;
  if (gpus < 2) GTEST_SKIP() << "needs 2 CUDA devices (NCCL allows one rank per GPU), " << gpus << " visible";
  const int32_t replicas = std::min(gpus, 4);
  absl::StatusOr<std::string> id = NewNcclUniqueId();
  ASSERT_TRUE(id.ok()) << id.status();
  std::vector<int32_t> actors;
  for (int32_t r = 0; r < replicas; ++r) actors.push_back(2 * r + 1);
  for (int64_t elements : {int64_t{10}, int64_t{1} << 20}) {  // uneven shards; a large bucket
    std::vector<std::vector<float>> buckets;
    for (int32_t r = 0; r < replicas; ++r) buckets.push_back(OrderSensitiveBucket(r, elements));
    const std::vector<float> expected = OrderedSum(buckets);
    std::vector<absl::Status> statuses(replicas);
    std::vector<std::thread> threads;
    const std::string unique_id = elements == 10 ? *id : *NewNcclUniqueId();
    for (int32_t r = 0; r < replicas; ++r) {
      threads.emplace_back([&, r] {
        absl::StatusOr<std::unique_ptr<NcclReplicaGroup>> group =
            NcclReplicaGroup::Join(unique_id, actors, r, r, absl::Now() + absl::Seconds(60));
        statuses[r] = group.ok() ? (*group)->AllReduce(buckets[r], 1, absl::Seconds(60)) : group.status();
      });
    }
    for (std::thread& thread : threads) thread.join();
    for (int32_t r = 0; r < replicas; ++r) {
      ASSERT_TRUE(statuses[r].ok()) << statuses[r];
      for (int64_t i = 0; i < elements; ++i) {
        ASSERT_EQ(Bits(buckets[r][i]), Bits(expected[i])) << "replica " << r << ", element " << i;
      }
    }
  }
}

}  // namespace
}  // namespace tandem::actor::nccl
