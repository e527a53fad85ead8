// TcpCollectiveGroup: the CPU CollectiveGroup (actor/collective.h), on the
// actors' own TCP transport (actor/tcp_transport.h), so that only the
// job's actors can join or disturb a replica group: every connection
// between members proves the job's token both ways, exactly as the data
// plane's do, and a stranger is refused, logged (rate-limited) and counted
// (refused_connections()) without touching a reduction in flight.
//
// Rendezvous is served by the controller over the control plane, in the two
// rounds of the data plane's setup (actor/data_plane.h), so no store, file
// system or extra server is needed:
//  1. Open() listens on a port of `host` that the OS picks; Offer() is, per
//     member, the "host:port" it dials;
//  2. Connect() takes, per member, what that member offered this one: each
//     member dials the lower-ranked ones and waits for the higher-ranked
//     ones, bounded by the timeout.
//
// An all-reduce is an ordered reduce-scatter (each member sends every other
// its shard of the bucket, ir::ShardOf, and sums the shards it receives
// with its own in replica order, ir::SumInReplicaOrder) and an all-gather
// of the summed shards: every member gets the same bits as the
// single-process reference (ir/all_reduce.h). Messages are tagged by the
// all-reduce's tag and phase; a member's shards are received as they come,
// so a member late to one phase delays, but never reorders, the sum.
//
// Ownership: owns its transport (sockets and threads). Threading: Offer and
// Connect from one thread; AllReduce then from one thread at a time (the
// Reducer's).
#ifndef TANDEM_ACTOR_TCP_COLLECTIVE_H_
#define TANDEM_ACTOR_TCP_COLLECTIVE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "actor/collective.h"

namespace tandem::actor {

class TcpTransport;

// Bytes of one offered address ("host:port").
inline constexpr size_t kMaxCollectiveAddressBytes = 192;

struct TcpCollectiveOptions {
  std::string host = "127.0.0.1";  // the interface it listens on
  std::string token;                // the job's, which every connection proves
  // Where refused connections are logged (rate-limited); default: stderr.
  std::function<void(absl::string_view line)> log;
};

class TcpCollectiveGroup final : public CollectiveGroup {
 public:
  // Round 1 for member `rank` of `actors` (actor ids in replica order):
  // listens. InvalidArgument for a group of fewer than 2 or more than
  // ir::kMaxReplicas members or a rank outside it; Unavailable when it
  // cannot listen.
  static absl::StatusOr<std::unique_ptr<TcpCollectiveGroup>> Open(std::vector<int32_t> actors, int32_t rank,
                                                                  TcpCollectiveOptions options);
  ~TcpCollectiveGroup() override;

  // Per member, what it needs to reach this one (empty for this one).
  std::vector<std::string> Offer() const;
  // Round 2: addresses[j] is what member j offered this one (ignored for
  // this one), all connected within `timeout`. InvalidArgument for a wrong
  // count or an address of the wrong size; Unavailable or DeadlineExceeded
  // when a member cannot be reached; PermissionDenied when one does not
  // prove the job's token.
  absl::Status Connect(const std::vector<std::string>& addresses, absl::Duration timeout);

  int32_t rank() const override { return rank_; }
  int32_t size() const override { return static_cast<int32_t>(actors_.size()); }
  const std::vector<int32_t>& actors() const override { return actors_; }
  absl::Status AllReduce(std::span<float> bucket, uint32_t tag, absl::Duration timeout) override;

  // Connections to this member refused so far: strangers, wrong answers.
  int64_t refused_connections() const override;
  // "127.0.0.1:PORT": where this member listens.
  std::string address() const;

 private:
  TcpCollectiveGroup(std::vector<int32_t> actors, int32_t rank, std::string host,
                     std::unique_ptr<TcpTransport> transport);

  std::vector<int32_t> actors_;
  int32_t rank_;
  std::string host_;
  std::unique_ptr<TcpTransport> transport_;
  bool connected_ = false;
};

// Every member of the group `actors` in this process (threads of one
// process: the threads launcher, tests): opens them with `options`, hands
// each the others' offers, and connects them all at once, one thread per
// member. Indexed by rank. The first error, naming the member.
absl::StatusOr<std::vector<std::unique_ptr<TcpCollectiveGroup>>> ConnectGroupInProcess(
    const std::vector<int32_t>& actors, const TcpCollectiveOptions& options, absl::Duration timeout);

}  // namespace tandem::actor

#endif  // TANDEM_ACTOR_TCP_COLLECTIVE_H_
