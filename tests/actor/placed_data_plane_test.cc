// The placed data plane (ir::DataPlaneKind::kAuto): shared memory to the
// peers on the actor's host, TCP to the others, as the controller places
// each peer; rings handed over as paths (a TCP control connection carries
// no descriptors). Three actors in one process: 0 and 1 "share a host", 2
// is "elsewhere".
#include <fcntl.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "actor/data_plane.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/actor/transport_test_util.h"

namespace tandem::actor {
namespace {

using ::tandem::actor::testing::MixedTensors;
using ::testing::HasSubstr;

constexpr int32_t kActors = 3;
const char* const kHosts[kActors] = {"a", "a", "b"};

std::vector<std::unique_ptr<DataPlane>> MakePlanes() {
  std::vector<std::unique_ptr<DataPlane>> planes;
  for (int32_t actor = 0; actor < kActors; ++actor) {
    absl::StatusOr<std::unique_ptr<DataPlane>> plane = CreateDataPlane(
        ir::DataPlaneKind::kAuto, actor, kActors, {.shm_ring_bytes = int64_t{1} << 20, .token = "placed"});
    EXPECT_TRUE(plane.ok()) << plane.status();
    if (!plane.ok()) return {};
    planes.push_back(*std::move(plane));
  }
  return planes;
}

// What the controller hands `actor`: each peer's ring (opened from its path)
// on the same host, its TCP address on another.
std::vector<DataPlane::Peer> PeersOf(int32_t actor, const std::vector<DataPlane::Offer>& offers) {
  std::vector<DataPlane::Peer> peers;
  for (int32_t peer = 0; peer < kActors; ++peer) {
    if (peer == actor) continue;
    DataPlane::Peer entry{.actor = peer};
    if (std::string(kHosts[peer]) == kHosts[actor]) {
      for (const DataPlane::Region& region : offers[peer].regions) {
        if (region.peer == actor) entry.region_fd = open(RegionPath(getpid(), region.fd).c_str(), O_RDWR | O_CLOEXEC);
      }
      EXPECT_GE(entry.region_fd, 0) << "actor " << peer << "'s ring to " << actor;
    } else {
      entry.tcp_address = offers[peer].tcp_address;
    }
    peers.push_back(entry);
  }
  return peers;
}

TEST(PlacedDataPlane, EveryPairRoundTripsOverSharedMemoryOnAHostAndTcpBetweenHosts) {
  std::vector<std::unique_ptr<DataPlane>> planes = MakePlanes();
  ASSERT_EQ(planes.size(), static_cast<size_t>(kActors));
  std::vector<DataPlane::Offer> offers;
  for (const auto& plane : planes) {
    offers.push_back(plane->GetOffer());
    EXPECT_FALSE(offers.back().tcp_address.empty());
    EXPECT_EQ(offers.back().regions.size(), static_cast<size_t>(kActors - 1));
  }
  // TCP peers wait for each other: connect all at once.
  std::vector<absl::Status> connected(kActors);
  std::vector<std::thread> threads;
  for (int32_t actor = 0; actor < kActors; ++actor) {
    threads.emplace_back([&, actor] { connected[actor] = planes[actor]->Connect(PeersOf(actor, offers), absl::Seconds(10)); });
  }
  for (std::thread& thread : threads) thread.join();
  for (int32_t actor = 0; actor < kActors; ++actor) ASSERT_TRUE(connected[actor].ok()) << connected[actor];

  for (int32_t from = 0; from < kActors; ++from) {
    for (int32_t to = 0; to < kActors; ++to) {
      if (from == to) continue;
      const uint64_t tag = static_cast<uint64_t>(10 * from + to);
      ASSERT_TRUE(planes[from]->transport().Send(to, tag, MixedTensors(from + to)).ok());
    }
  }
  for (int32_t to = 0; to < kActors; ++to) {
    for (int32_t from = 0; from < kActors; ++from) {
      if (from == to) continue;
      const uint64_t tag = static_cast<uint64_t>(10 * from + to);
      absl::StatusOr<std::vector<ir::HostTensor>> got =
          planes[to]->transport().Receive(from, tag, absl::Now() + absl::Seconds(10));
      ASSERT_TRUE(got.ok()) << from << " -> " << to << ": " << got.status();
      const std::vector<ir::HostTensor> sent = MixedTensors(from + to);
      ASSERT_EQ(got->size(), sent.size());
      for (size_t i = 0; i < sent.size(); ++i) EXPECT_TRUE((*got)[i].BitwiseEquals(sent[i])) << from << " -> " << to;
    }
  }
  for (const auto& plane : planes) EXPECT_TRUE(plane->Flush(absl::Now() + absl::Seconds(10)).ok());
  // Actors 0 and 1 never met over TCP: no connection there was refused or made.
  for (const auto& plane : planes) EXPECT_EQ(plane->refused_connections(), 0);
}

TEST(PlacedDataPlane, APeerWithBothARingAndAnAddressOrNeitherIsRefusedNamingIt) {
  std::vector<std::unique_ptr<DataPlane>> planes = MakePlanes();
  ASSERT_EQ(planes.size(), static_cast<size_t>(kActors));
  const DataPlane::Offer offer = planes[1]->GetOffer();
  std::vector<DataPlane::Peer> peers = {
      {.actor = 1, .tcp_address = offer.tcp_address, .region_fd = dup(offer.regions[0].fd)},
      {.actor = 2, .tcp_address = planes[2]->GetOffer().tcp_address}};
  absl::Status both = planes[0]->Connect(std::move(peers), absl::Seconds(1));
  EXPECT_EQ(both.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(both.message()), HasSubstr("data-plane peer 1 needs exactly one of"));

  std::vector<DataPlane::Peer> neither = {{.actor = 1}, {.actor = 2, .tcp_address = "127.0.0.1:1"}};
  absl::Status none = planes[0]->Connect(std::move(neither), absl::Seconds(1));
  EXPECT_EQ(none.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(none.message()), HasSubstr("data-plane peer 1 needs exactly one of"));
}

}  // namespace
}  // namespace tandem::actor
