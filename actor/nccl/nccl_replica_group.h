// NcclReplicaGroup: the GPU CollectiveGroup (actor/collective.h), one NCCL
// communicator over the members of a replica group, each on its own GPU
// (NCCL refuses two ranks of one communicator on one GPU; such groups use
// TCP: actor/replica_group.h chooses).
//
// Bootstrap: rank 0 makes the communicator's unique id (NewNcclUniqueId;
// needs no GPU), the controller relays it in the replica group's offers,
// and every member joins with NCCL's non-blocking init, polled against a
// deadline, so a member that never joins is DeadlineExceeded, not a hang.
//
// The all-reduce is the ordered one of ir/all_reduce.h, on the device:
//  1. the bucket goes to the device (executor buffers are host tensors
//     today; device-resident buckets will skip this copy);
//  2. reduce-scatter as grouped ncclSend/ncclRecv: member j receives shard j
//     of every member into slot r of a staging area;
//  3. the owner adds the D slots in replica order (kernels::LaunchSumInOrder,
//     the bits of ir::SumInReplicaOrder);
//  4. ncclAllGather of the summed shards, padded to the largest shard;
//  5. the shards come back to the bucket.
// Every wait polls the stream and the communicator against the deadline; a
// miss or an NCCL error aborts the communicator, and the group is then
// unusable (the job ends, as for any lost actor).
//
// Ownership: owns its communicator, stream and device buffers. Threading:
// one thread at a time (the Reducer's).
#ifndef TANDEM_ACTOR_NCCL_NCCL_REPLICA_GROUP_H_
#define TANDEM_ACTOR_NCCL_NCCL_REPLICA_GROUP_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "actor/collective.h"
#include "actor/nccl/cuda_nccl.h"  // NewNcclUniqueId
#include "actor/nccl/nccl_library.h"  // kNcclUniqueIdBytes

namespace tandem::actor::nccl {

// The 16-byte UUID of CUDA device `device`: how members of a group on
// different hosts tell whether two of them share a GPU.
absl::StatusOr<std::string> DeviceUuid(int device);

class NcclReplicaGroup final : public CollectiveGroup {
 public:
  // Joins the communicator `unique_id` of the group `actors` (actor ids in
  // replica order) as member `rank`, on CUDA device `device`.
  // InvalidArgument for a bad id size, a group of fewer than 2 or a rank
  // outside it; FailedPrecondition without that device; DeadlineExceeded
  // when a member has not joined by `deadline`; Internal with NCCL's words.
  static absl::StatusOr<std::unique_ptr<NcclReplicaGroup>> Join(absl::string_view unique_id,
                                                                std::vector<int32_t> actors, int32_t rank,
                                                                int device, absl::Time deadline);
  ~NcclReplicaGroup() override;
  NcclReplicaGroup(const NcclReplicaGroup&) = delete;
  NcclReplicaGroup& operator=(const NcclReplicaGroup&) = delete;

  int32_t rank() const override { return rank_; }
  int32_t size() const override { return static_cast<int32_t>(actors_.size()); }
  const std::vector<int32_t>& actors() const override { return actors_; }
  absl::Status AllReduce(std::span<float> bucket, uint32_t tag, absl::Duration timeout) override;

 private:
  struct Impl;
  NcclReplicaGroup(std::unique_ptr<Impl> impl, std::vector<int32_t> actors, int32_t rank);

  std::unique_ptr<Impl> impl_;
  std::vector<int32_t> actors_;
  int32_t rank_;
};

}  // namespace tandem::actor::nccl

#endif  // TANDEM_ACTOR_NCCL_NCCL_REPLICA_GROUP_H_
