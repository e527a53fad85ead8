// Forming an actor's replica group (its data-parallel peers: the actors of
// the same pipeline position in every replica), in the controller's two
// rendezvous rounds, and choosing the collective library that serves it.
//
//  1. openReplicaGroup -> ReplicaGroupOpening::Open: opens a TCP group
//     (actor/tcp_collective.h: a listener whose connections prove the job's
//     token) and, on a GPU actor, describes its GPU (UUID) and, as
//     rank 0, makes an NCCL unique id. Offer() is, per member, one framed
//     ReplicaOffer the controller relays to that member.
//  2. connectReplicaGroup -> Connect(offers): with every member's offer in
//     hand, every member makes the same choice (ChooseLibrary):
//       NCCL  when every member is on a GPU, no two on the same one (NCCL
//             allows one rank per GPU per communicator), and rank 0 made an
//             id: the NcclReplicaGroup joins it;
//       TCP   otherwise (CPU actors, or GPU actors sharing a GPU).
//     Both compute the same ordered all-reduce (ir/all_reduce.h), so the
//     choice never changes a bit of the result.
//
// An offer, on the wire (at most kMaxReplicaOfferBytes):
//   byte 0      format, 1
//   byte 1      flags: 1 = a GPU UUID follows the address, 2 = an NCCL id
//               follows that
//   bytes 2-3   the TCP address's length, little-endian, then the address
//   16 bytes    the GPU's UUID (flag 1)
//   128 bytes   the NCCL unique id (flag 2; rank 0 only)
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
inline constexpr size_t kGpuUuidBytes = 16;

struct ReplicaOffer {
  std::string address;   // "host:port" the receiving member dials (TcpCollectiveGroup)
  std::string gpu_uuid;  // empty: not a GPU actor
  std::string nccl_id;   // rank 0 of a GPU group only
  friend bool operator==(const ReplicaOffer&, const ReplicaOffer&) = default;
};

// The framing above; InvalidArgument for a field of the wrong size.
absl::StatusOr<std::string> EncodeReplicaOffer(const ReplicaOffer& offer);
// InvalidArgument, saying what is wrong, for anything that is not an offer
// of at most kMaxReplicaOfferBytes.
absl::StatusOr<ReplicaOffer> DecodeReplicaOffer(absl::string_view bytes);

enum class CollectiveLibrary : uint8_t { kTcp, kNccl };
const char* CollectiveLibraryName(CollectiveLibrary library);  // "tcp", "nccl"

// The choice above, from every member's offer in rank order (this
// member's own included).
CollectiveLibrary ChooseLibrary(const std::vector<ReplicaOffer>& offers);

struct ReplicaGroupMember {
  std::vector<int32_t> actors;  // the group, in replica order
  int32_t rank = 0;             // this member's replica
  std::string host;             // the interface the TCP group listens on
  std::string token;            // the job's, which its connections prove
  std::function<void(absl::string_view line)> log;  // refusals (rate-limited); default: stderr
  int cuda_device = -1;         // this actor's GPU ordinal; -1 for a CPU actor
};

class ReplicaGroupOpening {
 public:
  // Round 1. The TCP group's errors (actor/tcp_collective.h); a GPU's UUID or an
  // NCCL id that cannot be had is an error too, naming the device.
  static absl::StatusOr<std::unique_ptr<ReplicaGroupOpening>> Open(ReplicaGroupMember member);
  ~ReplicaGroupOpening();

  // Per member, the framed offer that member needs (empty for this one).
  std::vector<std::string> Offer() const;
  // Round 2: offers[j] is what member j offered this one (ignored for this
  // one). InvalidArgument for a wrong count or a malformed offer; the
  // chosen library's connection errors. Call once.
  absl::StatusOr<std::unique_ptr<CollectiveGroup>> Connect(const std::vector<std::string>& offers,
                                                           absl::Duration timeout);
  // What Connect chose (kTcp before it).
  CollectiveLibrary library() const { return library_; }

 private:
  struct Parts;
  explicit ReplicaGroupOpening(std::unique_ptr<Parts> parts);

  std::unique_ptr<Parts> parts_;
  CollectiveLibrary library_ = CollectiveLibrary::kTcp;
};

}  // namespace tandem::actor

#endif  // TANDEM_ACTOR_REPLICA_GROUP_H_
