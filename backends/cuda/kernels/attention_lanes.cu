// Causal attention at head width 128 (ir/op.h kAttention; dispatched by
// kernels/attention.cu): a group of lanes a row. attention_tiles.cu takes
// 32 and 64, whose tiles fit in shared memory; 128's would not.

#include "backends/cuda/kernels/attention.cuh"

namespace tandem::cuda::kernels {
namespace {

// The tiled row kernels' walk (attention_rows.cu), with the width a
// compile-time constant so that a row's query, cotangent and accumulators
// live in registers (those kernels index them by a run-time width, which
// puts them in local memory), rows split between
// kSplit adjacent lanes where one thread's registers would not hold them,
// fused multiply-adds, 16-byte loads, scores computed a tile at a time for
// independent work in flight, and the blocks with the most keys to read
// launched first. The order of every operation is fixed by the
// shape and these constants (a row's dot products sum its lanes' parts in a
// fixed tree; IEEE addition is commutative, so every lane of a row gets the
// same bits), never by the launch: the bits repeat.
//
// The gradient takes two passes over a query row's keys instead of three:
// the first computes the row's max, sum and output o (the forward), so delta
// = dy . o; the second, dq. Then, as before, a thread group per key row
// walks the query rows of its heads for dk and dv.
constexpr int kRowsPerBlock = 64;  // query (or key) rows a block takes
constexpr int kTileRows = 32;      // keys (or query rows) a shared-memory tile holds

// The sum of a row's dot product over the kSplit adjacent lanes that hold
// its parts, the same bits in each of them.
template <int kSplit>
__device__ __forceinline__ float SumOverRow(float part) {
  for (int lanes = 1; lanes < kSplit; lanes *= 2) part = part + __shfl_xor_sync(0xffffffffu, part, lanes);
  return part;
}

// sum_d mine[d] * row[d] in d order, one rounding per term (fmaf).
template <int kPart>
__device__ __forceinline__ float PartDot(const float (&mine)[kPart], const float* row) {
  const float4* row4 = reinterpret_cast<const float4*>(row);
  float sum = 0.0f;
  TANDEM_UNROLL
  for (int d = 0; d < kPart / 4; ++d) {
    const float4 x = row4[d];
    sum = fmaf(mine[4 * d], x.x, sum);
    sum = fmaf(mine[4 * d + 1], x.y, sum);
    sum = fmaf(mine[4 * d + 2], x.z, sum);
    sum = fmaf(mine[4 * d + 3], x.w, sum);
  }
  return sum;
}

// acc[d] += weight * row[d].
template <int kPart>
__device__ __forceinline__ void AddScaled(float (&acc)[kPart], float weight, const float* row) {
  const float4* row4 = reinterpret_cast<const float4*>(row);
  TANDEM_UNROLL
  for (int d = 0; d < kPart / 4; ++d) {
    const float4 x = row4[d];
    acc[4 * d] = fmaf(weight, x.x, acc[4 * d]);
    acc[4 * d + 1] = fmaf(weight, x.y, acc[4 * d + 1]);
    acc[4 * d + 2] = fmaf(weight, x.z, acc[4 * d + 2]);
    acc[4 * d + 3] = fmaf(weight, x.w, acc[4 * d + 3]);
  }
}

// The block's threads copy `count` units of 4 elements from `from` (and
// `also_from`, when given) into shared memory, widened; the caller syncs.
template <typename T>
__device__ __forceinline__ void CopyTile(float4* to, const T* from, float4* also_to, const T* also_from,
                                         int64_t count) {
  for (int64_t e = threadIdx.x; e < count; e += blockDim.x) {
    to[e] = Load4(from + 4 * e);
    if (also_from != nullptr) also_to[e] = Load4(also_from + 4 * e);
  }
}

// The keys query rows [first, first + kRowsPerBlock) of batch b read
// together: the most any of them reads.
__device__ int64_t KeysOfBlock(const int32_t* positions, const AttentionGeometry& g, int64_t b, int64_t first) {
  const int64_t last = (first + kRowsPerBlock < g.seq ? first + kRowsPerBlock : g.seq) - 1;
  if (positions == nullptr) return last + 1;
  int64_t most = 0;
  for (int64_t row = first; row <= last; ++row) {
    const int64_t keys = positions[b * g.seq + row] + 1;
    most = keys > most ? keys : most;
  }
  return most;
}

// One online-softmax sweep of a query row over the keys of its block: the
// running max m and sum l of exp(s - m) over the keys the row reads and,
// when `values` is given, acc = sum_j exp(s_j - m) v_j.
template <int W, int kSplit, bool kWithValues, typename T>
__device__ __forceinline__ void SweepKeys(const float (&q_part)[W / kSplit], const T* keys, const T* values,
                                          int64_t n, int64_t key_count, float scale, float4* key_tile,
                                          float4* value_tile, float (&acc)[W / kSplit], float& m, float& l) {
  constexpr int kPart = W / kSplit;
  const int part = static_cast<int>(threadIdx.x % kSplit);
  for (int64_t tile = 0; tile < key_count; tile += kTileRows) {
    const int64_t count = key_count - tile < kTileRows ? key_count - tile : kTileRows;
    CopyTile(key_tile, keys + tile * W, value_tile, kWithValues ? values + tile * W : nullptr, count * W / 4);
    __syncthreads();
    const int64_t mine = n - tile < count ? n - tile : count;  // this row's keys in the tile
    const float* key_rows = reinterpret_cast<const float*>(key_tile) + part * kPart;
    float scores[kTileRows];
    float tile_max = -INFINITY;
    TANDEM_UNROLL
    for (int j = 0; j < kTileRows; ++j) {
      scores[j] = SumOverRow<kSplit>(PartDot<kPart>(q_part, key_rows + j * W)) * scale;
      if (j < mine) tile_max = scores[j] > tile_max ? scores[j] : tile_max;
    }
    if (mine > 0) {
      const float next = m > tile_max ? m : tile_max;
      const float rescale = expf(m - next);  // 0 for the first tile (m = -inf)
      l = l * rescale;
      if constexpr (kWithValues) {
        TANDEM_UNROLL
        for (int d = 0; d < kPart; ++d) acc[d] = acc[d] * rescale;
      }
      const float* value_rows = reinterpret_cast<const float*>(value_tile) + part * kPart;
      TANDEM_UNROLL
      for (int j = 0; j < kTileRows; ++j) {
        if (j < mine) {
          const float p = expf(scores[j] - next);
          l = l + p;
          if constexpr (kWithValues) AddScaled<kPart>(acc, p, value_rows + j * W);
        }
      }
      m = next;
    }
    __syncthreads();  // the tiles are overwritten next
  }
}

// A query row's forward over `key_count` keys of its block: its part of q
// loaded into q_part, acc = sum_j exp(s_j - m) v_j, the max m and the sum l.
template <int W, int kSplit, typename T>
__device__ __forceinline__ void RowForward(const T* q_part_at, const T* keys, const T* values, int64_t n,
                                           int64_t key_count, float scale, float4* key_tile, float4* value_tile,
                                           float (&q_part)[W / kSplit], float (&acc)[W / kSplit], float& m, float& l) {
  LoadPart<W / kSplit>(q_part_at, q_part);
  TANDEM_UNROLL
  for (int d = 0; d < W / kSplit; ++d) acc[d] = 0.0f;
  m = -INFINITY;
  l = 0.0f;
  SweepKeys<W, kSplit, true, T>(q_part, keys, values, n, key_count, scale, key_tile, value_tile, acc, m, l);
}

template <int W, int kSplit, typename T>
__global__ void AttentionFastKernel(const T* q, const T* k, const T* v, const int32_t* positions, T* out,
                                    AttentionGeometry g, int64_t query_tiles, int64_t units) {
  constexpr int kPart = W / kSplit;
  __shared__ float4 key_tile[kTileRows * W / 4];
  __shared__ float4 value_tile[kTileRows * W / 4];
  const int part = static_cast<int>(threadIdx.x % kSplit);
  for (int64_t unit = blockIdx.x; unit < units; unit += gridDim.x) {
    const UnitRows rows = QueryRowsOf(unit, units, query_tiles, kRowsPerBlock);
    const int64_t b = rows.pair / g.heads;
    const int64_t i = rows.first + threadIdx.x / kSplit;
    const bool active = i < g.seq;
    const int64_t n = active ? (positions != nullptr ? positions[b * g.seq + i] : i) + 1 : 0;
    const int64_t r = rows.pair * g.seq + (active ? i : rows.first);
    float q_part[kPart], acc[kPart], m, l;
    RowForward<W, kSplit, T>(q + r * W + part * kPart, k + g.KeyBase(rows.pair * g.seq),
                             v + g.KeyBase(rows.pair * g.seq), n, KeysOfBlock(positions, g, b, rows.first), g.scale,
                             key_tile, value_tile, q_part, acc, m, l);
    if (active) StorePart<kPart>(out + r * W + part * kPart, acc, l, /*divide=*/true);
  }
}

// dq of each query row, and its max, sum and delta = dy . o into stats[3 row ..].
template <int W, int kSplit, typename T>
__global__ void AttentionQueryGradFastKernel(const T* q, const T* k, const T* v, const T* dy, T* dq, float* stats,
                                             AttentionGeometry g, int64_t query_tiles, int64_t units) {
  constexpr int kPart = W / kSplit;
  __shared__ float4 key_tile[kTileRows * W / 4];
  __shared__ float4 value_tile[kTileRows * W / 4];
  const int part = static_cast<int>(threadIdx.x % kSplit);
  for (int64_t unit = blockIdx.x; unit < units; unit += gridDim.x) {
    const UnitRows rows = QueryRowsOf(unit, units, query_tiles, kRowsPerBlock);
    const int64_t first = rows.first;
    const int64_t i = first + threadIdx.x / kSplit;
    const bool active = i < g.seq;
    const int64_t n = active ? i + 1 : 0;
    const int64_t key_count = first + kRowsPerBlock < g.seq ? first + kRowsPerBlock : g.seq;
    const int64_t r = rows.pair * g.seq + (active ? i : first);
    const T* keys = k + g.KeyBase(rows.pair * g.seq);
    const T* values = v + g.KeyBase(rows.pair * g.seq);
    float q_part[kPart], dy_part[kPart], acc[kPart], m, l;
    LoadPart<kPart>(dy + r * W + part * kPart, dy_part);
    RowForward<W, kSplit, T>(q + r * W + part * kPart, keys, values, n, key_count, g.scale, key_tile, value_tile,
                             q_part, acc, m, l);
    float delta_part = 0.0f;
    TANDEM_UNROLL
    for (int d = 0; d < kPart; ++d) delta_part = fmaf(dy_part[d], acc[d] / l, delta_part);
    const float delta = SumOverRow<kSplit>(delta_part);
    TANDEM_UNROLL
    for (int d = 0; d < kPart; ++d) acc[d] = 0.0f;  // now dq
    for (int64_t tile = 0; tile < key_count; tile += kTileRows) {
      const int64_t count = key_count - tile < kTileRows ? key_count - tile : kTileRows;
      CopyTile(key_tile, keys + tile * W, value_tile, values + tile * W, count * W / 4);
      __syncthreads();
      const int64_t mine = n - tile < count ? n - tile : count;
      const float* key_rows = reinterpret_cast<const float*>(key_tile) + part * kPart;
      const float* value_rows = reinterpret_cast<const float*>(value_tile) + part * kPart;
      TANDEM_UNROLL
      for (int j = 0; j < kTileRows; ++j) {
        const float s = SumOverRow<kSplit>(PartDot<kPart>(q_part, key_rows + j * W)) * g.scale;
        const float dp = SumOverRow<kSplit>(PartDot<kPart>(dy_part, value_rows + j * W));
        if (j < mine) {
          const float p = expf(s - m) / l;
          AddScaled<kPart>(acc, p * (dp - delta), key_rows + j * W);
        }
      }
      __syncthreads();
    }
    if (active) {
      StorePart<kPart>(dq + r * W + part * kPart, acc, g.scale, /*divide=*/false);
      if (part == 0) {
        stats[3 * r] = m;
        stats[3 * r + 1] = l;
        stats[3 * r + 2] = delta;
      }
    }
  }
}

// dk and dv of each key row j of each key/value head: over its query heads
// in order and, within each, the query rows i >= j in order.
template <int W, int kSplit, typename T>
__global__ void AttentionKeyGradFastKernel(const T* q, const T* k, const T* v, const T* dy, const float* stats, T* dk,
                                           T* dv, AttentionGeometry g, int64_t key_tiles, int64_t units) {
  constexpr int kPart = W / kSplit;
  __shared__ float4 query_tile[kTileRows * W / 4];
  __shared__ float4 dy_tile[kTileRows * W / 4];
  __shared__ float stats_tile[3 * kTileRows];
  const int part = static_cast<int>(threadIdx.x % kSplit);
  for (int64_t unit = blockIdx.x; unit < units; unit += gridDim.x) {
    const UnitRows keys_of_unit = KeyRowsOf(unit, units, key_tiles, kRowsPerBlock);
    const int64_t kv_pair = keys_of_unit.pair, first = keys_of_unit.first;
    const int64_t j = first + threadIdx.x / kSplit;
    const bool active = j < g.seq;
    const int64_t c = kv_pair * g.seq + (active ? j : first);
    const int64_t batch = kv_pair / g.kv_heads, kv_head = kv_pair % g.kv_heads;
    float key_part[kPart], value_part[kPart], dk_acc[kPart], dv_acc[kPart];
    LoadPart<kPart>(k + c * W + part * kPart, key_part);
    LoadPart<kPart>(v + c * W + part * kPart, value_part);
    TANDEM_UNROLL
    for (int d = 0; d < kPart; ++d) {
      dk_acc[d] = 0.0f;
      dv_acc[d] = 0.0f;
    }
    for (int64_t h = kv_head * g.group; h < (kv_head + 1) * g.group; ++h) {
      const int64_t head_rows = (batch * g.heads + h) * g.seq;
      // Query rows before `first` read none of the block's keys.
      for (int64_t tile = first; tile < g.seq; tile += kTileRows) {
        const int64_t count = g.seq - tile < kTileRows ? g.seq - tile : kTileRows;
        CopyTile(query_tile, q + (head_rows + tile) * W, dy_tile, dy + (head_rows + tile) * W, count * W / 4);
        for (int64_t e = threadIdx.x; e < 3 * count; e += blockDim.x) stats_tile[e] = stats[3 * (head_rows + tile) + e];
        __syncthreads();
        const float* query_rows = reinterpret_cast<const float*>(query_tile) + part * kPart;
        const float* dy_rows = reinterpret_cast<const float*>(dy_tile) + part * kPart;
        TANDEM_UNROLL
        for (int t = 0; t < kTileRows; ++t) {
          const float s = SumOverRow<kSplit>(PartDot<kPart>(key_part, query_rows + t * W)) * g.scale;
          const float dp = SumOverRow<kSplit>(PartDot<kPart>(value_part, dy_rows + t * W));
          if (active && t < count && tile + t >= j) {  // query row i reads key j only when i >= j
            const float p = expf(s - stats_tile[3 * t]) / stats_tile[3 * t + 1];
            AddScaled<kPart>(dv_acc, p, dy_rows + t * W);
            AddScaled<kPart>(dk_acc, p * (dp - stats_tile[3 * t + 2]), query_rows + t * W);
          }
        }
        __syncthreads();  // the tiles are overwritten next
      }
    }
    if (active) {
      StorePart<kPart>(dk + c * W + part * kPart, dk_acc, g.scale, /*divide=*/false);
      StorePart<kPart>(dv + c * W + part * kPart, dv_acc, 1.0f, /*divide=*/false);
    }
  }
}

}  // namespace

template <typename T>
cudaError_t LaunchAttentionLanes(const T* q, const T* k, const T* v, const int32_t* positions, T* out,
                                 const AttentionGeometry& g, int64_t pairs, cudaStream_t stream) {
  if (g.width != 128) return cudaErrorInvalidValue;
  constexpr int kSplit = 2;  // 64 of a row's elements a lane
  const int64_t query_tiles = (g.seq + kRowsPerBlock - 1) / kRowsPerBlock;
  return LaunchUnits(pairs * query_tiles, kRowsPerBlock * kSplit, stream, AttentionFastKernel<128, kSplit, T>, q, k,
                     v, positions, out, g, query_tiles, pairs * query_tiles);
}

template <typename T>
cudaError_t LaunchAttentionLanesGrad(const T* q, const T* k, const T* v, const T* dy, T* dq, T* dk, T* dv,
                                     float* stats, const AttentionGeometry& g, int64_t batch, cudaStream_t stream) {
  if (g.width != 128) return cudaErrorInvalidValue;
  constexpr int kSplit = 4;  // 32 of a row's elements a lane: a thread holds three rows' worth
  const int64_t query_tiles = (g.seq + kRowsPerBlock - 1) / kRowsPerBlock;
  const int64_t query_units = batch * g.heads * query_tiles;
  if (cudaError_t error = LaunchUnits(query_units, kRowsPerBlock * kSplit, stream,
                                      AttentionQueryGradFastKernel<128, kSplit, T>, q, k, v, dy, dq, stats, g,
                                      query_tiles, query_units);
      error != cudaSuccess) {
    return error;
  }
  const int64_t key_units = batch * g.kv_heads * query_tiles;
  return LaunchUnits(key_units, kRowsPerBlock * kSplit, stream, AttentionKeyGradFastKernel<128, kSplit, T>, q, k, v,
                     dy, stats, dk, dv, g, query_tiles, key_units);
}

TANDEM_ATTENTION_FAMILY_OF(Lanes, float)  // bf16 at these widths: attention_mma.cu

}  // namespace tandem::cuda::kernels
