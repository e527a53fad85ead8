// How an actor's replica group is formed (actor/replica_group.h): offers
// survive the wire and bad ones are refused before anything is read past
// their end.
#include "actor/replica_group.h"

#include <string>
#include <vector>

#include "actor/tcp_collective.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::actor {
namespace {

using ::testing::HasSubstr;

TEST(ReplicaOffer, RoundTripsEveryShape) {
  for (const std::string& address : {std::string(), std::string("host:1234"), std::string(100, 'a')}) {
    const ReplicaOffer offer{.address = address};
    absl::StatusOr<std::string> bytes = EncodeReplicaOffer(offer);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    EXPECT_LE(bytes->size(), kMaxReplicaOfferBytes);
    absl::StatusOr<ReplicaOffer> decoded = DecodeReplicaOffer(*bytes);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_EQ(*decoded, offer);
  }
}

TEST(ReplicaOffer, MalformedOffersAreRefusedWithAReason) {
  const std::string good = *EncodeReplicaOffer({.address = "host:1234"});
  struct Case {
    std::string bytes;
    std::string says;
  };
  std::vector<Case> cases = {
      {"", "unknown format"},
      {std::string("\x02\x00\x00\x00", 4), "unknown format"},
      {std::string("\x01\x08\x00\x00", 4), "unknown flags 8"},
      {std::string("\x01\x01\x00\x00", 4), "unknown flags 1"},  // the GPU fields of old
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
  EXPECT_FALSE(to_actor_3->address.empty());
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
