// The replica groups' all-reduce on the actors' own TCP
// (actor/tcp_collective.h) and its background runner (actor/collective.h):
// every member ends with the same bits, the replicas' buckets added in
// replica order, whatever the shard split; nothing waits past its
// deadline; a stranger cannot join or disturb a group.
#include "actor/collective.h"

#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "actor/replica_group.h"
#include "actor/tcp_collective.h"
#include "actor/tcp_transport.h"
#include "backends/cpu/interpreter.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/all_reduce.h"
#include "tests/actor/transport_test_util.h"

namespace tandem::actor {
namespace {

using ::testing::HasSubstr;

using ::tandem::actor::testing::OrderSensitiveBucket;

// The reference's two-level order: ((b0 + b1) + b2) ... with
// cpu::AccumulateGradient.
std::vector<float> ReferenceSum(int32_t replicas, int64_t elements) {
  const ir::TensorType type{ir::DType::kF32, {elements}};
  ir::HostTensor total(type);
  std::vector<float> first = OrderSensitiveBucket(0, elements);
  std::copy(first.begin(), first.end(), total.f32());
  for (int32_t r = 1; r < replicas; ++r) {
    ir::HostTensor next(type);
    std::vector<float> values = OrderSensitiveBucket(r, elements);
    std::copy(values.begin(), values.end(), next.f32());
    total = *cpu::AccumulateGradient(total, next);
  }
  return std::vector<float>(total.f32(), total.f32() + elements);
}

TEST(AllReduceShards, CoverTheBucketAndSendWhatARingSends) {
  for (int64_t elements : {0, 1, 7, 10, 12, 1000}) {
    for (int32_t size : {2, 3, 4, 7}) {
      int64_t next = 0;
      int64_t group_sent = 0;
      for (int32_t rank = 0; rank < size; ++rank) {
        const ir::Shard shard = ir::ShardOf(elements, size, rank);
        EXPECT_EQ(shard.begin, next);
        EXPECT_GE(shard.length, elements / size);
        EXPECT_LE(shard.length, elements / size + 1);
        next += shard.length;
        group_sent += ir::AllReduceSentBytes(elements, size, rank);
      }
      EXPECT_EQ(next, elements);
      EXPECT_EQ(group_sent, 2 * (size - 1) * elements * 4) << elements << " elements, " << size << " members";
    }
  }
  EXPECT_EQ(ir::AllReduceSentBytes(12, 3, 1), 2 * 2 * 12 * 4 / 3);
}

constexpr char kToken[] = "the-job's-token";

TEST(TcpCollectiveGroup, EveryMemberGetsTheReplicaOrderedSumBitForBit) {
  for (int32_t replicas : {2, 3}) {
    const int64_t elements = 10;  // not a multiple of 3: uneven shards
    std::vector<int32_t> actors;
    for (int32_t r = 0; r < replicas; ++r) actors.push_back(2 * r + 1);
    absl::StatusOr<std::vector<std::unique_ptr<TcpCollectiveGroup>>> members =
        ConnectGroupInProcess(actors, {.host = "127.0.0.1", .token = kToken}, absl::Seconds(20));
    ASSERT_TRUE(members.ok()) << members.status();
    std::vector<std::vector<float>> buckets;
    for (int32_t r = 0; r < replicas; ++r) buckets.push_back(OrderSensitiveBucket(r, elements));
    std::vector<absl::Status> statuses(replicas);
    std::vector<std::thread> threads;
    for (int32_t r = 0; r < replicas; ++r) {
      threads.emplace_back([&, r] { statuses[r] = (*members)[r]->AllReduce(buckets[r], 7, absl::Seconds(20)); });
    }
    for (std::thread& thread : threads) thread.join();
    const std::vector<float> expected = ReferenceSum(replicas, elements);
    for (int32_t r = 0; r < replicas; ++r) {
      ASSERT_TRUE(statuses[r].ok()) << statuses[r];
      for (int64_t i = 0; i < elements; ++i) {
        EXPECT_EQ(absl::bit_cast<uint32_t>(buckets[r][i]), absl::bit_cast<uint32_t>(expected[i]))
            << "replica " << r << ", element " << i;
      }
    }
  }
}

// The actor service's path: each member opens through ReplicaGroupOpening,
// the offers are relayed as a controller relays them, and the group the
// offers choose (TCP, for CPU actors) reduces in replica order.
TEST(ReplicaGroupOpening, MembersConnectThroughRelayedOffersAndReduceInReplicaOrder) {
  const std::vector<int32_t> actors = {0, 2, 4};
  const auto replicas = static_cast<int32_t>(actors.size());
  std::vector<std::unique_ptr<ReplicaGroupOpening>> openings;
  for (int32_t r = 0; r < replicas; ++r) {
    absl::StatusOr<std::unique_ptr<ReplicaGroupOpening>> opening = ReplicaGroupOpening::Open(
        {.actors = actors, .rank = r, .host = "127.0.0.1", .token = kToken});
    ASSERT_TRUE(opening.ok()) << opening.status();
    openings.push_back(*std::move(opening));
  }
  std::vector<std::unique_ptr<CollectiveGroup>> groups(replicas);
  std::vector<absl::Status> statuses(replicas);
  std::vector<std::thread> threads;
  for (int32_t r = 0; r < replicas; ++r) {
    std::vector<std::string> offers(replicas);  // what each member offered member r
    for (int32_t j = 0; j < replicas; ++j) {
      if (j != r) offers[j] = openings[j]->Offer()[r];
    }
    threads.emplace_back([&, r, offers] {
      absl::StatusOr<std::unique_ptr<CollectiveGroup>> group = openings[r]->Connect(offers, absl::Seconds(20));
      statuses[r] = group.status();
      if (group.ok()) groups[r] = *std::move(group);
    });
  }
  for (std::thread& thread : threads) thread.join();
  threads.clear();
  for (int32_t r = 0; r < replicas; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << statuses[r];
    EXPECT_EQ(groups[r]->rank(), r);
  }
  const int64_t elements = 11;
  std::vector<std::vector<float>> buckets;
  for (int32_t r = 0; r < replicas; ++r) buckets.push_back(OrderSensitiveBucket(r, elements));
  for (int32_t r = 0; r < replicas; ++r) {
    threads.emplace_back([&, r] { statuses[r] = groups[r]->AllReduce(buckets[r], 3, absl::Seconds(20)); });
  }
  for (std::thread& thread : threads) thread.join();
  const std::vector<float> expected = ReferenceSum(replicas, elements);
  for (int32_t r = 0; r < replicas; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << statuses[r];
    for (int64_t i = 0; i < elements; ++i) {
      EXPECT_EQ(absl::bit_cast<uint32_t>(buckets[r][i]), absl::bit_cast<uint32_t>(expected[i])) << r << ", " << i;
    }
  }
}

// The test: strangers reach a member while a reduction waits on a
// late member. One sends garbage, one another job's token claiming a
// member's rank; both are refused and counted, and every member still
// gets the reference's bits.
TEST(TcpCollectiveGroup, StrangersDuringAReductionAreRefusedCountedAndChangeNothing) {
  const std::vector<int32_t> actors = {1, 3, 5};
  const int64_t elements = 13;
  std::vector<std::string> notices;
  absl::Mutex notices_mu;
  TcpCollectiveOptions options{.host = "127.0.0.1", .token = kToken, .log = [&](absl::string_view line) {
                                 absl::MutexLock lock(&notices_mu);
                                 notices.emplace_back(line);
                               }};
  absl::StatusOr<std::vector<std::unique_ptr<TcpCollectiveGroup>>> members =
      ConnectGroupInProcess(actors, options, absl::Seconds(20));
  ASSERT_TRUE(members.ok()) << members.status();
  std::vector<std::vector<float>> buckets;
  for (int32_t r = 0; r < 3; ++r) buckets.push_back(OrderSensitiveBucket(r, elements));
  std::vector<absl::Status> statuses(3);
  std::vector<std::thread> threads;
  for (int32_t r = 0; r < 2; ++r) {  // member 2 is late: 0 and 1 wait in the reduction
    threads.emplace_back([&, r] { statuses[r] = (*members)[r]->AllReduce(buckets[r], 9, absl::Seconds(20)); });
  }
  absl::SleepFor(absl::Milliseconds(100));
  const std::string address = (*members)[0]->address();
  // Garbage the size of a hello.
  ASSERT_TRUE(testing::SendGarbage(address, std::string(80, '\x5a')));
  // Another job's actor, claiming rank 2.
  absl::StatusOr<std::unique_ptr<TcpTransport>> impostor =
      TcpTransport::Listen(2, 3, {.token = "another job's token", .log = [](absl::string_view) {}});
  ASSERT_TRUE(impostor.ok()) << impostor.status();
  absl::Status joined = (*impostor)->ConnectPeers({address, "", ""}, absl::Seconds(5));
  EXPECT_EQ(joined.code(), absl::StatusCode::kPermissionDenied) << joined;
  const absl::Time until = absl::Now() + absl::Seconds(10);
  while ((*members)[0]->refused_connections() < 2 && absl::Now() < until) absl::SleepFor(absl::Milliseconds(10));
  EXPECT_EQ((*members)[0]->refused_connections(), 2);

  threads.emplace_back([&] { statuses[2] = (*members)[2]->AllReduce(buckets[2], 9, absl::Seconds(20)); });
  for (std::thread& thread : threads) thread.join();
  const std::vector<float> expected = ReferenceSum(3, elements);
  for (int32_t r = 0; r < 3; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << statuses[r];
    for (int64_t i = 0; i < elements; ++i) {
      EXPECT_EQ(absl::bit_cast<uint32_t>(buckets[r][i]), absl::bit_cast<uint32_t>(expected[i])) << r << ", " << i;
    }
  }
  absl::MutexLock lock(&notices_mu);
  ASSERT_EQ(notices.size(), 2u);
  // Member 0 is actor 1: the lines name the actor, not its rank as if it
  // were one (issue 41, finding 11).
  EXPECT_THAT(notices[0], HasSubstr("actor 1 (rank 0 of its replica group) refused a data-plane connection"));
  EXPECT_THAT(notices[1], HasSubstr("not made with the job's token"));
}

TEST(TcpCollectiveGroup, AMemberWithAnotherTokenCannotJoin) {
  absl::StatusOr<std::unique_ptr<TcpCollectiveGroup>> zero =
      TcpCollectiveGroup::Open({4, 5}, 0, {.token = kToken, .log = [](absl::string_view) {}});
  absl::StatusOr<std::unique_ptr<TcpCollectiveGroup>> one =
      TcpCollectiveGroup::Open({4, 5}, 1, {.token = "another", .log = [](absl::string_view) {}});
  ASSERT_TRUE(zero.ok() && one.ok());
  absl::Status status;
  std::thread joiner([&] { status = (*one)->Connect({(*zero)->Offer()[1], ""}, absl::Seconds(5)); });
  absl::Status waited = (*zero)->Connect({"", (*one)->Offer()[0]}, absl::Milliseconds(500));
  joiner.join();
  EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied) << status;
  EXPECT_THAT(status.message(), HasSubstr("actor 5 joining replica group (actors 4, 5)"));
  EXPECT_EQ(waited.code(), absl::StatusCode::kDeadlineExceeded) << waited;
  EXPECT_EQ((*zero)->refused_connections(), 1);
}

TEST(TcpCollectiveGroup, RefusesMalformedGroupsAndOffers) {
  EXPECT_EQ(TcpCollectiveGroup::Open({4}, 0, {}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TcpCollectiveGroup::Open({4, 5}, 2, {}).status().code(), absl::StatusCode::kInvalidArgument);
  absl::Status too_many = TcpCollectiveGroup::Open(std::vector<int32_t>(5000), 0, {}).status();
  EXPECT_EQ(too_many.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(too_many.message(), HasSubstr("a replica group has 2 to 4096 members, not 5000"));
  absl::StatusOr<std::unique_ptr<TcpCollectiveGroup>> group = TcpCollectiveGroup::Open({4, 5}, 0, {});
  ASSERT_TRUE(group.ok()) << group.status();
  absl::Status status = (*group)->Connect({"", std::string(1000, 'x')}, absl::Seconds(1));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("the address of actor 5 has 1000 bytes"));
  EXPECT_EQ((*group)->Connect({""}, absl::Seconds(1)).code(), absl::StatusCode::kInvalidArgument);
  std::vector<float> bucket(4);
  EXPECT_EQ((*group)->AllReduce(bucket, 0, absl::Seconds(1)).code(), absl::StatusCode::kFailedPrecondition);
}

class ReducerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::vector<std::unique_ptr<TcpCollectiveGroup>>> members =
        ConnectGroupInProcess({0, 1}, {.host = "127.0.0.1", .token = kToken}, absl::Seconds(20));
    ASSERT_TRUE(members.ok()) << members.status();
    first_ = std::make_unique<Reducer>(std::move((*members)[0]));
    second_ = std::make_unique<Reducer>(std::move((*members)[1]));
  }
  std::unique_ptr<Reducer> first_;
  std::unique_ptr<Reducer> second_;
};

TEST_F(ReducerTest, RunsInTheBackgroundAndReportsWhenItRan) {
  ASSERT_TRUE(first_->Start(3, OrderSensitiveBucket(0, 5), absl::Seconds(20)).ok());
  ASSERT_TRUE(second_->Start(3, OrderSensitiveBucket(1, 5), absl::Seconds(20)).ok());
  absl::StatusOr<Reducer::Result> a = first_->Wait(3, absl::Now() + absl::Seconds(20));
  absl::StatusOr<Reducer::Result> b = second_->Wait(3, absl::Now() + absl::Seconds(20));
  ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
  EXPECT_EQ(a->bucket, ReferenceSum(2, 5));
  EXPECT_EQ(b->bucket, a->bucket);
  EXPECT_LE(a->start_ns, a->end_ns);
  EXPECT_EQ(first_->Wait(3, absl::Now()).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(ReducerTest, AMemberThatNeverJoinsIsADeadlineNotAHang) {
  ASSERT_TRUE(first_->Start(1, OrderSensitiveBucket(0, 5), absl::Milliseconds(300)).ok());
  EXPECT_EQ(first_->Start(1, OrderSensitiveBucket(0, 5), absl::Milliseconds(300)).code(), absl::StatusCode::kInvalidArgument);
  const absl::Time begin = absl::Now();
  absl::StatusOr<Reducer::Result> result = first_->Wait(1, absl::Now() + absl::Seconds(10));
  EXPECT_FALSE(result.ok());
  EXPECT_LT(absl::Now() - begin, absl::Seconds(5));
  EXPECT_THAT(result.status().message(), HasSubstr("all-reduce tag 1 of replica group (actors 0, 1)"));
}

TEST_F(ReducerTest, AbortFailsWaitsAtOnce) {
  ASSERT_TRUE(first_->Start(2, OrderSensitiveBucket(0, 5), absl::Seconds(2)).ok());
  std::thread aborter([&] {
    absl::SleepFor(absl::Milliseconds(50));
    first_->Abort(absl::AbortedError("actor 1 failed"));
  });
  const absl::Time begin = absl::Now();
  absl::StatusOr<Reducer::Result> result = first_->Wait(2, absl::Now() + absl::Seconds(10));
  aborter.join();
  EXPECT_EQ(result.status().code(), absl::StatusCode::kAborted);
  EXPECT_LT(absl::Now() - begin, absl::Seconds(5));  // not the 10 s deadline
  EXPECT_EQ(first_->Start(4, OrderSensitiveBucket(0, 5), absl::Seconds(1)).code(), absl::StatusCode::kAborted);
}

}  // namespace
}  // namespace tandem::actor
