#include "actor/replica_group.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "actor/tcp_collective.h"

namespace tandem::actor {
namespace {

constexpr uint8_t kOfferFormat = 1;
constexpr size_t kHeaderBytes = 4;

}  // namespace

absl::StatusOr<std::string> EncodeReplicaOffer(const ReplicaOffer& offer) {
  if (offer.address.size() > kMaxCollectiveAddressBytes) {
    return absl::InvalidArgumentError(absl::StrCat("a collective address of ", offer.address.size(),
                                                   " bytes; at most ", kMaxCollectiveAddressBytes));
  }
  std::string bytes;
  bytes.push_back(static_cast<char>(kOfferFormat));
  bytes.push_back(0);  // flags
  bytes.push_back(static_cast<char>(offer.address.size() & 0xff));
  bytes.push_back(static_cast<char>(offer.address.size() >> 8));
  bytes += offer.address;
  return bytes;
}

absl::StatusOr<ReplicaOffer> DecodeReplicaOffer(absl::string_view bytes) {
  if (bytes.size() > kMaxReplicaOfferBytes) {
    return absl::InvalidArgumentError(absl::StrCat("a replica group offer of ", bytes.size(), " bytes; at most ",
                                                   kMaxReplicaOfferBytes));
  }
  if (bytes.size() < kHeaderBytes || static_cast<uint8_t>(bytes[0]) != kOfferFormat) {
    return absl::InvalidArgumentError("not a replica group offer (unknown format)");
  }
  const auto flags = static_cast<uint8_t>(bytes[1]);
  if (flags != 0) {
    return absl::InvalidArgumentError(absl::StrCat("a replica group offer with unknown flags ", flags));
  }
  const size_t address = static_cast<uint8_t>(bytes[2]) | (static_cast<size_t>(static_cast<uint8_t>(bytes[3])) << 8);
  if (address > kMaxCollectiveAddressBytes || bytes.size() != kHeaderBytes + address) {
    return absl::InvalidArgumentError(absl::StrCat("a replica group offer of ", bytes.size(),
                                                   " bytes does not match its fields (a collective address of ", address,
                                                   " bytes)"));
  }
  ReplicaOffer offer;
  offer.address = std::string(bytes.substr(kHeaderBytes, address));
  return offer;
}

struct ReplicaGroupOpening::Parts {
  ReplicaGroupMember member;
  std::unique_ptr<TcpCollectiveGroup> tcp;
  std::vector<std::string> tcp_offer;
  bool connected = false;
};

ReplicaGroupOpening::ReplicaGroupOpening(std::unique_ptr<Parts> parts) : parts_(std::move(parts)) {}
ReplicaGroupOpening::~ReplicaGroupOpening() = default;

absl::StatusOr<std::unique_ptr<ReplicaGroupOpening>> ReplicaGroupOpening::Open(ReplicaGroupMember member) {
  auto parts = std::make_unique<Parts>();
  absl::StatusOr<std::unique_ptr<TcpCollectiveGroup>> tcp = TcpCollectiveGroup::Open(
      member.actors, member.rank, {.host = member.host, .token = member.token, .log = member.log});
  if (!tcp.ok()) return tcp.status();
  parts->tcp = *std::move(tcp);
  parts->tcp_offer = parts->tcp->Offer();
  parts->member = std::move(member);
  return std::unique_ptr<ReplicaGroupOpening>(new ReplicaGroupOpening(std::move(parts)));
}

std::vector<std::string> ReplicaGroupOpening::Offer() const {
  std::vector<std::string> offers(parts_->tcp_offer.size());
  for (size_t member = 0; member < offers.size(); ++member) {
    if (static_cast<int32_t>(member) == parts_->member.rank) continue;
    ReplicaOffer offer{.address = parts_->tcp_offer[member]};
    // Sizes were checked when they were made: Encode cannot fail here.
    offers[member] = EncodeReplicaOffer(offer).value_or(std::string());
  }
  return offers;
}

absl::StatusOr<std::unique_ptr<CollectiveGroup>> ReplicaGroupOpening::Connect(const std::vector<std::string>& offers,
                                                                               absl::Duration timeout) {
  const ReplicaGroupMember& member = parts_->member;
  if (parts_->connected) return absl::FailedPreconditionError("the replica group was connected already");
  parts_->connected = true;
  if (offers.size() != member.actors.size()) {
    return absl::InvalidArgumentError(absl::StrCat(offers.size(), " offers for ", DescribeGroup(member.actors)));
  }
  std::vector<std::string> addresses(offers.size());
  for (size_t j = 0; j < offers.size(); ++j) {
    if (static_cast<int32_t>(j) == member.rank) continue;
    absl::StatusOr<ReplicaOffer> offer = DecodeReplicaOffer(offers[j]);
    if (!offer.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("the offer of actor ", member.actors[j], " in ",
                                                     DescribeGroup(member.actors), ": ", offer.status().message()));
    }
    addresses[j] = offer->address;
  }
  if (absl::Status status = parts_->tcp->Connect(addresses, timeout); !status.ok()) return status;
  return std::unique_ptr<CollectiveGroup>(std::move(parts_->tcp));
}

}  // namespace tandem::actor
