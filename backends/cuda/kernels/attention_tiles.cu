// Causal attention at head widths 32 and 64 as small matrix products
// (ir/op.h kAttention; dispatched by kernels/attention.cu).

#include "backends/cuda/kernels/attention.cuh"

namespace tandem::cuda::kernels {
namespace {

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
// shared memory (rows of a_stride and b_stride floats, 16-byte aligned). The
// depth loop unrolls 4 at a time: fully unrolled, the kernels were 3.5k to
// 8k instructions and stalled on instruction fetch (ncu, stop 56); so, 1.8k
// to 3.2k (sm_90).
template <int R, int C, int kDepth>
__device__ __forceinline__ void AddProduct(float (&acc)[R][C], const float* a, int a_stride, const float* b,
                                           int b_stride) {
  TANDEM_UNROLL_BY(4)
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

// A tile of kTile rows of a [rows, W] matrix on its way from device memory
// to shared memory, in the registers of the block's kTileThreads threads
// (a float4 an access; zeros past `count`). Load issues every access before
// any is used: a tile costs one memory latency, not one an access. A kernel
// loads the next tile before it computes on this one and stores it once
// this one's readers are done: the loads are in flight meanwhile. The
// threads take consecutive rows (kRowsFirst) or consecutive columns of a
// row: each store's layout is conflict-free in shared memory for one of
// them (StoreTransposed for rows first, StoreRows for columns first).
template <int W, bool kRowsFirst>
struct StagedTile {
  static constexpr int kPieces = kTile * W / 4;
  static_assert(kPieces % kTileThreads == 0, "every thread moves as many pieces");
  static constexpr int kEach = kPieces / kTileThreads;
  float4 x[kEach];

  __device__ __forceinline__ static int RowOf(int piece) { return kRowsFirst ? piece % kTile : piece / (W / 4); }
  __device__ __forceinline__ static int ChunkOf(int piece) { return kRowsFirst ? piece / kTile : piece % (W / 4); }
  __device__ __forceinline__ static int PieceOf(int i) { return static_cast<int>(threadIdx.x) + i * kTileThreads; }

  template <typename T>
  __device__ __forceinline__ void Load(const T* from, int64_t count) {
    TANDEM_UNROLL
    for (int i = 0; i < kEach; ++i) {
      const int row = RowOf(PieceOf(i)), chunk = ChunkOf(PieceOf(i));
      x[i] = row < count ? Load4(from + row * W + 4 * chunk) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
  }
  // k-major: to[d * kTile + row].
  __device__ __forceinline__ void StoreTransposed(float* to) const {
    TANDEM_UNROLL
    for (int i = 0; i < kEach; ++i) {
      const int row = RowOf(PieceOf(i)), d = 4 * ChunkOf(PieceOf(i));
      to[d * kTile + row] = x[i].x;
      to[(d + 1) * kTile + row] = x[i].y;
      to[(d + 2) * kTile + row] = x[i].z;
      to[(d + 3) * kTile + row] = x[i].w;
    }
  }
  // As the rows are: to[row * W / 4 + chunk].
  __device__ __forceinline__ void StoreRows(float4* to) const {
    TANDEM_UNROLL
    for (int i = 0; i < kEach; ++i) to[RowOf(PieceOf(i)) * (W / 4) + ChunkOf(PieceOf(i))] = x[i];
  }
};

// A tile into shared memory at once, k-major; the caller syncs.
template <int W, typename T>
__device__ __forceinline__ void LoadTransposed(float* to, const T* from, int64_t count) {
  StagedTile<W, true> tile;
  tile.Load(from, count);
  tile.StoreTransposed(to);
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

// This thread's rows of the forward over `key_count` keys (of `keys` and
// `values`, [keys, W] each) in tiles: o, the max m and the sum l, from m =
// -inf. The query tile is in qt (k-major); kt, value_tile and pt are the
// block's shared tiles for K^T, V and P^T.
template <int W, typename T>
__device__ __forceinline__ void SweepKeyTiles(const float* qt, float* kt, float4* value_tile, float* pt,
                                              const T* keys, const T* values, int rows, int group,
                                              int64_t key_count, const int64_t (&n)[4], float scale,
                                              float (&o)[4][W / 8], float (&m)[4], float (&l)[4]) {
  constexpr int kColumns = W / 8;
  StartRows(o, m, l);
  StagedTile<W, true> next_keys;
  StagedTile<W, false> next_values;
  next_keys.Load(keys, key_count);
  next_values.Load(values, key_count);
  for (int64_t tile = 0; tile < key_count; tile += kTile) {
    __syncthreads();  // the last tile's readers are done (and the query tile is loaded)
    next_keys.StoreTransposed(kt);
    next_values.StoreRows(value_tile);
    __syncthreads();
    if (const int64_t after = tile + kTile; after < key_count) {
      next_keys.Load(keys + after * W, key_count - after);
      next_values.Load(values + after * W, key_count - after);
    }
    float p[4][4];
    TileScores<W>(qt, kt, rows, group, tile, n, scale, p);
    OnlineSoftmaxTile<kColumns>(p, m, l, o);
    StoreTransposed(pt, p, group, rows);
    __syncthreads();
    AddProduct<4, kColumns, kTile>(o, pt + rows, kWeightStride,
                                   reinterpret_cast<const float*>(value_tile) + group * kColumns, W);
  }
}

template <int W, typename T>
__global__ void AttentionTileKernel(const T* q, const T* k, const T* v, const int32_t* positions, T* out,
                                    AttentionGeometry g, int64_t query_tiles, int64_t units) {
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
    const UnitRows rows_of_unit = QueryRowsOf(unit, units, query_tiles, kTile);
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
    const T* keys = k + g.KeyBase(pair * g.seq);
    const T* value_rows = v + g.KeyBase(pair * g.seq);
    LoadTransposed<W>(qt, q + (pair * g.seq + first) * W, count);
    float o[4][kColumns], m[4], l[4];
    SweepKeyTiles<W>(qt, kt, values, pt, keys, value_rows, rows, group, key_count, n, g.scale, o, m, l);
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
template <int W, typename T>
__global__ void AttentionQueryGradTileKernel(const T* q, const T* k, const T* v, const T* dy, T* dq, float* stats,
                                             AttentionGeometry g, int64_t query_tiles, int64_t units) {
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
    const UnitRows rows_of_unit = QueryRowsOf(unit, units, query_tiles, kTile);
    const int64_t pair = rows_of_unit.pair, first = rows_of_unit.first;
    const int64_t count = g.seq - first < kTile ? g.seq - first : kTile;
    const int64_t key_count = first + count;  // the last row reads keys 0..first + count - 1
    int64_t n[4];
    TANDEM_UNROLL
    for (int i = 0; i < 4; ++i) n[i] = rows + i < count ? first + rows + i + 1 : 0;
    const T* keys = k + g.KeyBase(pair * g.seq);
    const T* values = v + g.KeyBase(pair * g.seq);
    const int64_t base = pair * g.seq + first;  // the tile's first query row
    LoadTransposed<W>(qt, q + base * W, count);
    LoadTransposed<W>(dyt, dy + base * W, count);
    float acc[4][kColumns], m[4], l[4];
    SweepKeyTiles<W>(qt, kt, natural, pt, keys, values, rows, group, key_count, n, g.scale, acc, m, l);  // o
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
    StagedTile<W, true> next_keys, next_values;
    next_keys.Load(keys, key_count);
    next_values.Load(values, key_count);
    for (int64_t tile = 0; tile < key_count; tile += kTile) {
      __syncthreads();
      next_keys.StoreTransposed(kt);
      next_keys.StoreRows(natural);
      next_values.StoreTransposed(vt);
      __syncthreads();
      if (const int64_t after = tile + kTile; after < key_count) {
        next_keys.Load(keys + after * W, key_count - after);
        next_values.Load(values + after * W, key_count - after);
      }
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

template <int W, typename T>
__global__ void AttentionKeyGradTileKernel(const T* q, const T* k, const T* v, const T* dy, const float* stats, T* dk,
                                           T* dv, AttentionGeometry g, int64_t key_tiles, int64_t units) {
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
    const UnitRows keys_of_unit = KeyRowsOf(unit, units, key_tiles, kTile);
    const int64_t kv_pair = keys_of_unit.pair, first = keys_of_unit.first;
    const int64_t count = g.seq - first < kTile ? g.seq - first : kTile;
    const int64_t batch = kv_pair / g.kv_heads, kv_head = kv_pair % g.kv_heads;
    const int64_t base = kv_pair * g.seq + first;  // the tile's first key row
    __syncthreads();  // the last unit's readers of the key tiles are done
    LoadTransposed<W>(kt, k + base * W, count);
    LoadTransposed<W>(vt, v + base * W, count);
    float dk_acc[4][kColumns] = {}, dv_acc[4][kColumns] = {};
    // The query rows that read these keys, head by head of the group, a
    // tile at a time; the next tile's rows are loaded while this one's dK
    // and dV products run.
    StagedTile<W, true> next_queries, next_dy;
    const auto load_rows = [&](int64_t h, int64_t tile) {
      const int64_t at = (batch * g.heads + h) * g.seq + tile;
      next_queries.Load(q + at * W, g.seq - tile);
      next_dy.Load(dy + at * W, g.seq - tile);
    };
    load_rows(kv_head * g.group, first);
    for (int64_t h = kv_head * g.group; h < (kv_head + 1) * g.group; ++h) {
      const int64_t head_rows = (batch * g.heads + h) * g.seq;
      for (int64_t tile = first; tile < g.seq; tile += kTile) {  // rows before `first` read none of these keys
        const int64_t in_tile = g.seq - tile < kTile ? g.seq - tile : kTile;
        __syncthreads();
        next_queries.StoreTransposed(qb);
        next_dy.StoreTransposed(dyb);
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
        next_queries.StoreRows(query_buffer);
        next_dy.StoreRows(dy_buffer);
        __syncthreads();
        if (tile + kTile < g.seq) {
          load_rows(h, tile + kTile);
        } else if (h + 1 < (kv_head + 1) * g.group) {
          load_rows(h + 1, first);
        }
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

template <int W, typename T>
cudaError_t LaunchTiles(const T* q, const T* k, const T* v, const int32_t* positions, T* out,
                        const AttentionGeometry& g, int64_t pairs, cudaStream_t stream) {
  const int64_t tiles = (g.seq + kTile - 1) / kTile;
  return LaunchUnits(pairs * tiles, kTileThreads, stream, AttentionTileKernel<W, T>, q, k, v, positions, out, g, tiles,
                     pairs * tiles);
}

template <int W, typename T>
cudaError_t LaunchTilesGrad(const T* q, const T* k, const T* v, const T* dy, T* dq, T* dk, T* dv, float* stats,
                            const AttentionGeometry& g, int64_t batch, cudaStream_t stream) {
  const int64_t tiles = (g.seq + kTile - 1) / kTile;
  const int64_t query_units = batch * g.heads * tiles, key_units = batch * g.kv_heads * tiles;
  if (cudaError_t error = LaunchUnits(query_units, kTileThreads, stream, AttentionQueryGradTileKernel<W, T>, q, k, v,
                                      dy, dq, stats, g, tiles, query_units);
      error != cudaSuccess) {
    return error;
  }
  return LaunchUnits(key_units, kTileThreads, stream, AttentionKeyGradTileKernel<W, T>, q, k, v, dy, stats, dk, dv, g,
                     tiles, key_units);
}

}  // namespace

template <typename T>
cudaError_t LaunchAttentionTiles(const T* q, const T* k, const T* v, const int32_t* positions, T* out,
                                 const AttentionGeometry& g, int64_t pairs, cudaStream_t stream) {
  if (g.width == 32) return LaunchTiles<32>(q, k, v, positions, out, g, pairs, stream);
  if (g.width == 64) return LaunchTiles<64>(q, k, v, positions, out, g, pairs, stream);
  return cudaErrorInvalidValue;
}

template <typename T>
cudaError_t LaunchAttentionTilesGrad(const T* q, const T* k, const T* v, const T* dy, T* dq, T* dk, T* dv,
                                     float* stats, const AttentionGeometry& g, int64_t batch, cudaStream_t stream) {
  if (g.width == 32) return LaunchTilesGrad<32>(q, k, v, dy, dq, dk, dv, stats, g, batch, stream);
  if (g.width == 64) return LaunchTilesGrad<64>(q, k, v, dy, dq, dk, dv, stats, g, batch, stream);
  return cudaErrorInvalidValue;
}

TANDEM_ATTENTION_FAMILY_OF(Tiles, float)  // bf16 at these widths: attention_mma.cu

}  // namespace tandem::cuda::kernels
