// Causal attention a thread a row, at any head width (ir/op.h kAttention;
// dispatched by kernels/attention.cu), fp32 SIMT, each row's scores
// recomputed in each pass instead of stored, so no T x T buffer exists:
//  - any width: a thread per query row (or, for dk and dv, per key row),
//    every sum in index order within its thread;
//  - widths up to 128: the same rows walking shared-memory tiles of keys
//    (and of query rows for dk and dv).

#include "backends/cuda/kernels/attention.cuh"

namespace tandem::cuda::kernels {
namespace {

template <typename A, typename B>
__device__ float Dot(const A* a, const B* b, int64_t width) {
  float sum = 0.0f;
  for (int64_t d = 0; d < width; ++d) sum = sum + Widen(a[d]) * Widen(b[d]);
  return sum;
}

// The max and the sum of exp(s - max) of query row `row`'s scores.
template <typename T>
__device__ void RowStatistics(const T* q_row, const T* keys, int64_t n, const AttentionGeometry& g, float* max,
                              float* sum) {
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

// Widths above it are taken kColumnChunk output columns at a time, each
// chunk's sums in registers (the scores recomputed for each chunk), so that
// no result is summed in its own storage, which may be bf16.
constexpr int64_t kColumnChunk = 128;

// positions: null (row i reads keys 0..i), or [batch, seq], checked to lie
// in [0, keys) before the launch.
template <typename T>
__global__ void AttentionKernel(const T* q, const T* k, const T* v, const int32_t* positions, T* out,
                                AttentionGeometry g, int64_t rows) {
  for (int64_t r = FirstIndex(); r < rows; r += GridStride()) {
    const int64_t i = r % g.seq;
    const int64_t b = r / (g.seq * g.heads);
    const int64_t n = (positions != nullptr ? positions[b * g.seq + i] : i) + 1;
    const T* q_row = q + r * g.width;
    const T* keys = k + g.KeyBase(r);
    const T* values = v + g.KeyBase(r);
    float max, sum;
    RowStatistics(q_row, keys, n, g, &max, &sum);
    for (int64_t c = 0; c < g.width; c += kColumnChunk) {
      const int64_t columns = g.width - c < kColumnChunk ? g.width - c : kColumnChunk;
      float o[kColumnChunk];
      for (int64_t d = 0; d < columns; ++d) o[d] = 0.0f;
      for (int64_t j = 0; j < n; ++j) {
        const float e = expf(Dot(q_row, keys + j * g.width, g.width) * g.scale - max);
        for (int64_t d = 0; d < columns; ++d) o[d] = o[d] + e * Widen(values[j * g.width + c + d]);
      }
      for (int64_t d = 0; d < columns; ++d) StoreElement(out + r * g.width + c + d, o[d] / sum);
    }
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

// Query row `q_row`'s scaled scores with the first `mine` keys of the
// shared tile into scores[0, mine), in key order; returns their max.
template <typename T>
__device__ float ScoreKeyTile(const T* q_row, const float* key_tile, int64_t mine, const AttentionGeometry& g,
                              float (&scores)[kKeyTile]) {
  float tile_max = -INFINITY;
  for (int64_t j = 0; j < mine; ++j) {
    scores[j] = Dot(q_row, key_tile + j * g.width, g.width) * g.scale;
    tile_max = scores[j] > tile_max ? scores[j] : tile_max;
  }
  return tile_max;
}

// The block's threads copy `rows` rows of `width` from `from` (and from
// `also_from`, when given) into shared memory, widened; the caller syncs.
template <typename T>
__device__ void LoadRows(float* to, const T* from, float* also_to, const T* also_from, int64_t rows, int64_t width) {
  for (int64_t e = threadIdx.x; e < rows * width; e += blockDim.x) {
    to[e] = Widen(from[e]);
    if (also_from != nullptr) also_to[e] = Widen(also_from[e]);
  }
}

template <typename T>
__global__ void AttentionTiledKernel(const T* q, const T* k, const T* v, const int32_t* positions, T* out,
                                     AttentionGeometry g, int64_t query_tiles, int64_t units) {
  __shared__ float key_tile[kKeyTile * kMaxTiledWidth];
  __shared__ float value_tile[kKeyTile * kMaxTiledWidth];
  __shared__ int64_t block_keys;
  for (int64_t unit = blockIdx.x; unit < units; unit += gridDim.x) {
    const UnitRows rows_of_unit = QueryRowsOf(unit, units, query_tiles, kQueryTile);
    const int64_t pair = rows_of_unit.pair, first = rows_of_unit.first;
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
    const T* keys = k + g.KeyBase(pair * g.seq);
    const T* values = v + g.KeyBase(pair * g.seq);
    const T* q_row = q + r * g.width;
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
        const float tile_max = ScoreKeyTile(q_row, key_tile, mine, g, scores);
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
      for (int64_t d = 0; d < g.width; ++d) StoreElement(out + r * g.width + d, acc[d] / l);
    }
    __syncthreads();  // block_keys is rewritten for the next unit
  }
}

// dq of each query row, and its max, sum and delta = sum_j p_j dp_j into
// stats[3 row ..].
template <typename T>
__global__ void AttentionQueryGradKernel(const T* q, const T* k, const T* v, const T* dy, T* dq, float* stats,
                                         AttentionGeometry g, int64_t rows) {
  for (int64_t r = FirstIndex(); r < rows; r += GridStride()) {
    const int64_t n = r % g.seq + 1;
    const T* q_row = q + r * g.width;
    const T* dy_row = dy + r * g.width;
    const T* keys = k + g.KeyBase(r);
    const T* values = v + g.KeyBase(r);
    float max, sum;
    RowStatistics(q_row, keys, n, g, &max, &sum);
    float delta = 0.0f;
    for (int64_t j = 0; j < n; ++j) {
      const float p = expf(Dot(q_row, keys + j * g.width, g.width) * g.scale - max) / sum;
      delta += p * Dot(dy_row, values + j * g.width, g.width);
    }
    for (int64_t c = 0; c < g.width; c += kColumnChunk) {
      const int64_t columns = g.width - c < kColumnChunk ? g.width - c : kColumnChunk;
      float dq_part[kColumnChunk];
      for (int64_t d = 0; d < columns; ++d) dq_part[d] = 0.0f;
      for (int64_t j = 0; j < n; ++j) {
        const float p = expf(Dot(q_row, keys + j * g.width, g.width) * g.scale - max) / sum;
        const float ds = p * (Dot(dy_row, values + j * g.width, g.width) - delta);
        for (int64_t d = 0; d < columns; ++d) dq_part[d] = dq_part[d] + ds * Widen(keys[j * g.width + c + d]);
      }
      for (int64_t d = 0; d < columns; ++d) StoreElement(dq + r * g.width + c + d, dq_part[d] * g.scale);
    }
    stats[3 * r] = max;
    stats[3 * r + 1] = sum;
    stats[3 * r + 2] = delta;
  }
}

// dk and dv of each key row j of each key/value head: over its query heads
// in order and, within each, the query rows i >= j in order.
template <typename T>
__global__ void AttentionKeyGradKernel(const T* q, const T* k, const T* v, const T* dy, const float* stats, T* dk,
                                       T* dv, AttentionGeometry g, int64_t key_rows) {
  for (int64_t c = FirstIndex(); c < key_rows; c += GridStride()) {
    const int64_t j = c % g.seq;
    const int64_t kv_pair = c / g.seq;
    const int64_t batch = kv_pair / g.kv_heads, kv_head = kv_pair % g.kv_heads;
    const T* key = k + c * g.width;
    const T* value = v + c * g.width;
    for (int64_t first = 0; first < g.width; first += kColumnChunk) {
      const int64_t columns = g.width - first < kColumnChunk ? g.width - first : kColumnChunk;
      float dk_part[kColumnChunk], dv_part[kColumnChunk];
      for (int64_t d = 0; d < columns; ++d) {
        dk_part[d] = 0.0f;
        dv_part[d] = 0.0f;
      }
      for (int64_t h = kv_head * g.group; h < (kv_head + 1) * g.group; ++h) {
        for (int64_t i = j; i < g.seq; ++i) {
          const int64_t r = (batch * g.heads + h) * g.seq + i;
          const T* q_row = q + r * g.width;
          const T* dy_row = dy + r * g.width;
          const float p = expf(Dot(q_row, key, g.width) * g.scale - stats[3 * r]) / stats[3 * r + 1];
          const float ds = p * (Dot(dy_row, value, g.width) - stats[3 * r + 2]);
          for (int64_t d = 0; d < columns; ++d) {
            dv_part[d] = dv_part[d] + p * Widen(dy_row[first + d]);
            dk_part[d] = dk_part[d] + ds * Widen(q_row[first + d]);
          }
        }
      }
      for (int64_t d = 0; d < columns; ++d) {
        StoreElement(dk + c * g.width + first + d, dk_part[d] * g.scale);
        StoreElement(dv + c * g.width + first + d, dv_part[d]);
      }
    }
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

template <typename T>
__global__ void AttentionQueryGradTiledKernel(const T* q, const T* k, const T* v, const T* dy, T* dq, float* stats,
                                              AttentionGeometry g, int64_t query_tiles, int64_t units) {
  __shared__ float key_tile[kKeyTile * kMaxTiledWidth];
  __shared__ float value_tile[kKeyTile * kMaxTiledWidth];
  for (int64_t unit = blockIdx.x; unit < units; unit += gridDim.x) {
    const UnitRows rows_of_unit = QueryRowsOf(unit, units, query_tiles, kQueryTile);
    const int64_t pair = rows_of_unit.pair, first = rows_of_unit.first;
    const int64_t i = first + threadIdx.x;
    const bool active = i < g.seq;
    const int64_t n = active ? i + 1 : 0;
    const int64_t key_count = first + kQueryTile < g.seq ? first + kQueryTile : g.seq;
    const int64_t r = pair * g.seq + (active ? i : first);
    const T* keys = k + g.KeyBase(pair * g.seq);
    const T* values = v + g.KeyBase(pair * g.seq);
    const T* q_row = q + r * g.width;
    const T* dy_row = dy + r * g.width;
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
        const float tile_max = ScoreKeyTile(q_row, key_tile, mine, g, scores);
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
      for (int64_t d = 0; d < g.width; ++d) StoreElement(dq + r * g.width + d, acc[d] * g.scale);
      stats[3 * r] = m;
      stats[3 * r + 1] = l;
      stats[3 * r + 2] = delta;
    }
  }
}

template <typename T>
__global__ void AttentionKeyGradTiledKernel(const T* q, const T* k, const T* v, const T* dy, const float* stats, T* dk,
                                            T* dv, AttentionGeometry g, int64_t key_tiles, int64_t units) {
  __shared__ float query_tile[kQueryRowsTile * kMaxTiledWidth];
  __shared__ float dy_tile[kQueryRowsTile * kMaxTiledWidth];
  __shared__ float stats_tile[3 * kQueryRowsTile];
  for (int64_t unit = blockIdx.x; unit < units; unit += gridDim.x) {
    const UnitRows keys_of_unit = KeyRowsOf(unit, units, key_tiles, kKeyRows);
    const int64_t kv_pair = keys_of_unit.pair, first = keys_of_unit.first;
    const int64_t j = first + threadIdx.x;
    const bool active = j < g.seq;
    const int64_t c = kv_pair * g.seq + (active ? j : first);
    const int64_t batch = kv_pair / g.kv_heads, kv_head = kv_pair % g.kv_heads;
    const T* key = k + c * g.width;
    const T* value = v + c * g.width;
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
        LoadRows<float>(stats_tile, stats + 3 * (head_rows + tile), nullptr, nullptr, count, 3);
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
      for (int64_t d = 0; d < g.width; ++d) {
        StoreElement(dk + c * g.width + d, dk_acc[d] * g.scale);
        StoreElement(dv + c * g.width + d, dv_acc[d]);
      }
    }
  }
}

}  // namespace

template <typename T>
cudaError_t LaunchAttentionRows(const T* q, const T* k, const T* v, const int32_t* positions, T* out,
                                const AttentionGeometry& g, int64_t batch, cudaStream_t stream) {
  const int64_t rows = batch * g.heads * g.seq;
  if (rows <= 0) return cudaSuccess;
  if (g.width > kMaxTiledWidth) return Launch(rows, stream, AttentionKernel<T>, q, k, v, positions, out, g, rows);
  const int64_t query_tiles = (g.seq + kQueryTile - 1) / kQueryTile;
  const int64_t units = batch * g.heads * query_tiles;
  return LaunchUnits(units, kQueryTile, stream, AttentionTiledKernel<T>, q, k, v, positions, out, g, query_tiles,
                     units);
}

template <typename T>
cudaError_t LaunchAttentionRowsGrad(const T* q, const T* k, const T* v, const T* dy, T* dq, T* dk, T* dv,
                                    float* stats, const AttentionGeometry& g, int64_t batch, cudaStream_t stream) {
  const int64_t rows = batch * g.heads * g.seq;
  if (rows <= 0) return cudaSuccess;
  if (g.width <= kMaxTiledWidth) {
    const int64_t query_tiles = (g.seq + kQueryTile - 1) / kQueryTile;
    const int64_t query_units = batch * g.heads * query_tiles;
    if (cudaError_t error = LaunchUnits(query_units, kQueryTile, stream, AttentionQueryGradTiledKernel<T>, q, k, v, dy,
                                        dq, stats, g, query_tiles, query_units);
        error != cudaSuccess) {
      return error;
    }
    const int64_t key_tiles = (g.seq + kKeyRows - 1) / kKeyRows;
    const int64_t key_units = batch * g.kv_heads * key_tiles;
    return LaunchUnits(key_units, kKeyRows, stream, AttentionKeyGradTiledKernel<T>, q, k, v, dy, stats, dk, dv, g,
                       key_tiles, key_units);
  }
  if (cudaError_t error = Launch(rows, stream, AttentionQueryGradKernel<T>, q, k, v, dy, dq, stats, g, rows);
      error != cudaSuccess) {
    return error;
  }
  const int64_t key_rows = batch * g.kv_heads * g.seq;
  return Launch(key_rows, stream, AttentionKeyGradKernel<T>, q, k, v, dy, stats, dk, dv, g, key_rows);
}

TANDEM_ATTENTION_FAMILY_OF(Rows, float)
TANDEM_ATTENTION_FAMILY_OF(Rows, __nv_bfloat16)

}  // namespace tandem::cuda::kernels
