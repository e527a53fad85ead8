#include "actor/replica_group.h"

#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "actor/tcp_collective.h"
#ifdef TANDEM_WITH_CUDA
#include "actor/nccl/nccl_replica_group.h"
#endif

namespace tandem::actor {
namespace {

constexpr uint8_t kOfferFormat = 1;
constexpr uint8_t kHasGpu = 1;
constexpr uint8_t kHasNcclId = 2;
constexpr size_t kNcclIdBytes = 128;  // NCCL_UNIQUE_ID_BYTES
constexpr size_t kHeaderBytes = 4;

}  // namespace

absl::StatusOr<std::string> EncodeReplicaOffer(const ReplicaOffer& offer) {
  if (offer.address.size() > kMaxCollectiveAddressBytes) {
    return absl::InvalidArgumentError(absl::StrCat("a collective address of ", offer.address.size(),
                                                   " bytes; at most ", kMaxCollectiveAddressBytes));
  }
  if (!offer.gpu_uuid.empty() && offer.gpu_uuid.size() != kGpuUuidBytes) {
    return absl::InvalidArgumentError(absl::StrCat("a GPU UUID of ", offer.gpu_uuid.size(), " bytes, not ",
                                                   kGpuUuidBytes));
  }
  if (!offer.nccl_id.empty() && (offer.nccl_id.size() != kNcclIdBytes || offer.gpu_uuid.empty())) {
    return absl::InvalidArgumentError(absl::StrCat("an NCCL id of ", offer.nccl_id.size(), " bytes (it has ",
                                                   kNcclIdBytes, ", and only a GPU actor offers one)"));
  }
  std::string bytes;
  bytes.push_back(static_cast<char>(kOfferFormat));
  bytes.push_back(static_cast<char>((offer.gpu_uuid.empty() ? 0 : kHasGpu) | (offer.nccl_id.empty() ? 0 : kHasNcclId)));
  bytes.push_back(static_cast<char>(offer.address.size() & 0xff));
  bytes.push_back(static_cast<char>(offer.address.size() >> 8));
  bytes += offer.address;
  bytes += offer.gpu_uuid;
  bytes += offer.nccl_id;
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
  if ((flags & ~(kHasGpu | kHasNcclId)) != 0 || ((flags & kHasNcclId) != 0 && (flags & kHasGpu) == 0)) {
    return absl::InvalidArgumentError(absl::StrCat("a replica group offer with unknown flags ", flags));
  }
  const size_t address = static_cast<uint8_t>(bytes[2]) | (static_cast<size_t>(static_cast<uint8_t>(bytes[3])) << 8);
  const size_t expected = kHeaderBytes + address + ((flags & kHasGpu) ? kGpuUuidBytes : 0) +
                          ((flags & kHasNcclId) ? kNcclIdBytes : 0);
  if (address > kMaxCollectiveAddressBytes || bytes.size() != expected) {
    return absl::InvalidArgumentError(absl::StrCat("a replica group offer of ", bytes.size(),
                                                   " bytes does not match its fields (a collective address of ", address,
                                                   " bytes, flags ", flags, ")"));
  }
  ReplicaOffer offer;
  size_t at = kHeaderBytes;
  offer.address = std::string(bytes.substr(at, address));
  at += address;
  if (flags & kHasGpu) {
    offer.gpu_uuid = std::string(bytes.substr(at, kGpuUuidBytes));
    at += kGpuUuidBytes;
  }
  if (flags & kHasNcclId) offer.nccl_id = std::string(bytes.substr(at, kNcclIdBytes));
  return offer;
}

const char* CollectiveLibraryName(CollectiveLibrary library) {
  return library == CollectiveLibrary::kNccl ? "nccl" : "tcp";
}

CollectiveLibrary ChooseLibrary(const std::vector<ReplicaOffer>& offers) {
  if (offers.size() < 2 || offers[0].nccl_id.empty()) return CollectiveLibrary::kTcp;
  std::set<std::string> gpus;
  for (const ReplicaOffer& offer : offers) {
    if (offer.gpu_uuid.empty() || !gpus.insert(offer.gpu_uuid).second) return CollectiveLibrary::kTcp;
  }
  return CollectiveLibrary::kNccl;
}

struct ReplicaGroupOpening::Parts {
  ReplicaGroupMember member;
  std::unique_ptr<TcpCollectiveGroup> tcp;
  ReplicaOffer own;  // this member's offer, less the per-member address
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
  if (member.cuda_device >= 0) {
#ifdef TANDEM_WITH_CUDA
    absl::StatusOr<std::string> uuid = nccl::DeviceUuid(member.cuda_device);
    if (!uuid.ok()) {
      return absl::Status(uuid.status().code(), absl::StrCat("the UUID of CUDA device ", member.cuda_device, ": ",
                                                             uuid.status().message()));
    }
    parts->own.gpu_uuid = *std::move(uuid);
    if (member.rank == 0) {
      absl::StatusOr<std::string> id = nccl::NewNcclUniqueId();
      if (!id.ok()) return id.status();
      parts->own.nccl_id = *std::move(id);
    }
#else
    return absl::FailedPreconditionError("a GPU replica group member in a build without CUDA");
#endif
  }
  parts->member = std::move(member);
  return std::unique_ptr<ReplicaGroupOpening>(new ReplicaGroupOpening(std::move(parts)));
}

std::vector<std::string> ReplicaGroupOpening::Offer() const {
  std::vector<std::string> offers(parts_->tcp_offer.size());
  for (size_t member = 0; member < offers.size(); ++member) {
    if (static_cast<int32_t>(member) == parts_->member.rank) continue;
    ReplicaOffer offer = parts_->own;
    offer.address = parts_->tcp_offer[member];
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
  std::vector<ReplicaOffer> decoded(offers.size());
  std::vector<std::string> addresses(offers.size());
  for (size_t j = 0; j < offers.size(); ++j) {
    if (static_cast<int32_t>(j) == member.rank) {
      decoded[j] = parts_->own;
      continue;
    }
    absl::StatusOr<ReplicaOffer> offer = DecodeReplicaOffer(offers[j]);
    if (!offer.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("the offer of actor ", member.actors[j], " in ",
                                                     DescribeGroup(member.actors), ": ", offer.status().message()));
    }
    addresses[j] = offer->address;
    decoded[j] = *std::move(offer);
  }
  library_ = ChooseLibrary(decoded);
#ifdef TANDEM_WITH_CUDA
  if (library_ == CollectiveLibrary::kNccl) {
    parts_->tcp.reset();  // never connected
    absl::StatusOr<std::unique_ptr<nccl::NcclReplicaGroup>> nccl = nccl::NcclReplicaGroup::Join(
        decoded[0].nccl_id, member.actors, member.rank, member.cuda_device, absl::Now() + timeout);
    if (!nccl.ok()) return nccl.status();
    return std::unique_ptr<CollectiveGroup>(*std::move(nccl));
  }
#endif
  library_ = CollectiveLibrary::kTcp;
  if (absl::Status status = parts_->tcp->Connect(addresses, timeout); !status.ok()) return status;
  return std::unique_ptr<CollectiveGroup>(std::move(parts_->tcp));
}

}  // namespace tandem::actor
