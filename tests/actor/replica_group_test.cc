// How an actor's replica group is formed (actor/replica_group.h): offers
// survive the wire and bad ones are refused before anything is read past
// their end; every member makes the same choice of library from the same
// offers, NCCL only when no two members share a GPU.
#include "actor/replica_group.h"

#include <string>
#include <vector>

#include "actor/tcp_collective.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::actor {
namespace {

using ::testing::HasSubstr;

ReplicaOffer Gpu(char uuid, bool with_id = false) {
  ReplicaOffer offer;
  offer.address = "host:1234";
  offer.gpu_uuid = std::string(kGpuUuidBytes, uuid);
  if (with_id) offer.nccl_id = std::string(128, 'i');
  return offer;
}

TEST(ReplicaOffer, RoundTripsEveryShape) {
  ReplicaOffer cpu;
  cpu.address = std::string(100, 'a');
  for (const ReplicaOffer& offer : {cpu, Gpu('u'), Gpu('v', /*with_id=*/true)}) {
    absl::StatusOr<std::string> bytes = EncodeReplicaOffer(offer);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    EXPECT_LE(bytes->size(), kMaxReplicaOfferBytes);
    absl::StatusOr<ReplicaOffer> decoded = DecodeReplicaOffer(*bytes);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_EQ(*decoded, offer);
  }
}

TEST(ReplicaOffer, MalformedOffersAreRefusedWithAReason) {
  const std::string good = *EncodeReplicaOffer(Gpu('u', true));
  struct Case {
    std::string bytes;
    std::string says;
  };
  std::vector<Case> cases = {
      {"", "unknown format"},
      {std::string("\x02\x00\x00\x00", 4), "unknown format"},
      {std::string("\x01\x08\x00\x00", 4), "unknown flags 8"},
      {std::string("\x01\x02\x00\x00", 4), "unknown flags 2"},  // an NCCL id without a GPU
      {good.substr(0, good.size() - 1), "does not match its fields"},
      {good + "x", "does not match its fields"},
      {std::string("\x01\x00\xff\xff", 4) + std::string(300, 'a'), "does not match its fields"},
      {std::string(kMaxReplicaOfferBytes + 1, '\x01'), "at most 512"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<ReplicaOffer> decoded = DecodeReplicaOffer(c.bytes);
    EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument) << c.says;
    EXPECT_THAT(decoded.status().message(), HasSubstr(c.says));
  }
  ReplicaOffer long_address;
  long_address.address = std::string(kMaxCollectiveAddressBytes + 1, 'a');
  EXPECT_EQ(EncodeReplicaOffer(long_address).status().code(), absl::StatusCode::kInvalidArgument);
  ReplicaOffer short_uuid = Gpu('u');
  short_uuid.gpu_uuid.pop_back();
  EXPECT_EQ(EncodeReplicaOffer(short_uuid).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ChooseLibrary, NcclOnlyForGroupsOnDistinctGpusWithAnId) {
  EXPECT_EQ(ChooseLibrary({Gpu('a', true), Gpu('b'), Gpu('c')}), CollectiveLibrary::kNccl);
  // Two members on one GPU: NCCL would refuse them.
  EXPECT_EQ(ChooseLibrary({Gpu('a', true), Gpu('b'), Gpu('a')}), CollectiveLibrary::kTcp);
  // A CPU member.
  ReplicaOffer cpu;
  cpu.address = "x";
  EXPECT_EQ(ChooseLibrary({Gpu('a', true), cpu}), CollectiveLibrary::kTcp);
  // Rank 0 made no id.
  EXPECT_EQ(ChooseLibrary({Gpu('a'), Gpu('b')}), CollectiveLibrary::kTcp);
  EXPECT_EQ(ChooseLibrary({Gpu('a', true)}), CollectiveLibrary::kTcp);
  EXPECT_STREQ(CollectiveLibraryName(CollectiveLibrary::kNccl), "nccl");
}

TEST(ReplicaGroupOpening, CpuActorsConnectOverTcpAndBadOffersNameTheActor) {
  absl::StatusOr<std::unique_ptr<ReplicaGroupOpening>> opening =
      ReplicaGroupOpening::Open({.actors = {1, 3}, .rank = 0, .host = "127.0.0.1"});
  ASSERT_TRUE(opening.ok()) << opening.status();
  const std::vector<std::string> offers = (*opening)->Offer();
  ASSERT_EQ(offers.size(), 2u);
  EXPECT_TRUE(offers[0].empty());
  absl::StatusOr<ReplicaOffer> to_actor_3 = DecodeReplicaOffer(offers[1]);
  ASSERT_TRUE(to_actor_3.ok()) << to_actor_3.status();
  EXPECT_TRUE(to_actor_3->gpu_uuid.empty());
  EXPECT_TRUE(to_actor_3->nccl_id.empty());
  EXPECT_EQ((*opening)->Connect({""}, absl::Seconds(1)).status().code(), absl::StatusCode::kInvalidArgument);
  absl::StatusOr<std::unique_ptr<ReplicaGroupOpening>> again =
      ReplicaGroupOpening::Open({.actors = {1, 3}, .rank = 0, .host = "127.0.0.1"});
  ASSERT_TRUE(again.ok()) << again.status();
  absl::Status bad = (*again)->Connect({"", "garbage"}, absl::Seconds(1)).status();
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.message(), HasSubstr("the offer of actor 3 in replica group (actors 1, 3)"));
}

}  // namespace
}  // namespace tandem::actor
