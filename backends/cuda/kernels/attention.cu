// The CUDA backend's position kernels (cuda_kernels.cuh): the rotary
// embedding and causal attention with its gradient, fp32 SIMT.

#include "backends/cuda/kernels/common.cuh"

namespace tandem::cuda::kernels {
namespace {

// ---- Causal attention (ir/op.h kAttention), fp32 SIMT: a thread per query
// row (or, for dk and dv, per key row), the scores recomputed in each pass
// instead of stored, so no T x T buffer exists. Every sum runs in index
// order within its thread.

// The attention geometry: q [batch, heads, seq, width], k and v [batch,
// kv_heads, keys, width] (keys == seq unless the queries have positions);
// query head h reads key/value head h / group.
struct AttentionGeometry {
  int64_t heads, kv_heads, group, seq, width;
  float scale;
  int64_t keys;
  // The first element of the key/value head that query row `row` reads.
  __device__ int64_t KeyBase(int64_t row) const {
    const int64_t pair = row / seq;
    return ((pair / heads) * kv_heads + (pair % heads) / group) * keys * width;
  }
};

__device__ float Dot(const float* a, const float* b, int64_t width) {
  float sum = 0.0f;
  for (int64_t d = 0; d < width; ++d) sum = sum + a[d] * b[d];
  return sum;
}

// The max and the sum of exp(s - max) of query row `row`'s scores.
__device__ void RowStatistics(const float* q_row, const float* keys, int64_t n, const AttentionGeometry& g,
                              float* max, float* sum) {
  float m = -INFINITY;
  for (int64_t j = 0; j < n; ++j) {
    const float s = Dot(q_row, keys + j * g.width, g.width) * g.scale;
    m = s > m ? s : m;
  }
  float l = 0.0f;
  for (int64_t j = 0; j < n; ++j) l += expf(Dot(q_row, keys + j * g.width, g.width) * g.scale - m);
  *max = m;
  *sum = l;
}

// positions: null (row i reads keys 0..i), or [batch, seq], checked to lie
// in [0, keys) before the launch.
__global__ void AttentionKernel(const float* q, const float* k, const float* v, const int32_t* positions,
                                float* out, AttentionGeometry g, int64_t rows) {
  for (int64_t r = FirstIndex(); r < rows; r += GridStride()) {
    const int64_t i = r % g.seq;
    const int64_t b = r / (g.seq * g.heads);
    const int64_t n = (positions != nullptr ? positions[b * g.seq + i] : i) + 1;
    const float* q_row = q + r * g.width;
    const float* keys = k + g.KeyBase(r);
    const float* values = v + g.KeyBase(r);
    float* o = out + r * g.width;
    float max, sum;
    RowStatistics(q_row, keys, n, g, &max, &sum);
    for (int64_t d = 0; d < g.width; ++d) o[d] = 0.0f;
    for (int64_t j = 0; j < n; ++j) {
      const float e = expf(Dot(q_row, keys + j * g.width, g.width) * g.scale - max);
      for (int64_t d = 0; d < g.width; ++d) o[d] = o[d] + e * values[j * g.width + d];
    }
    for (int64_t d = 0; d < g.width; ++d) o[d] = o[d] / sum;
  }
}

// The forward in the manner of FlashAttention-2, for widths up to
// kMaxTiledWidth: a block of kQueryTile threads takes kQueryTile query rows
// of one (batch, head) pair, a row a thread, and walks the keys those rows
// read in tiles of kKeyTile, each tile's keys and values loaded once into
// shared memory for the whole block (the row-per-thread kernel above reads
// them from global memory once per row and pass). Each row keeps a running
// max m, sum l and output accumulator: a tile's scores are computed into
// registers, the accumulator and l are rescaled by exp(m - m') once per
// tile, then the tile's weights exp(s - m') added in key order. No T x T
// buffer exists, and the order of every operation is fixed by the shape
// (the tile sizes are constants), never by the launch, so the bits repeat;
// they differ from the two-pass kernel's (and the reference's) by the
// rescaling's rounding, a few ulp.
constexpr int kQueryTile = 64;
constexpr int kKeyTile = 32;
constexpr int64_t kMaxTiledWidth = 128;

// The block's threads copy `rows` rows of `width` from `from` (and from
// `also_from`, when given) into shared memory; the caller syncs.
__device__ void LoadRows(float* to, const float* from, float* also_to, const float* also_from, int64_t rows,
                         int64_t width) {
  for (int64_t e = threadIdx.x; e < rows * width; e += blockDim.x) {
    to[e] = from[e];
    if (also_from != nullptr) also_to[e] = also_from[e];
  }
}

// Launches `kernel` on `threads`-thread blocks over `units` units of work
// (its blocks loop over them past the grid's bound).
template <typename Kernel, typename... Args>
cudaError_t LaunchUnits(int64_t units, int threads, cudaStream_t stream, Kernel kernel, Args... args) {
  if (units <= 0) return cudaSuccess;
  TANDEM_LAUNCH(kernel, static_cast<unsigned>(units < kMaxBlocks ? units : kMaxBlocks), threads, 0, stream)(args...);
  return cudaGetLastError();
}

__global__ void AttentionTiledKernel(const float* q, const float* k, const float* v, const int32_t* positions,
                                     float* out, AttentionGeometry g, int64_t query_tiles, int64_t units) {
  __shared__ float key_tile[kKeyTile * kMaxTiledWidth];
  __shared__ float value_tile[kKeyTile * kMaxTiledWidth];
  __shared__ int64_t block_keys;
  for (int64_t unit = blockIdx.x; unit < units; unit += gridDim.x) {
    const int64_t pair = unit / query_tiles;  // batch * heads + head
    const int64_t first = (unit % query_tiles) * kQueryTile;
    const int64_t b = pair / g.heads;
    const int64_t i = first + threadIdx.x;
    const bool active = i < g.seq;
    // Keys row i reads: 0..positions[b, i], or 0..i.
    const int64_t n = active ? (positions != nullptr ? positions[b * g.seq + i] : i) + 1 : 0;
    if (threadIdx.x == 0) {
      int64_t most = 0;
      for (int64_t row = first; row < first + kQueryTile && row < g.seq; ++row) {
        const int64_t keys = (positions != nullptr ? positions[b * g.seq + row] : row) + 1;
        most = keys > most ? keys : most;
      }
      block_keys = most;
    }
    __syncthreads();
    const int64_t key_count = block_keys;
    const int64_t r = pair * g.seq + (active ? i : first);
    const float* keys = k + g.KeyBase(pair * g.seq);
    const float* values = v + g.KeyBase(pair * g.seq);
    const float* q_row = q + r * g.width;
    float acc[kMaxTiledWidth];
    for (int64_t d = 0; d < g.width; ++d) acc[d] = 0.0f;
    float m = -INFINITY;
    float l = 0.0f;
    for (int64_t tile = 0; tile < key_count; tile += kKeyTile) {
      const int64_t count = key_count - tile < kKeyTile ? key_count - tile : kKeyTile;
      LoadRows(key_tile, keys + tile * g.width, value_tile, values + tile * g.width, count, g.width);
      __syncthreads();
      const int64_t mine = n - tile < count ? n - tile : count;  // this row's keys in the tile
      if (mine > 0) {
        float scores[kKeyTile];
        float tile_max = -INFINITY;
        for (int64_t j = 0; j < mine; ++j) {
          scores[j] = Dot(q_row, key_tile + j * g.width, g.width) * g.scale;
          tile_max = scores[j] > tile_max ? scores[j] : tile_max;
        }
        const float next = m > tile_max ? m : tile_max;
        const float rescale = expf(m - next);  // 0 for the first tile (m = -inf)
        l = l * rescale;
        for (int64_t d = 0; d < g.width; ++d) acc[d] = acc[d] * rescale;
        for (int64_t j = 0; j < mine; ++j) {
          const float p = expf(scores[j] - next);
          l = l + p;
          for (int64_t d = 0; d < g.width; ++d) acc[d] = acc[d] + p * value_tile[j * g.width + d];
        }
        m = next;
      }
      __syncthreads();  // the tile is overwritten next
    }
    if (active) {
      float* o = out + r * g.width;
      for (int64_t d = 0; d < g.width; ++d) o[d] = acc[d] / l;
    }
    __syncthreads();  // block_keys is rewritten for the next unit
  }
}

// dq of each query row, and its max, sum and delta = sum_j p_j dp_j into
// stats[3 row ..].
__global__ void AttentionQueryGradKernel(const float* q, const float* k, const float* v, const float* dy,
                                         float* dq, float* stats, AttentionGeometry g, int64_t rows) {
  for (int64_t r = FirstIndex(); r < rows; r += GridStride()) {
    const int64_t n = r % g.seq + 1;
    const float* q_row = q + r * g.width;
    const float* dy_row = dy + r * g.width;
    const float* keys = k + g.KeyBase(r);
    const float* values = v + g.KeyBase(r);
    float max, sum;
    RowStatistics(q_row, keys, n, g, &max, &sum);
    float delta = 0.0f;
    for (int64_t j = 0; j < n; ++j) {
      const float p = expf(Dot(q_row, keys + j * g.width, g.width) * g.scale - max) / sum;
      delta += p * Dot(dy_row, values + j * g.width, g.width);
    }
    float* dq_row = dq + r * g.width;
    for (int64_t d = 0; d < g.width; ++d) dq_row[d] = 0.0f;
    for (int64_t j = 0; j < n; ++j) {
      const float p = expf(Dot(q_row, keys + j * g.width, g.width) * g.scale - max) / sum;
      const float ds = p * (Dot(dy_row, values + j * g.width, g.width) - delta);
      for (int64_t d = 0; d < g.width; ++d) dq_row[d] = dq_row[d] + ds * keys[j * g.width + d];
    }
    for (int64_t d = 0; d < g.width; ++d) dq_row[d] = dq_row[d] * g.scale;
    stats[3 * r] = max;
    stats[3 * r + 1] = sum;
    stats[3 * r + 2] = delta;
  }
}

// dk and dv of each key row j of each key/value head: over its query heads
// in order and, within each, the query rows i >= j in order.
__global__ void AttentionKeyGradKernel(const float* q, const float* k, const float* v, const float* dy,
                                       const float* stats, float* dk, float* dv, AttentionGeometry g,
                                       int64_t key_rows) {
  for (int64_t c = FirstIndex(); c < key_rows; c += GridStride()) {
    const int64_t j = c % g.seq;
    const int64_t kv_pair = c / g.seq;
    const int64_t batch = kv_pair / g.kv_heads, kv_head = kv_pair % g.kv_heads;
    const float* key = k + c * g.width;
    const float* value = v + c * g.width;
    float* dk_row = dk + c * g.width;
    float* dv_row = dv + c * g.width;
    for (int64_t d = 0; d < g.width; ++d) {
      dk_row[d] = 0.0f;
      dv_row[d] = 0.0f;
    }
    for (int64_t h = kv_head * g.group; h < (kv_head + 1) * g.group; ++h) {
      for (int64_t i = j; i < g.seq; ++i) {
        const int64_t r = (batch * g.heads + h) * g.seq + i;
        const float* q_row = q + r * g.width;
        const float* dy_row = dy + r * g.width;
        const float p = expf(Dot(q_row, key, g.width) * g.scale - stats[3 * r]) / stats[3 * r + 1];
        const float ds = p * (Dot(dy_row, value, g.width) - stats[3 * r + 2]);
        for (int64_t d = 0; d < g.width; ++d) {
          dv_row[d] = dv_row[d] + p * dy_row[d];
          dk_row[d] = dk_row[d] + ds * q_row[d];
        }
      }
    }
    for (int64_t d = 0; d < g.width; ++d) dk_row[d] = dk_row[d] * g.scale;
  }
}

// The gradient, tiled as the forward is (widths up to kMaxTiledWidth).
// dq: a block of kQueryTile query rows of one pair sweeps the keys its rows
// read three times through shared-memory tiles: the running max and sum,
// then delta = sum_j p_j dp_j, then dq; it leaves each row's max, sum and
// delta in `stats` for the keys' pass. dk and dv: a block of kKeyRows key
// rows of one key/value pair walks the query rows of each of its query
// heads in tiles of kQueryRowsTile (rows, dy rows and stats loaded once for
// the block); each key row adds, per head in order and query row in order
// from its own, exactly the terms the row-per-thread kernel adds. No
// atomics: every sum is one thread's, in an order fixed by the shape.
constexpr int kKeyRows = 64;
constexpr int kQueryRowsTile = 32;

__global__ void AttentionQueryGradTiledKernel(const float* q, const float* k, const float* v, const float* dy,
                                              float* dq, float* stats, AttentionGeometry g, int64_t query_tiles,
                                              int64_t units) {
  __shared__ float key_tile[kKeyTile * kMaxTiledWidth];
  __shared__ float value_tile[kKeyTile * kMaxTiledWidth];
  for (int64_t unit = blockIdx.x; unit < units; unit += gridDim.x) {
    const int64_t pair = unit / query_tiles;
    const int64_t first = (unit % query_tiles) * kQueryTile;
    const int64_t i = first + threadIdx.x;
    const bool active = i < g.seq;
    const int64_t n = active ? i + 1 : 0;
    const int64_t key_count = first + kQueryTile < g.seq ? first + kQueryTile : g.seq;
    const int64_t r = pair * g.seq + (active ? i : first);
    const float* keys = k + g.KeyBase(pair * g.seq);
    const float* values = v + g.KeyBase(pair * g.seq);
    const float* q_row = q + r * g.width;
    const float* dy_row = dy + r * g.width;
    // Loads the tile at `tile` (keys, and values when asked) and returns
    // how many of its keys this row reads.
    auto load = [&](int64_t tile, bool with_values) {
      const int64_t count = key_count - tile < kKeyTile ? key_count - tile : kKeyTile;
      LoadRows(key_tile, keys + tile * g.width, value_tile, with_values ? values + tile * g.width : nullptr, count,
               g.width);
      __syncthreads();
      return n - tile < count ? n - tile : count;
    };
    float m = -INFINITY;
    float l = 0.0f;
    for (int64_t tile = 0; tile < key_count; tile += kKeyTile) {
      const int64_t mine = load(tile, false);
      if (mine > 0) {
        float scores[kKeyTile];
        float tile_max = -INFINITY;
        for (int64_t j = 0; j < mine; ++j) {
          scores[j] = Dot(q_row, key_tile + j * g.width, g.width) * g.scale;
          tile_max = scores[j] > tile_max ? scores[j] : tile_max;
        }
        const float next = m > tile_max ? m : tile_max;
        l = l * expf(m - next);
        for (int64_t j = 0; j < mine; ++j) l = l + expf(scores[j] - next);
        m = next;
      }
      __syncthreads();
    }
    float delta = 0.0f;
    for (int64_t tile = 0; tile < key_count; tile += kKeyTile) {
      const int64_t mine = load(tile, true);
      for (int64_t j = 0; j < mine; ++j) {
        const float p = expf(Dot(q_row, key_tile + j * g.width, g.width) * g.scale - m) / l;
        delta += p * Dot(dy_row, value_tile + j * g.width, g.width);
      }
      __syncthreads();
    }
    float acc[kMaxTiledWidth];
    for (int64_t d = 0; d < g.width; ++d) acc[d] = 0.0f;
    for (int64_t tile = 0; tile < key_count; tile += kKeyTile) {
      const int64_t mine = load(tile, true);
      for (int64_t j = 0; j < mine; ++j) {
        const float p = expf(Dot(q_row, key_tile + j * g.width, g.width) * g.scale - m) / l;
        const float ds = p * (Dot(dy_row, value_tile + j * g.width, g.width) - delta);
        for (int64_t d = 0; d < g.width; ++d) acc[d] = acc[d] + ds * key_tile[j * g.width + d];
      }
      __syncthreads();
    }
    if (active) {
      float* dq_row = dq + r * g.width;
      for (int64_t d = 0; d < g.width; ++d) dq_row[d] = acc[d] * g.scale;
      stats[3 * r] = m;
      stats[3 * r + 1] = l;
      stats[3 * r + 2] = delta;
    }
  }
}

__global__ void AttentionKeyGradTiledKernel(const float* q, const float* k, const float* v, const float* dy,
                                            const float* stats, float* dk, float* dv, AttentionGeometry g,
                                            int64_t key_tiles, int64_t units) {
  __shared__ float query_tile[kQueryRowsTile * kMaxTiledWidth];
  __shared__ float dy_tile[kQueryRowsTile * kMaxTiledWidth];
  __shared__ float stats_tile[3 * kQueryRowsTile];
  for (int64_t unit = blockIdx.x; unit < units; unit += gridDim.x) {
    const int64_t kv_pair = unit / key_tiles;
    const int64_t first = (unit % key_tiles) * kKeyRows;
    const int64_t j = first + threadIdx.x;
    const bool active = j < g.seq;
    const int64_t c = kv_pair * g.seq + (active ? j : first);
    const int64_t batch = kv_pair / g.kv_heads, kv_head = kv_pair % g.kv_heads;
    const float* key = k + c * g.width;
    const float* value = v + c * g.width;
    float dk_acc[kMaxTiledWidth];
    float dv_acc[kMaxTiledWidth];
    for (int64_t d = 0; d < g.width; ++d) {
      dk_acc[d] = 0.0f;
      dv_acc[d] = 0.0f;
    }
    for (int64_t h = kv_head * g.group; h < (kv_head + 1) * g.group; ++h) {
      const int64_t head_rows = (batch * g.heads + h) * g.seq;
      // Query rows before `first` read none of the block's keys.
      for (int64_t tile = first; tile < g.seq; tile += kQueryRowsTile) {
        const int64_t count = g.seq - tile < kQueryRowsTile ? g.seq - tile : kQueryRowsTile;
        LoadRows(query_tile, q + (head_rows + tile) * g.width, dy_tile, dy + (head_rows + tile) * g.width, count,
                 g.width);
        LoadRows(stats_tile, stats + 3 * (head_rows + tile), nullptr, nullptr, count, 3);
        __syncthreads();
        if (active) {
          for (int64_t t = 0; t < count; ++t) {
            if (tile + t < j) continue;  // query row i reads key j only when i >= j
            const float* q_row = query_tile + t * g.width;
            const float* dy_row = dy_tile + t * g.width;
            const float p = expf(Dot(q_row, key, g.width) * g.scale - stats_tile[3 * t]) / stats_tile[3 * t + 1];
            const float ds = p * (Dot(dy_row, value, g.width) - stats_tile[3 * t + 2]);
            for (int64_t d = 0; d < g.width; ++d) {
              dv_acc[d] = dv_acc[d] + p * dy_row[d];
              dk_acc[d] = dk_acc[d] + ds * q_row[d];
            }
          }
        }
        __syncthreads();  // the tiles are overwritten next
      }
    }
    if (active) {
      float* dk_row = dk + c * g.width;
      float* dv_row = dv + c * g.width;
      for (int64_t d = 0; d < g.width; ++d) {
        dk_row[d] = dk_acc[d] * g.scale;
        dv_row[d] = dv_acc[d];
      }
    }
  }
}

// ---- Causal attention at head width 128 (the tile products below take 32
// and 64, whose tiles fit in shared memory): the tiled kernels' walk, with
// the width a compile-time constant so that a row's query, cotangent and
// accumulators live in registers (the kernels above index them by a
// run-time width, which puts them in local memory), rows split between
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

// Whether the fast kernels take this width (they also need every pointer
// Aligned16, for their 16-byte loads).
bool FastAttentionWidth(int64_t width) { return width == 32 || width == 64 || width == 128; }

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

template <int kPart>
__device__ __forceinline__ void LoadPart(const float* from, float (&to)[kPart]) {
  const float4* from4 = reinterpret_cast<const float4*>(from);
  TANDEM_UNROLL
  for (int d = 0; d < kPart / 4; ++d) {
    const float4 x = from4[d];
    to[4 * d] = x.x;
    to[4 * d + 1] = x.y;
    to[4 * d + 2] = x.z;
    to[4 * d + 3] = x.w;
  }
}

// to[d] = from[d] * factor.
template <int kPart>
__device__ __forceinline__ void StorePart(float* to, const float (&from)[kPart], float factor, bool divide) {
  float4* to4 = reinterpret_cast<float4*>(to);
  TANDEM_UNROLL
  for (int d = 0; d < kPart / 4; ++d) {
    float4 x;
    x.x = divide ? from[4 * d] / factor : from[4 * d] * factor;
    x.y = divide ? from[4 * d + 1] / factor : from[4 * d + 1] * factor;
    x.z = divide ? from[4 * d + 2] / factor : from[4 * d + 2] * factor;
    x.w = divide ? from[4 * d + 3] / factor : from[4 * d + 3] * factor;
    to4[d] = x;
  }
}

// The block's threads copy `count` float4s from `from` (and `also_from`,
// when given) into shared memory; the caller syncs.
__device__ __forceinline__ void CopyTile(float4* to, const float* from, float4* also_to, const float* also_from,
                                         int64_t count) {
  const float4* from4 = reinterpret_cast<const float4*>(from);
  const float4* also4 = reinterpret_cast<const float4*>(also_from);
  for (int64_t e = threadIdx.x; e < count; e += blockDim.x) {
    to[e] = from4[e];
    if (also_from != nullptr) also_to[e] = also4[e];
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
template <int W, int kSplit, bool kWithValues>
__device__ __forceinline__ void SweepKeys(const float (&q_part)[W / kSplit], const float* keys, const float* values,
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

// A block's unit of query rows: its (batch, head) pair and first row. The
// last rows of a pair read the most keys: their units go first.
struct QueryRows {
  int64_t pair, first;
};
__device__ QueryRows QueryRowsOf(int64_t unit, int64_t tiles, int64_t rows_per_tile) {
  return {unit / tiles, (tiles - 1 - unit % tiles) * rows_per_tile};
}

// A query row's forward over `key_count` keys of its block: its part of q
// loaded into q_part, acc = sum_j exp(s_j - m) v_j, the max m and the sum l.
template <int W, int kSplit>
__device__ __forceinline__ void RowForward(const float* q_part_at, const float* keys, const float* values, int64_t n,
                                           int64_t key_count, float scale, float4* key_tile, float4* value_tile,
                                           float (&q_part)[W / kSplit], float (&acc)[W / kSplit], float& m, float& l) {
  LoadPart<W / kSplit>(q_part_at, q_part);
  TANDEM_UNROLL
  for (int d = 0; d < W / kSplit; ++d) acc[d] = 0.0f;
  m = -INFINITY;
  l = 0.0f;
  SweepKeys<W, kSplit, true>(q_part, keys, values, n, key_count, scale, key_tile, value_tile, acc, m, l);
}

template <int W, int kSplit>
__global__ void AttentionFastKernel(const float* q, const float* k, const float* v, const int32_t* positions,
                                    float* out, AttentionGeometry g, int64_t query_tiles, int64_t units) {
  constexpr int kPart = W / kSplit;
  __shared__ float4 key_tile[kTileRows * W / 4];
  __shared__ float4 value_tile[kTileRows * W / 4];
  const int part = static_cast<int>(threadIdx.x % kSplit);
  for (int64_t unit = blockIdx.x; unit < units; unit += gridDim.x) {
    const QueryRows rows = QueryRowsOf(unit, query_tiles, kRowsPerBlock);
    const int64_t b = rows.pair / g.heads;
    const int64_t i = rows.first + threadIdx.x / kSplit;
    const bool active = i < g.seq;
    const int64_t n = active ? (positions != nullptr ? positions[b * g.seq + i] : i) + 1 : 0;
    const int64_t r = rows.pair * g.seq + (active ? i : rows.first);
    float q_part[kPart], acc[kPart], m, l;
    RowForward<W, kSplit>(q + r * W + part * kPart, k + g.KeyBase(rows.pair * g.seq),
                          v + g.KeyBase(rows.pair * g.seq), n, KeysOfBlock(positions, g, b, rows.first), g.scale,
                          key_tile, value_tile, q_part, acc, m, l);
    if (active) StorePart<kPart>(out + r * W + part * kPart, acc, l, /*divide=*/true);
  }
}

// dq of each query row, and its max, sum and delta = dy . o into stats[3 row ..].
template <int W, int kSplit>
__global__ void AttentionQueryGradFastKernel(const float* q, const float* k, const float* v, const float* dy,
                                             float* dq, float* stats, AttentionGeometry g, int64_t query_tiles,
                                             int64_t units) {
  constexpr int kPart = W / kSplit;
  __shared__ float4 key_tile[kTileRows * W / 4];
  __shared__ float4 value_tile[kTileRows * W / 4];
  const int part = static_cast<int>(threadIdx.x % kSplit);
  for (int64_t unit = blockIdx.x; unit < units; unit += gridDim.x) {
    const QueryRows rows = QueryRowsOf(unit, query_tiles, kRowsPerBlock);
    const int64_t first = rows.first;
    const int64_t i = first + threadIdx.x / kSplit;
    const bool active = i < g.seq;
    const int64_t n = active ? i + 1 : 0;
    const int64_t key_count = first + kRowsPerBlock < g.seq ? first + kRowsPerBlock : g.seq;
    const int64_t r = rows.pair * g.seq + (active ? i : first);
    const float* keys = k + g.KeyBase(rows.pair * g.seq);
    const float* values = v + g.KeyBase(rows.pair * g.seq);
    float q_part[kPart], dy_part[kPart], acc[kPart], m, l;
    LoadPart<kPart>(dy + r * W + part * kPart, dy_part);
    RowForward<W, kSplit>(q + r * W + part * kPart, keys, values, n, key_count, g.scale, key_tile, value_tile, q_part,
                          acc, m, l);
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
template <int W, int kSplit>
__global__ void AttentionKeyGradFastKernel(const float* q, const float* k, const float* v, const float* dy,
                                           const float* stats, float* dk, float* dv, AttentionGeometry g,
                                           int64_t key_tiles, int64_t units) {
  constexpr int kPart = W / kSplit;
  __shared__ float4 query_tile[kTileRows * W / 4];
  __shared__ float4 dy_tile[kTileRows * W / 4];
  __shared__ float stats_tile[3 * kTileRows];
  const int part = static_cast<int>(threadIdx.x % kSplit);
  for (int64_t unit = blockIdx.x; unit < units; unit += gridDim.x) {
    const int64_t kv_pair = unit / key_tiles;
    const int64_t first = (unit % key_tiles) * kRowsPerBlock;  // the first key tiles have the most rows to read
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

// ---- The forward as small matrix products (widths 32 and 64): a block of
// 64 threads takes kTile query rows of one (batch, head) pair and walks
// their keys in tiles of kTile, as FlashAttention-2 does on tensor cores but
// in fp32 fused multiply-adds. The 8 x 8 threads tile each product: thread
// (row group r, column group c) computes the scores of rows 4r..4r+3 with
// keys 4c..4c+3 (S = Q K^T), and the output of those rows in columns
// c W/8 .. (c + 1) W/8 (O += P V), each operand read from shared memory
// with 16-byte loads and used 4 or 8 times. A row's max and sum are folded
// over its 8 threads by shuffles in a fixed tree. Every order is fixed by
// the shape and these constants: the bits repeat.
constexpr int kTile = 32;
constexpr int kTileThreads = 64;
constexpr int kWeightStride = kTile + 4;  // a row of a weights tile (P, dS), padded against bank conflicts

// acc[i][j] += sum_k a[k][i] * b[k][j] over k < kDepth: a and b k-major in
// shared memory (rows of a_stride and b_stride floats, 16-byte aligned).
template <int R, int C, int kDepth>
__device__ __forceinline__ void AddProduct(float (&acc)[R][C], const float* a, int a_stride, const float* b,
                                           int b_stride) {
  TANDEM_UNROLL
  for (int k = 0; k < kDepth; ++k) {
    float x[R], y[C];
    LoadPart<R>(a + k * a_stride, x);
    LoadPart<C>(b + k * b_stride, y);
    TANDEM_UNROLL
    for (int i = 0; i < R; ++i) {
      TANDEM_UNROLL
      for (int j = 0; j < C; ++j) acc[i][j] = fmaf(x[i], y[j], acc[i][j]);
    }
  }
}

// The fold of a row's value over the 8 adjacent lanes that hold its parts
// (max or sum), the same bits in each.
__device__ __forceinline__ float RowMax(float value) {
  for (int lanes = 1; lanes < 8; lanes *= 2) value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, lanes));
  return value;
}
__device__ __forceinline__ float RowSum(float value) {
  for (int lanes = 1; lanes < 8; lanes *= 2) value = value + __shfl_xor_sync(0xffffffffu, value, lanes);
  return value;
}

// Rows [0, count) of a [rows, W] matrix into shared memory k-major (to[d *
// kTile + row]; consecutive threads write consecutive rows), zeros past
// `count`; the block's threads share it, the caller syncs.
template <int W>
__device__ __forceinline__ void LoadTransposed(float* to, const float* from, int64_t count) {
  for (int e = threadIdx.x; e < kTile * W / 4; e += blockDim.x) {
    const int row = e % kTile, chunk = e / kTile;
    float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (row < count) x = reinterpret_cast<const float4*>(from + row * W)[chunk];
    to[(4 * chunk) * kTile + row] = x.x;
    to[(4 * chunk + 1) * kTile + row] = x.y;
    to[(4 * chunk + 2) * kTile + row] = x.z;
    to[(4 * chunk + 3) * kTile + row] = x.w;
  }
}

// Rows [0, count) of a [rows, W] matrix into shared memory as they are, zeros
// past `count`.
template <int W>
__device__ __forceinline__ void LoadRowsOf(float4* to, const float* from, int64_t count) {
  const float4* from4 = reinterpret_cast<const float4*>(from);
  for (int e = threadIdx.x; e < kTile * W / 4; e += blockDim.x) {
    to[e] = e / (W / 4) < count ? from4[e] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
}

// This thread's scores of its 4 query rows (rows.. in the tile) with its 4
// keys (4 group.. of the key tile at `tile`): Q K^T from the k-major tiles,
// scaled; -inf where a row does not read the key (key >= n[i]).
template <int W>
__device__ __forceinline__ void TileScores(const float* qt, const float* kt, int rows, int group, int64_t tile,
                                           const int64_t (&n)[4], float scale, float (&s)[4][4]) {
  TANDEM_UNROLL
  for (int i = 0; i < 4; ++i) {
    TANDEM_UNROLL
    for (int j = 0; j < 4; ++j) s[i][j] = 0.0f;
  }
  AddProduct<4, 4, W>(s, qt + rows, kTile, kt + 4 * group, kTile);
  TANDEM_UNROLL
  for (int i = 0; i < 4; ++i) {
    TANDEM_UNROLL
    for (int j = 0; j < 4; ++j) s[i][j] = tile + 4 * group + j < n[i] ? s[i][j] * scale : -INFINITY;
  }
}

// Rows before their first key: o = 0, m = -inf, l = 0.
template <int kColumns>
__device__ __forceinline__ void StartRows(float (&o)[4][kColumns], float (&m)[4], float (&l)[4]) {
  TANDEM_UNROLL
  for (int i = 0; i < 4; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.0f;
    TANDEM_UNROLL
    for (int j = 0; j < kColumns; ++j) o[i][j] = 0.0f;
  }
}

// One key tile of the online softmax of this thread's 4 rows: each row's max
// m and sum l over the row's 8 threads, o rescaled to the new max, and the
// scores s replaced by their weights exp(s - m) (0 where s is -inf).
template <int kColumns>
__device__ __forceinline__ void OnlineSoftmaxTile(float (&s)[4][4], float (&m)[4], float (&l)[4],
                                                  float (&o)[4][kColumns]) {
  TANDEM_UNROLL
  for (int i = 0; i < 4; ++i) {
    const float tile_max = fmaxf(fmaxf(s[i][0], s[i][1]), fmaxf(s[i][2], s[i][3]));
    const float next = fmaxf(m[i], RowMax(tile_max));
    const float rescale = m[i] == next ? 1.0f : expf(m[i] - next);
    float sum = 0.0f;
    TANDEM_UNROLL
    for (int j = 0; j < 4; ++j) {
      s[i][j] = s[i][j] == -INFINITY ? 0.0f : expf(s[i][j] - next);
      sum = sum + s[i][j];
    }
    l[i] = l[i] * rescale + RowSum(sum);
    m[i] = next;
    TANDEM_UNROLL
    for (int j = 0; j < kColumns; ++j) o[i][j] = o[i][j] * rescale;
  }
}

// w[i][j] (tile row `rows + i`, column `4 group + j`) into shared memory
// transposed: to[column * kWeightStride + row].
__device__ __forceinline__ void StoreTransposed(float* to, const float (&w)[4][4], int group, int rows) {
  TANDEM_UNROLL
  for (int j = 0; j < 4; ++j) {
    reinterpret_cast<float4*>(to + (4 * group + j) * kWeightStride + rows)[0] =
        make_float4(w[0][j], w[1][j], w[2][j], w[3][j]);
  }
}

template <int W>
__global__ void AttentionTileKernel(const float* q, const float* k, const float* v, const int32_t* positions,
                                    float* out, AttentionGeometry g, int64_t query_tiles, int64_t units) {
  constexpr int kColumns = W / 8;  // output columns a thread holds
  __shared__ float4 query_t[W * kTile / 4];              // Q^T: [d][row]
  __shared__ float4 key_t[W * kTile / 4];                // K^T: [d][key]
  __shared__ float4 values[kTile * W / 4];               // V: [key][d]
  __shared__ float4 weights_t[kTile * kWeightStride / 4];  // P^T: [key][row]
  float* const qt = reinterpret_cast<float*>(query_t);
  float* const kt = reinterpret_cast<float*>(key_t);
  float* const pt = reinterpret_cast<float*>(weights_t);
  const int rows = static_cast<int>(threadIdx.x) / 8 * 4;  // this thread's first row (and key) of a tile
  const int group = static_cast<int>(threadIdx.x) % 8;
  for (int64_t unit = blockIdx.x; unit < units; unit += gridDim.x) {
    const QueryRows rows_of_unit = QueryRowsOf(unit, query_tiles, kTile);
    const int64_t pair = rows_of_unit.pair, first = rows_of_unit.first;
    const int64_t b = pair / g.heads;
    const int64_t count = g.seq - first < kTile ? g.seq - first : kTile;
    // The keys row `row` of the tile reads (0 past the sequence); the most
    // any of them reads.
    const auto keys_of = [&](int64_t row) -> int64_t {
      if (row >= count) return 0;
      return (positions != nullptr ? positions[b * g.seq + first + row] : first + row) + 1;
    };
    int64_t key_count = 0;
    for (int row = 0; row < kTile; ++row) key_count = keys_of(row) > key_count ? keys_of(row) : key_count;
    int64_t n[4];
    TANDEM_UNROLL
    for (int i = 0; i < 4; ++i) n[i] = keys_of(rows + i);
    const float* keys = k + g.KeyBase(pair * g.seq);
    const float* value_rows = v + g.KeyBase(pair * g.seq);
    LoadTransposed<W>(qt, q + (pair * g.seq + first) * W, count);
    float o[4][kColumns], m[4], l[4];
    StartRows(o, m, l);
    for (int64_t tile = 0; tile < key_count; tile += kTile) {
      const int64_t in_tile = key_count - tile < kTile ? key_count - tile : kTile;
      __syncthreads();  // the last tile's readers are done (and the query tile is loaded)
      LoadTransposed<W>(kt, keys + tile * W, in_tile);
      LoadRowsOf<W>(values, value_rows + tile * W, in_tile);
      __syncthreads();
      float p[4][4];
      TileScores<W>(qt, kt, rows, group, tile, n, g.scale, p);
      OnlineSoftmaxTile<kColumns>(p, m, l, o);
      StoreTransposed(pt, p, group, rows);
      __syncthreads();
      AddProduct<4, kColumns, kTile>(o, pt + rows, kWeightStride, reinterpret_cast<const float*>(values) +
                                     group * kColumns, W);
    }
    TANDEM_UNROLL
    for (int i = 0; i < 4; ++i) {
      if (rows + i < count) {
        StorePart<kColumns>(out + (pair * g.seq + first + rows + i) * W + group * kColumns, o[i], l[i],
                            /*divide=*/true);
      }
    }
    __syncthreads();  // the query tile is overwritten by the next unit
  }
}

// The gradient in the same manner. dq: a block takes kTile query rows and
// sweeps their keys twice: the forward (m, l and o, so delta = dy . o), then
// S and dP = dY V^T again for dS = P (dP - delta) and dQ += dS K; it leaves
// each row's m, l and delta in `stats`. dk and dv: a block takes kTile key
// rows of one key/value pair and walks the query rows that read them, per
// query head of the pair in order: S^T = K Q^T and dP^T = V dY^T from
// k-major tiles, then dV += P^T dY and dK += dS^T Q from the same rows
// loaded as they are (into the same shared memory, so that everything fits
// in 48 KiB).
template <int W>
__global__ void AttentionQueryGradTileKernel(const float* q, const float* k, const float* v, const float* dy,
                                             float* dq, float* stats, AttentionGeometry g, int64_t query_tiles,
                                             int64_t units) {
  constexpr int kColumns = W / 8;
  __shared__ float4 query_t[W * kTile / 4];               // Q^T: [d][row]
  __shared__ float4 dy_t[W * kTile / 4];                  // dY^T: [d][row]
  __shared__ float4 key_t[W * kTile / 4];                 // K^T: [d][key]
  __shared__ float4 value_t[W * kTile / 4];               // V^T: [d][key]
  __shared__ float4 natural[kTile * W / 4];               // V, then K: [key][d]
  __shared__ float4 weights_t[kTile * kWeightStride / 4];  // P^T, then dS^T: [key][row]
  float* const qt = reinterpret_cast<float*>(query_t);
  float* const dyt = reinterpret_cast<float*>(dy_t);
  float* const kt = reinterpret_cast<float*>(key_t);
  float* const vt = reinterpret_cast<float*>(value_t);
  float* const pt = reinterpret_cast<float*>(weights_t);
  const float* const rows_of = reinterpret_cast<const float*>(natural);
  const int rows = static_cast<int>(threadIdx.x) / 8 * 4;
  const int group = static_cast<int>(threadIdx.x) % 8;
  for (int64_t unit = blockIdx.x; unit < units; unit += gridDim.x) {
    const QueryRows rows_of_unit = QueryRowsOf(unit, query_tiles, kTile);
    const int64_t pair = rows_of_unit.pair, first = rows_of_unit.first;
    const int64_t count = g.seq - first < kTile ? g.seq - first : kTile;
    const int64_t key_count = first + count;  // the last row reads keys 0..first + count - 1
    int64_t n[4];
    TANDEM_UNROLL
    for (int i = 0; i < 4; ++i) n[i] = rows + i < count ? first + rows + i + 1 : 0;
    const float* keys = k + g.KeyBase(pair * g.seq);
    const float* values = v + g.KeyBase(pair * g.seq);
    const int64_t base = pair * g.seq + first;  // the tile's first query row
    LoadTransposed<W>(qt, q + base * W, count);
    LoadTransposed<W>(dyt, dy + base * W, count);
    float acc[4][kColumns], m[4], l[4];
    StartRows(acc, m, l);
    for (int64_t tile = 0; tile < key_count; tile += kTile) {  // the forward: m, l and o
      const int64_t in_tile = key_count - tile < kTile ? key_count - tile : kTile;
      __syncthreads();
      LoadTransposed<W>(kt, keys + tile * W, in_tile);
      LoadRowsOf<W>(natural, values + tile * W, in_tile);
      __syncthreads();
      float p[4][4];
      TileScores<W>(qt, kt, rows, group, tile, n, g.scale, p);
      OnlineSoftmaxTile<kColumns>(p, m, l, acc);
      StoreTransposed(pt, p, group, rows);
      __syncthreads();
      AddProduct<4, kColumns, kTile>(acc, pt + rows, kWeightStride, rows_of + group * kColumns, W);
    }
    float delta[4];
    TANDEM_UNROLL
    for (int i = 0; i < 4; ++i) {
      float part = 0.0f;
      TANDEM_UNROLL
      for (int j = 0; j < kColumns; ++j) part = fmaf(dyt[(group * kColumns + j) * kTile + rows + i], acc[i][j] / l[i], part);
      delta[i] = RowSum(part);
      TANDEM_UNROLL
      for (int j = 0; j < kColumns; ++j) acc[i][j] = 0.0f;  // now dq
    }
    for (int64_t tile = 0; tile < key_count; tile += kTile) {
      const int64_t in_tile = key_count - tile < kTile ? key_count - tile : kTile;
      __syncthreads();
      LoadTransposed<W>(kt, keys + tile * W, in_tile);
      LoadTransposed<W>(vt, values + tile * W, in_tile);
      LoadRowsOf<W>(natural, keys + tile * W, in_tile);
      __syncthreads();
      float p[4][4], dp[4][4] = {};
      TileScores<W>(qt, kt, rows, group, tile, n, g.scale, p);
      AddProduct<4, 4, W>(dp, dyt + rows, kTile, vt + 4 * group, kTile);
      TANDEM_UNROLL
      for (int i = 0; i < 4; ++i) {
        TANDEM_UNROLL
        for (int j = 0; j < 4; ++j) {
          const float weight = p[i][j] == -INFINITY ? 0.0f : expf(p[i][j] - m[i]) / l[i];
          p[i][j] = weight * (dp[i][j] - delta[i]);  // dS
        }
      }
      StoreTransposed(pt, p, group, rows);
      __syncthreads();
      AddProduct<4, kColumns, kTile>(acc, pt + rows, kWeightStride, rows_of + group * kColumns, W);
    }
    TANDEM_UNROLL
    for (int i = 0; i < 4; ++i) {
      if (rows + i < count) {
        const int64_t r = base + rows + i;
        StorePart<kColumns>(dq + r * W + group * kColumns, acc[i], g.scale, /*divide=*/false);
        if (group == 0) {
          stats[3 * r] = m[i];
          stats[3 * r + 1] = l[i];
          stats[3 * r + 2] = delta[i];
        }
      }
    }
    __syncthreads();  // the query tiles are overwritten by the next unit
  }
}

template <int W>
__global__ void AttentionKeyGradTileKernel(const float* q, const float* k, const float* v, const float* dy,
                                           const float* stats, float* dk, float* dv, AttentionGeometry g,
                                           int64_t key_tiles, int64_t units) {
  constexpr int kColumns = W / 8;
  __shared__ float4 key_t[W * kTile / 4];                  // K^T: [d][key]
  __shared__ float4 value_t[W * kTile / 4];                // V^T: [d][key]
  __shared__ float4 query_buffer[W * kTile / 4];           // Q^T [d][row], then Q [row][d]
  __shared__ float4 dy_buffer[W * kTile / 4];              // dY^T [d][row], then dY [row][d]
  __shared__ float4 weights[kTile * kWeightStride / 4];    // P: [row][key]
  __shared__ float4 gradients[kTile * kWeightStride / 4];  // dS: [row][key]
  __shared__ float stats_tile[3 * kTile];
  float* const kt = reinterpret_cast<float*>(key_t);
  float* const vt = reinterpret_cast<float*>(value_t);
  float* const qb = reinterpret_cast<float*>(query_buffer);
  float* const dyb = reinterpret_cast<float*>(dy_buffer);
  float* const pw = reinterpret_cast<float*>(weights);
  float* const dsw = reinterpret_cast<float*>(gradients);
  const int keys_of = static_cast<int>(threadIdx.x) / 8 * 4;  // this thread's first key of the tile
  const int group = static_cast<int>(threadIdx.x) % 8;        // its rows 4 group.. and columns
  for (int64_t unit = blockIdx.x; unit < units; unit += gridDim.x) {
    const int64_t kv_pair = unit / key_tiles;
    const int64_t first = (unit % key_tiles) * kTile;  // the first key tiles have the most rows to read
    const int64_t count = g.seq - first < kTile ? g.seq - first : kTile;
    const int64_t batch = kv_pair / g.kv_heads, kv_head = kv_pair % g.kv_heads;
    const int64_t base = kv_pair * g.seq + first;  // the tile's first key row
    __syncthreads();  // the last unit's readers of the key tiles are done
    LoadTransposed<W>(kt, k + base * W, count);
    LoadTransposed<W>(vt, v + base * W, count);
    float dk_acc[4][kColumns] = {}, dv_acc[4][kColumns] = {};
    for (int64_t h = kv_head * g.group; h < (kv_head + 1) * g.group; ++h) {
      const int64_t head_rows = (batch * g.heads + h) * g.seq;
      for (int64_t tile = first; tile < g.seq; tile += kTile) {  // rows before `first` read none of these keys
        const int64_t in_tile = g.seq - tile < kTile ? g.seq - tile : kTile;
        __syncthreads();
        LoadTransposed<W>(qb, q + (head_rows + tile) * W, in_tile);
        LoadTransposed<W>(dyb, dy + (head_rows + tile) * W, in_tile);
        for (int e = threadIdx.x; e < 3 * kTile; e += blockDim.x) {
          stats_tile[e] = e < 3 * in_tile ? stats[3 * (head_rows + tile) + e] : 0.0f;
        }
        __syncthreads();
        float s[4][4] = {}, dp[4][4] = {};  // [key][row]
        AddProduct<4, 4, W>(s, kt + keys_of, kTile, qb + 4 * group, kTile);
        AddProduct<4, 4, W>(dp, vt + keys_of, kTile, dyb + 4 * group, kTile);
        float p[4][4], ds[4][4];
        TANDEM_UNROLL
        for (int i = 0; i < 4; ++i) {
          const int64_t key = first + keys_of + i;
          TANDEM_UNROLL
          for (int j = 0; j < 4; ++j) {
            const int t = 4 * group + j;
            const int64_t row = tile + t;
            const bool reads = t < in_tile && row >= key && key < g.seq;  // query row i reads key j only when i >= j
            p[i][j] = reads ? expf(s[i][j] * g.scale - stats_tile[3 * t]) / stats_tile[3 * t + 1] : 0.0f;
            ds[i][j] = p[i][j] * (dp[i][j] - stats_tile[3 * t + 2]);
          }
        }
        StoreTransposed(pw, p, group, keys_of);  // P[row][key]
        StoreTransposed(dsw, ds, group, keys_of);
        __syncthreads();  // the k-major query rows are read, P and dS written
        LoadRowsOf<W>(query_buffer, q + (head_rows + tile) * W, in_tile);
        LoadRowsOf<W>(dy_buffer, dy + (head_rows + tile) * W, in_tile);
        __syncthreads();
        AddProduct<4, kColumns, kTile>(dv_acc, pw + keys_of, kWeightStride, dyb + group * kColumns, W);
        AddProduct<4, kColumns, kTile>(dk_acc, dsw + keys_of, kWeightStride, qb + group * kColumns, W);
      }
    }
    TANDEM_UNROLL
    for (int i = 0; i < 4; ++i) {
      if (keys_of + i < count) {
        const int64_t c = base + keys_of + i;
        StorePart<kColumns>(dk + c * W + group * kColumns, dk_acc[i], g.scale, /*divide=*/false);
        StorePart<kColumns>(dv + c * W + group * kColumns, dv_acc[i], 1.0f, /*divide=*/false);
      }
    }
  }
}

// The fast kernels at width W: the tiled products up to 64; at 128 (whose
// tiles would not fit in 48 KiB of shared memory) a thread group per row,
// rows split between kForwardSplit lanes in the forward and kGradSplit in
// the gradient (a thread holds at most 64 of a row's elements, and 32
// where it holds three rows' worth).
template <int W>
struct FastAttention {
  static cudaError_t Forward(const float* q, const float* k, const float* v, const int32_t* positions, float* out,
                             const AttentionGeometry& g, int64_t pairs, cudaStream_t stream) {
    if constexpr (W <= 64) {
      const int64_t tiles = (g.seq + kTile - 1) / kTile;
      return LaunchUnits(pairs * tiles, kTileThreads, stream, AttentionTileKernel<W>, q, k, v, positions, out, g,
                         tiles, pairs * tiles);
    } else {
      constexpr int kForwardSplit = W / 64;
      const int64_t query_tiles = (g.seq + kRowsPerBlock - 1) / kRowsPerBlock;
      return LaunchUnits(pairs * query_tiles, kRowsPerBlock * kForwardSplit, stream,
                         AttentionFastKernel<W, kForwardSplit>, q, k, v, positions, out, g, query_tiles,
                         pairs * query_tiles);
    }
  }

  static cudaError_t Grad(const float* q, const float* k, const float* v, const float* dy, float* dq, float* dk,
                          float* dv, float* stats, const AttentionGeometry& g, int64_t batch, cudaStream_t stream) {
    if constexpr (W <= 64) {
      const int64_t tiles = (g.seq + kTile - 1) / kTile;
      const int64_t query_units = batch * g.heads * tiles, key_units = batch * g.kv_heads * tiles;
      if (cudaError_t error = LaunchUnits(query_units, kTileThreads, stream, AttentionQueryGradTileKernel<W>, q, k, v,
                                          dy, dq, stats, g, tiles, query_units);
          error != cudaSuccess) {
        return error;
      }
      return LaunchUnits(key_units, kTileThreads, stream, AttentionKeyGradTileKernel<W>, q, k, v, dy, stats, dk, dv, g,
                         tiles, key_units);
    } else {
      constexpr int kGradSplit = W / 32;
      const int64_t query_tiles = (g.seq + kRowsPerBlock - 1) / kRowsPerBlock;
      const int64_t query_units = batch * g.heads * query_tiles;
      if (cudaError_t error = LaunchUnits(query_units, kRowsPerBlock * kGradSplit, stream,
                                          AttentionQueryGradFastKernel<W, kGradSplit>, q, k, v, dy, dq, stats, g,
                                          query_tiles, query_units);
          error != cudaSuccess) {
        return error;
      }
      const int64_t key_units = batch * g.kv_heads * query_tiles;
      return LaunchUnits(key_units, kRowsPerBlock * kGradSplit, stream, AttentionKeyGradFastKernel<W, kGradSplit>, q,
                         k, v, dy, stats, dk, dv, g, query_tiles, key_units);
    }
  }
};

}  // namespace

// One thread per (row, pair): rows are positions of `positions`-row
// matrices, or have their own in `given` (one per row, at least 0).
__global__ void RotaryKernel(ElementsIn x, const int32_t* given, ElementsOut out, int64_t positions, int64_t half,
                             double theta, float direction, int64_t pairs) {
  for (int64_t p = FirstIndex(); p < pairs; p += GridStride()) {
    const int64_t row = p / half;
    const int64_t i = p - row * half;
    const int64_t t = given != nullptr ? given[row] : row % positions;
    const float frequency = static_cast<float>(pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(2 * half)));
    const double angle = static_cast<double>(static_cast<float>(t) * frequency);
    const float c = static_cast<float>(cos(angle));
    const float s = direction * static_cast<float>(sin(angle));
    const int64_t base = row * 2 * half;
    const float a = Load(x, base + i);
    const float b = Load(x, base + i + half);
    Store(out, base + i, a * c - b * s);
    Store(out, base + i + half, b * c + a * s);
  }
}

cudaError_t LaunchRotary(ElementsIn x, const int32_t* given, ElementsOut out, int64_t matrices, int64_t positions,
                         int64_t width, double theta, bool inverse, cudaStream_t stream) {
  const int64_t half = width / 2;
  const int64_t pairs = matrices * positions * half;
  if (pairs <= 0) return cudaSuccess;
  return Launch(pairs, stream, RotaryKernel, x, given, out, positions, half, theta, inverse ? -1.0f : 1.0f, pairs);
}

cudaError_t LaunchAttention(const float* q, const float* k, const float* v, const int32_t* positions, float* out,
                            int64_t batch, int64_t heads, int64_t kv_heads, int64_t seq, int64_t keys, int64_t width,
                            float scale, cudaStream_t stream) {
  const AttentionGeometry geometry{heads, kv_heads, heads / kv_heads, seq, width, scale, keys};
  const int64_t rows = batch * heads * seq;
  if (rows <= 0) return cudaSuccess;
  if (FastAttentionWidth(width) && Aligned16(q) && Aligned16(k) && Aligned16(v) && Aligned16(out)) {
    const int64_t pairs = batch * heads;
    if (width == 32) return FastAttention<32>::Forward(q, k, v, positions, out, geometry, pairs, stream);
    if (width == 64) return FastAttention<64>::Forward(q, k, v, positions, out, geometry, pairs, stream);
    return FastAttention<128>::Forward(q, k, v, positions, out, geometry, pairs, stream);
  }
  if (width > kMaxTiledWidth) return Launch(rows, stream, AttentionKernel, q, k, v, positions, out, geometry, rows);
  const int64_t query_tiles = (seq + kQueryTile - 1) / kQueryTile;
  const int64_t units = batch * heads * query_tiles;
  return LaunchUnits(units, kQueryTile, stream, AttentionTiledKernel, q, k, v, positions, out, geometry, query_tiles,
                     units);
}

size_t AttentionGradScratchBytes(int64_t query_rows) {
  return static_cast<size_t>(query_rows) * 3 * sizeof(float);
}

cudaError_t LaunchAttentionGrad(const float* q, const float* k, const float* v, const float* dy, float* dq, float* dk,
                                float* dv, int64_t batch, int64_t heads, int64_t kv_heads, int64_t seq, int64_t width,
                                float scale, void* scratch, cudaStream_t stream) {
  // The gradient has no positions: as many keys as queries.
  const AttentionGeometry geometry{heads, kv_heads, heads / kv_heads, seq, width, scale, seq};
  float* stats = static_cast<float*>(scratch);
  const int64_t rows = batch * heads * seq;
  if (rows <= 0) return cudaSuccess;
  if (FastAttentionWidth(width) && Aligned16(q) && Aligned16(k) && Aligned16(v) && Aligned16(dy) && Aligned16(dq) &&
      Aligned16(dk) && Aligned16(dv)) {
    if (width == 32) return FastAttention<32>::Grad(q, k, v, dy, dq, dk, dv, stats, geometry, batch, stream);
    if (width == 64) return FastAttention<64>::Grad(q, k, v, dy, dq, dk, dv, stats, geometry, batch, stream);
    return FastAttention<128>::Grad(q, k, v, dy, dq, dk, dv, stats, geometry, batch, stream);
  }
  if (width <= kMaxTiledWidth) {
    const int64_t query_tiles = (seq + kQueryTile - 1) / kQueryTile;
    const int64_t query_units = batch * heads * query_tiles;
    if (cudaError_t error = LaunchUnits(query_units, kQueryTile, stream, AttentionQueryGradTiledKernel, q, k, v, dy, dq,
                                        stats, geometry, query_tiles, query_units);
        error != cudaSuccess) {
      return error;
    }
    const int64_t key_tiles = (seq + kKeyRows - 1) / kKeyRows;
    const int64_t key_units = batch * kv_heads * key_tiles;
    return LaunchUnits(key_units, kKeyRows, stream, AttentionKeyGradTiledKernel, q, k, v, dy, stats, dk, dv, geometry,
                       key_tiles, key_units);
  }
  if (cudaError_t error = Launch(rows, stream, AttentionQueryGradKernel, q, k, v, dy, dq, stats, geometry, rows);
      error != cudaSuccess) {
    return error;
  }
  const int64_t key_rows = batch * kv_heads * seq;
  return Launch(key_rows, stream, AttentionKeyGradKernel, q, k, v, dy, stats, dk, dv, geometry, key_rows);
}

}  // namespace tandem::cuda::kernels
