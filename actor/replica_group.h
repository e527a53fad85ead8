// Forming a host actor's replica group (its data-parallel peers: the actors
// of the same pipeline position in every replica), in the controller's two
// rendezvous rounds. The group is the actors' own authenticated TCP
// (actor/tcp_collective.h); device-resident actors reduce on their devices
// over the data plane instead (actor/device_all_reduce.h) and leave theirs
// unused.
//
//  1. openReplicaGroup -> ReplicaGroupOpening::Open: opens a TCP group (a
//     listener whose connections prove the job's token). Offer() is, per
//     member, one framed ReplicaOffer the controller relays to that member.
//  2. connectReplicaGroup -> Connect(offers): with every member's offer in
//     hand, every member connects to the others.
//
// An offer, on the wire (at most kMaxReplicaOfferBytes):
//   byte 0      format, 1
//   byte 1      flags, 0 (format 1 once had GPU fields; an offer with any
//               flag set is refused)
//   bytes 2-3   the TCP address's length, little-endian, then the address
//
// Threading: one thread at a time; Connect blocks (bounded) until every
// member connected, so it runs off the event loop.
#ifndef TANDEM_ACTOR_REPLICA_GROUP_H_
#define TANDEM_ACTOR_REPLICA_GROUP_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "actor/collective.h"

namespace tandem::actor {

inline constexpr size_t kMaxReplicaOfferBytes = 512;

struct ReplicaOffer {
  std::string address;  // "host:port" the receiving member dials (TcpCollectiveGroup)
  friend bool operator==(const ReplicaOffer&, const ReplicaOffer&) = default;
};

// The framing above; InvalidArgument for an address that is too long.
absl::StatusOr<std::string> EncodeReplicaOffer(const ReplicaOffer& offer);
// InvalidArgument, saying what is wrong, for anything that is not an offer
// of at most kMaxReplicaOfferBytes.
absl::StatusOr<ReplicaOffer> DecodeReplicaOffer(absl::string_view bytes);

struct ReplicaGroupMember {
  std::vector<int32_t> actors;  // the group, in replica order
  int32_t rank = 0;             // this member's replica
  std::string host;             // the interface the TCP group listens on
  std::string token;            // the job's, which its connections prove
  std::function<void(absl::string_view line)> log;  // refusals (rate-limited); default: stderr
};

class ReplicaGroupOpening {
 public:
  // Round 1. The TCP group's errors (actor/tcp_collective.h).
  static absl::StatusOr<std::unique_ptr<ReplicaGroupOpening>> Open(ReplicaGroupMember member);
  ~ReplicaGroupOpening();

  // Per member, the framed offer that member needs (empty for this one).
  std::vector<std::string> Offer() const;
  // Round 2: offers[j] is what member j offered this one (ignored for this
  // one). InvalidArgument for a wrong count or a malformed offer; the TCP
  // group's connection errors. Call once.
  absl::StatusOr<std::unique_ptr<CollectiveGroup>> Connect(const std::vector<std::string>& offers,
                                                           absl::Duration timeout);

 private:
  struct Parts;
  explicit ReplicaGroupOpening(std::unique_ptr<Parts> parts);

  std::unique_ptr<Parts> parts_;
};

}  // namespace tandem::actor

#endif  // TANDEM_ACTOR_REPLICA_GROUP_H_
