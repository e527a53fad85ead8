// The ordered all-reduce of data-parallel training: what it computes, how a
// bucket is cut into shards, and what it costs. The one definition that the
// compiler (static memory, bytes on the wire), the executors (whatever
// collective library moves the bytes) and the reference interpreter share.
//
// D replicas each hold a bucket of n f32 elements. The result, on every
// replica, is their elementwise sum added in replica order:
//   ((b_0 + b_1) + b_2) + ... + b_{D-1}
// which is what cpu::RunReferenceStep computes. A ring all-reduce adds each
// chunk starting from a different replica, so it is not used. Instead:
//  1. reduce-scatter: the bucket is cut into D contiguous shards; replica j
//     owns shard j, receives shard j of every other replica and adds the D
//     copies in replica order;
//  2. all-gather: every owner sends its summed shard to every other replica.
// Each replica sends n - len(j) elements in phase 1 and (D-1) * len(j) in
// phase 2: 2(D-1)/D of the bucket when D divides n, the bytes of a ring.
#ifndef TANDEM_IR_ALL_REDUCE_H_
#define TANDEM_IR_ALL_REDUCE_H_

#include <cstdint>
#include <span>

namespace tandem::ir {

// Elements [begin, begin + length) of an n-element bucket form shard
// `rank` of `size`: the first n % size shards have one element more.
struct Shard {
  int64_t begin = 0;
  int64_t length = 0;
};
Shard ShardOf(int64_t elements, int32_t size, int32_t rank);

// Bytes replica `rank` sends for one all-reduce of an n-element f32 bucket
// among `size` replicas (both phases).
int64_t AllReduceSentBytes(int64_t elements, int32_t size, int32_t rank);

// Staging memory of every replica while the all-reduce runs: the bucket's
// contiguous copy (n elements) and room for D received copies of the
// largest shard, ceil(n / D) elements (the same on every replica, so that
// one program's static peak holds on all of them).
int64_t AllReduceStagingBytes(int64_t elements, int32_t size);

// out[i] = shards[0][i] + shards[1][i] + ... in this order, in f32: the
// reduce-scatter owner's sum. Every span has out.size() elements.
void SumInReplicaOrder(std::span<const float* const> shards, std::span<float> out);

}  // namespace tandem::ir

#endif  // TANDEM_IR_ALL_REDUCE_H_
