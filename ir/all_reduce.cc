#include "ir/all_reduce.h"

#include <cstddef>

namespace tandem::ir {

Shard ShardOf(int64_t elements, int32_t size, int32_t rank) {
  const int64_t base = elements / size;
  const int64_t extra = elements % size;
  Shard shard;
  shard.length = base + (rank < extra ? 1 : 0);
  shard.begin = rank * base + (rank < extra ? rank : extra);
  return shard;
}

int64_t AllReduceSentBytes(int64_t elements, int32_t size, int32_t rank) {
  if (size < 2) return 0;
  const int64_t own = ShardOf(elements, size, rank).length;
  return (elements - own + (size - 1) * own) * static_cast<int64_t>(sizeof(float));
}

int64_t AllReduceStagingBytes(int64_t elements, int32_t size) {
  const int64_t largest = ShardOf(elements, size, 0).length;
  return (elements + size * largest) * static_cast<int64_t>(sizeof(float));
}

void SumInReplicaOrder(std::span<const float* const> shards, std::span<float> out) {
  if (shards.empty()) return;
  const float* first = shards[0];
  for (size_t i = 0; i < out.size(); ++i) out[i] = first[i];
  for (size_t r = 1; r < shards.size(); ++r) {
    const float* next = shards[r];
    for (size_t i = 0; i < out.size(); ++i) out[i] = out[i] + next[i];
  }
}

}  // namespace tandem::ir
