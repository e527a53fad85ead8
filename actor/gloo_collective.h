// GlooGroup: the CPU CollectiveGroup (actor/collective.h), on Gloo's TCP
// transport (Debian's libgloo-dev).
//
// Rendezvous is served by the controller over the control plane, in the two
// rounds of the data plane's setup (actor/data_plane.h), so no store, file
// system or extra server is needed:
//  1. Open() binds a TCP device and makes one Gloo pair per other member;
//     Offer() is, per member, the address that member must connect its pair
//     to;
//  2. Connect() takes, per member, the address that member offered this
//     one, and connects every pair (in member order, as Gloo's own full-mesh
//     rendezvous does), bounded by the timeout.
//
// An all-reduce is Gloo's alltoallv (each member receives its shard of every
// bucket, in replica order), ir::SumInReplicaOrder on that shard, and Gloo's
// allgatherv of the summed shards.
//
// Ownership: owns its Gloo context and device. Threading: Offer and Connect
// from one thread; AllReduce then from one thread at a time (the Reducer's).
#ifndef TANDEM_ACTOR_GLOO_COLLECTIVE_H_
#define TANDEM_ACTOR_GLOO_COLLECTIVE_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "actor/collective.h"

namespace tandem::actor {

// Bytes of one offered address: Gloo's own bound.
inline constexpr size_t kMaxCollectiveAddressBytes = 192;

class GlooGroup final : public CollectiveGroup {
 public:
  // Round 1 for member `rank` of `actors` (actor ids in replica order):
  // binds a TCP device on `host` and creates the pairs, whose connections
  // (round 2) are bounded by `timeout`. InvalidArgument for
  // a group of fewer than 2 members or a rank outside it; Unavailable when
  // the device cannot bind.
  static absl::StatusOr<std::unique_ptr<GlooGroup>> Open(std::vector<int32_t> actors, int32_t rank,
                                                         const std::string& host, absl::Duration timeout);
  ~GlooGroup() override;

  // Per member, what it needs to reach this one (empty for this one).
  std::vector<std::string> Offer() const;
  // Round 2: addresses[j] is what member j offered this one (ignored for
  // this one); `timeout` bounds the collectives' setup calls (each pair's
  // connection is bounded by Open's). InvalidArgument for a wrong count or an address of the wrong
  // size; Unavailable or DeadlineExceeded when a member cannot be reached.
  absl::Status Connect(const std::vector<std::string>& addresses, absl::Duration timeout);

  int32_t rank() const override { return rank_; }
  int32_t size() const override { return static_cast<int32_t>(actors_.size()); }
  const std::vector<int32_t>& actors() const override { return actors_; }
  absl::Status AllReduce(std::span<float> bucket, uint32_t tag, absl::Duration timeout) override;

 private:
  class Context;
  GlooGroup(std::vector<int32_t> actors, int32_t rank, std::shared_ptr<Context> context);

  std::vector<int32_t> actors_;
  int32_t rank_;
  std::shared_ptr<Context> context_;
  std::vector<std::string> offer_;
  bool connected_ = false;
};

// Every member of the group `actors` in this process (threads of one
// process: the threads launcher, tests): opens them on `host`, hands each
// the others' offers, and connects them all at once, one thread per member.
// Indexed by rank. The first error, naming the member.
absl::StatusOr<std::vector<std::unique_ptr<GlooGroup>>> ConnectGroupInProcess(const std::vector<int32_t>& actors,
                                                                                const std::string& host,
                                                                                absl::Duration timeout);

}  // namespace tandem::actor

#endif  // TANDEM_ACTOR_GLOO_COLLECTIVE_H_
