// DeviceAllReduce: the ordered all-reduce of data-parallel training
// (ir/all_reduce.h) on device-resident gradients, without the host: the
// shards travel over the data plane's device transfers
// (Transport::SendDevice/ReceiveDevice: NCCL between GPUs, CUDA IPC between
// actors on one GPU; actor/device_transport.h) and the owner adds them with
// the device's own add (Device::Accumulate, cpu::AccumulateGradient's bits),
// in replica order, so the result is ir::SumInReplicaOrder's bit for bit.
//
//  - Start: the bucket (the tensors, concatenated) is cut into the group's
//    shards (ir::ShardOf); shard r goes to member r. Returns at once: the
//    transfers run on the data plane's streams while the step goes on.
//  - Finish: receives the other members' copies of this member's shard,
//    adds the D copies in replica order, sends the sum to every other
//    member, receives theirs and returns the reduced tensors, of the
//    bucket's types, ready in the device stream's order.
// Messages carry tags of their own (ReduceTag), which no pipeline message
// between two replicas of a stage uses.
//
// Errors: InvalidArgument for a group this actor is not in, a tag too large
// or a tensor that is not f32 on the device; FailedPrecondition for a Finish
// without its Start; the transport's and device's errors (DeadlineExceeded
// naming the member that did not send).
//
// Ownership and threading: borrows the device; the transport is given to
// each call. One thread (the executor's).
#ifndef TANDEM_ACTOR_DEVICE_ALL_REDUCE_H_
#define TANDEM_ACTOR_DEVICE_ALL_REDUCE_H_

#include <cstdint>
#include <map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "actor/transport.h"
#include "backends/device.h"
#include "backends/device_memory.h"

namespace tandem::actor {

class DeviceAllReduce {
 public:
  explicit DeviceAllReduce(backends::Device& device) : device_(device), memory_(*device.memory()) {}

  // The data-plane tag of all-reduce `tag`'s phase 0 (reduce-scatter) or 1
  // (all-gather): bit 62 set, below the device transports' host tags.
  static uint64_t ReduceTag(uint64_t tag, int phase) { return (uint64_t{1} << 62) | (tag << 1) | uint64_t(phase); }
  static constexpr uint64_t kMaxTag = (uint64_t{1} << 61) - 1;

  // `group`: the members' actor ids in replica order; `self`: this actor's.
  absl::Status Start(Transport& transport, uint64_t tag, const std::vector<int32_t>& group, int32_t self,
                     const std::vector<backends::DeviceTensor>& tensors);
  absl::StatusOr<std::vector<backends::DeviceTensor>> Finish(Transport& transport, uint64_t tag,
                                                             absl::Time deadline);

 private:
  struct Started {
    std::vector<int32_t> group;
    int32_t rank = 0;
    std::vector<ir::TensorType> types;  // of the bucket's tensors
    int64_t elements = 0;
    backends::DeviceTensor own_shard;  // this member's copy of its own shard
  };
  // A new f32 tensor of `length` elements: elements [begin, begin + length)
  // of the concatenation of `pieces` (each f32), copied on the stream.
  absl::StatusOr<backends::DeviceTensor> Slice(const std::vector<backends::DeviceTensor>& pieces, int64_t begin,
                                               int64_t length);

  backends::Device& device_;
  backends::DeviceMemory& memory_;
  std::map<uint64_t, Started> started_;  // by tag
};

}  // namespace tandem::actor

#endif  // TANDEM_ACTOR_DEVICE_ALL_REDUCE_H_
