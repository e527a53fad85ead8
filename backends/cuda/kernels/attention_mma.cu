// Causal attention and its gradient on bf16 operands at head widths 32, 64
// and 128, on tensor cores (ir/op.h kAttention; dispatched by
// kernels/attention.cu): FlashAttention-2's structure in 16 x 16 x 16 wmma
// products of bf16 operands with f32 accumulators (sm_80 and later).
//
// A warp owns 16 rows (query rows, or keys in the key-gradient kernel) and
// walks the other side in tiles of kKeyTile rows staged in shared memory by
// the block. Every product is a warp's: S = Q K^T and dP = dY V^T into f32
// accumulators, stored to the warp's shared scratch where its lanes take the
// softmax of one row half each (lane pairs fold a row's max and sum by one
// shuffle, the same bits in both lanes); the weights P (and dS) are rounded
// to bf16 once, as the operands of the next products O += P V, dQ += dS K,
// dV += P^T dY and dK += dS^T Q, as FlashAttention-2 does. The accumulators'
// element layout is the hardware's: a row's rescale reaches its elements
// through a fragment of row numbers loaded like the accumulators (the same
// type, so the same layout). Products sum in the tensor cores' own order,
// fixed by the hardware and the shape: the bits repeat, no atomics; they
// differ from the fp32 SIMT families' (bf16 products, bf16 weights).

#include "backends/cuda/kernels/attention.cuh"

#ifdef __CUDACC__
#include <mma.h>
#endif

namespace tandem::cuda::kernels {
namespace {
namespace tensor_cores {

namespace wmma = nvcuda::wmma;
using bf16 = __nv_bfloat16;
using RowsOperand = wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major>;
using TransposedOperand = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major>;
using ColumnsOperand = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major>;
using Accumulator = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

constexpr int kSide = 16;     // a fragment's side: the rows a warp owns
constexpr int kKeyTile = 32;  // the rows of the other side a tile stages
// Shared rows are padded against bank conflicts: a staged [rows, W] bf16
// tile by 16 bytes a row (the fragment loads' 16-byte rows then fall in
// different banks), the warp's f32 scratch by 4 floats.
template <int W>
constexpr int kStride = W + 8;
constexpr int kScoreStride = kKeyTile + 4;
constexpr int kForwardWarps = 4;
constexpr int kGradWarps = 2;  // the gradient's kernels stage twice the operands

__device__ __forceinline__ int LaneOf() { return static_cast<int>(threadIdx.x) % 32; }
__device__ __forceinline__ int WarpOf() { return static_cast<int>(threadIdx.x) / 32; }

// Rows [0, kRows) of kCount [rows, W] bf16 matrices on their way from device
// memory to shared memory (rows of kStride<W>; zeros past `count`), held in
// the registers of the block's kThreads threads, 16 bytes an access. Load
// issues every access before any is used: a tile costs one memory latency,
// not one an access. A kernel loads the next tile before it computes on
// this one, and stores it once this one's readers are done: the loads are
// in flight meanwhile.
template <int W, int kRows, int kThreads, int kCount>
struct StagedRows {
  static constexpr int kPieces = kRows * W / 8;  // 16-byte pieces of a matrix
  static_assert(kPieces % kThreads == 0, "every thread moves as many pieces");
  static constexpr int kEach = kPieces / kThreads;
  uint4 bits[kCount][kEach];

  __device__ __forceinline__ void Load(const bf16* const (&from)[kCount], int64_t count) {
    TANDEM_UNROLL
    for (int i = 0; i < kEach; ++i) {
      const int piece = static_cast<int>(threadIdx.x) + i * kThreads;
      const bool valid = piece / (W / 8) < count;
      TANDEM_UNROLL
      for (int m = 0; m < kCount; ++m) {
        bits[m][i] = valid ? *reinterpret_cast<const uint4*>(from[m] + 8 * piece) : make_uint4(0u, 0u, 0u, 0u);
      }
    }
  }
  __device__ __forceinline__ void Store(bf16* const (&to)[kCount]) const {
    TANDEM_UNROLL
    for (int i = 0; i < kEach; ++i) {
      const int piece = static_cast<int>(threadIdx.x) + i * kThreads;
      const int at = piece / (W / 8) * kStride<W> + 8 * (piece % (W / 8));
      TANDEM_UNROLL
      for (int m = 0; m < kCount; ++m) *reinterpret_cast<uint4*>(to[m] + at) = bits[m][i];
    }
  }
};

// StagedRows loaded and stored at once; the caller syncs.
template <int W, int kRows, int kThreads, int kCount>
__device__ __forceinline__ void StageRows(bf16* const (&to)[kCount], const bf16* const (&from)[kCount], int64_t count) {
  StagedRows<W, kRows, kThreads, kCount> staged;
  staged.Load(from, count);
  staged.Store(to);
}

// s[n] = a b^T over W: a the warp's 16 rows, b kKeyTile rows (both staged
// rows in shared memory); s[n] holds columns 16n..16n+15 of the product.
// The depth loop unrolls 2 at a time: fully unrolled, the width-128
// query-gradient kernel took 255 registers and spilled; so, 170 (sm_90).
template <int W>
__device__ __forceinline__ void ProductWithTransposed(Accumulator (&s)[kKeyTile / kSide], const bf16* a,
                                                      const bf16* b) {
  TANDEM_UNROLL
  for (int n = 0; n < kKeyTile / kSide; ++n) wmma::fill_fragment(s[n], 0.0f);
  TANDEM_UNROLL_BY(2)
  for (int d = 0; d < W / kSide; ++d) {
    RowsOperand rows;
    wmma::load_matrix_sync(rows, a + kSide * d, kStride<W>);
    TANDEM_UNROLL
    for (int n = 0; n < kKeyTile / kSide; ++n) {
      TransposedOperand columns;
      wmma::load_matrix_sync(columns, b + n * kSide * kStride<W> + kSide * d, kStride<W>);
      wmma::mma_sync(s[n], rows, columns, s[n]);
    }
  }
}

// acc[n] += w b: w the warp's [16, kKeyTile] weights, b kKeyTile staged
// rows (both in shared memory); acc[n] holds columns 16n..16n+15.
template <int W>
__device__ __forceinline__ void AddWeightedRows(Accumulator (&acc)[W / kSide], const bf16* w, const bf16* b) {
  TANDEM_UNROLL
  for (int k = 0; k < kKeyTile / kSide; ++k) {
    RowsOperand weights;
    wmma::load_matrix_sync(weights, w + kSide * k, kKeyTile);
    TANDEM_UNROLL
    for (int n = 0; n < W / kSide; ++n) {
      ColumnsOperand rows;
      wmma::load_matrix_sync(rows, b + k * kSide * kStride<W> + kSide * n, kStride<W>);
      wmma::mma_sync(acc[n], weights, rows, acc[n]);
    }
  }
}

// s into the warp's [16, kKeyTile] f32 scratch (rows of kScoreStride),
// readable by every lane after.
__device__ __forceinline__ void StoreScores(float* scratch, const Accumulator (&s)[kKeyTile / kSide]) {
  __syncwarp();  // the lanes' last reads of the scratch are done
  TANDEM_UNROLL
  for (int n = 0; n < kKeyTile / kSide; ++n) {
    wmma::store_matrix_sync(scratch + kSide * n, s[n], kScoreStride, wmma::mem_row_major);
  }
  __syncwarp();
}

// A table of row numbers (i at row i) written to the warp's scratch and
// loaded as an accumulator: row_of.x[e] is the row of element e of every
// accumulator.
__device__ __forceinline__ void LoadRowNumbers(float* scratch, Accumulator& row_of) {
  for (int e = LaneOf(); e < kSide * kSide; e += 32) {
    scratch[e / kSide * kScoreStride + e % kSide] = static_cast<float>(e / kSide);
  }
  __syncwarp();
  wmma::load_matrix_sync(row_of, scratch, kScoreStride, wmma::mem_row_major);
}

// acc's elements of row i multiplied (or divided, where `divide`) by
// factors[i], the warp's per-row factors in shared memory.
template <int kCount>
__device__ __forceinline__ void ScaleRows(Accumulator (&acc)[kCount], const Accumulator& row_of, const float* factors,
                                          bool divide) {
  __syncwarp();  // the factors are written
  TANDEM_UNROLL
  for (int e = 0; e < Accumulator::num_elements; ++e) {
    const float factor = factors[static_cast<int>(row_of.x[e])];
    TANDEM_UNROLL
    for (int n = 0; n < kCount; ++n) acc[n].x[e] = divide ? acc[n].x[e] / factor : acc[n].x[e] * factor;
  }
}

// The lane's row of the warp's 16 and its half of a tile's kKeyTile columns.
struct RowHalf {
  int row, half;
  __device__ int Column(int j) const { return half * (kKeyTile / 2) + j; }
};
__device__ __forceinline__ RowHalf RowHalfOf() { return {LaneOf() / 2, LaneOf() % 2}; }
__device__ __forceinline__ float PairMax(float x) { return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1)); }
__device__ __forceinline__ float PairSum(float x) { return x + __shfl_xor_sync(0xffffffffu, x, 1); }

// A warp's scratch in shared memory: scores (and a second product) in f32,
// weights in bf16, one factor a row.
struct WarpScratch {
  float* scores;
  float* second;
  bf16* weights;
  float* factors;
};

// The forward over `key_count` keys of `keys` and `values` ([keys, W]) for
// the warp's rows `rows` (16 staged rows; the lane's row reads
// keys < n): o (unnormalised), and the lane's row's max m and sum l. ks and
// vs are the block's tiles; every warp of the block (kThreads threads)
// calls this together.
template <int W, int kThreads>
__device__ void SweepKeys(const bf16* rows, bf16* ks, bf16* vs, const WarpScratch& w, const Accumulator& row_of,
                          const bf16* keys, const bf16* values, int64_t key_count, int64_t n, float scale,
                          Accumulator (&o)[W / kSide], float& m, float& l) {
  const RowHalf at = RowHalfOf();
  TANDEM_UNROLL
  for (int c = 0; c < W / kSide; ++c) wmma::fill_fragment(o[c], 0.0f);
  m = -INFINITY;
  l = 0.0f;
  StagedRows<W, kKeyTile, kThreads, 2> next;
  next.Load({keys, values}, key_count);
  for (int64_t tile = 0; tile < key_count; tile += kKeyTile) {
    __syncthreads();  // the last tile's readers are done
    next.Store({ks, vs});
    __syncthreads();
    if (const int64_t after = tile + kKeyTile; after < key_count) {
      next.Load({keys + after * W, values + after * W}, key_count - after);
    }
    Accumulator s[kKeyTile / kSide];
    ProductWithTransposed<W>(s, rows, ks);
    StoreScores(w.scores, s);
    float x[kKeyTile / 2];
    float tile_max = -INFINITY;
    TANDEM_UNROLL
    for (int j = 0; j < kKeyTile / 2; ++j) {
      x[j] = tile + at.Column(j) < n ? w.scores[at.row * kScoreStride + at.Column(j)] * scale : -INFINITY;
      tile_max = fmaxf(tile_max, x[j]);
    }
    const float next = fmaxf(m, PairMax(tile_max));
    const float rescale = m == next ? 1.0f : expf(m - next);
    float sum = 0.0f;
    TANDEM_UNROLL
    for (int j = 0; j < kKeyTile / 2; ++j) {
      const bf16 weight = __float2bfloat16_rn(x[j] == -INFINITY ? 0.0f : expf(x[j] - next));
      w.weights[at.row * kKeyTile + at.Column(j)] = weight;
      sum = sum + __bfloat162float(weight);  // l sums the weights the product uses
    }
    l = l * rescale + PairSum(sum);
    m = next;
    if (at.half == 0) w.factors[at.row] = rescale;
    ScaleRows(o, row_of, w.factors, /*divide=*/false);
    AddWeightedRows<W>(o, w.weights, vs);
  }
}

// o divided by each row's l (rows without keys: by 1).
template <int W>
__device__ __forceinline__ void Normalise(Accumulator (&o)[W / kSide], const Accumulator& row_of, const WarpScratch& w,
                                          float l) {
  __syncwarp();  // the last tile's readers of the factors are done
  const RowHalf at = RowHalfOf();
  if (at.half == 0) w.factors[at.row] = l > 0.0f ? l : 1.0f;
  ScaleRows(o, row_of, w.factors, /*divide=*/true);
}

// The warp's rows of acc times `factor` into to[row * W + column] (f32, or
// rounded to bf16), rows below `valid`, 32 columns at a time through the
// warp's scratch.
template <int W, typename Out>
__device__ __forceinline__ void StoreRows(Out* to, int64_t valid, const Accumulator (&acc)[W / kSide],
                                          const WarpScratch& w, float factor) {
  const RowHalf at = RowHalfOf();
  TANDEM_UNROLL
  for (int chunk = 0; chunk < W / kKeyTile; ++chunk) {
    StoreScores(w.scores, {acc[2 * chunk], acc[2 * chunk + 1]});
    if (at.row < valid) {
      const float* from = w.scores + at.row * kScoreStride + at.Column(0);
      Out* row = to + at.row * W + chunk * kKeyTile + at.Column(0);
      TANDEM_UNROLL
      for (int j = 0; j < kKeyTile / 2; j += 4) {
        Store4(row + j,
               make_float4(from[j] * factor, from[j + 1] * factor, from[j + 2] * factor, from[j + 3] * factor));
      }
    }
  }
}

// The sum over columns of acc's row times `rows`' row (the warp's 16 staged
// rows), for the lane's row: the same bits in both lanes.
template <int W>
__device__ __forceinline__ float RowDot(const Accumulator (&acc)[W / kSide], const bf16* rows, const WarpScratch& w) {
  const RowHalf at = RowHalfOf();
  float part = 0.0f;
  TANDEM_UNROLL
  for (int chunk = 0; chunk < W / kKeyTile; ++chunk) {
    StoreScores(w.scores, {acc[2 * chunk], acc[2 * chunk + 1]});
    TANDEM_UNROLL
    for (int j = 0; j < kKeyTile / 2; ++j) {
      part = fmaf(w.scores[at.row * kScoreStride + at.Column(j)],
                  __bfloat162float(rows[at.row * kStride<W> + chunk * kKeyTile + at.Column(j)]), part);
    }
  }
  return PairSum(part);
}

// The forward: a block of kForwardWarps warps takes 16 query rows a warp of
// one (batch, head) pair.
template <int W, typename Out>
__global__ void AttentionMmaKernel(const bf16* q, const bf16* k, const bf16* v, const int32_t* positions, Out* out,
                                   AttentionGeometry g, int64_t query_tiles, int64_t units) {
  constexpr int kRows = kSide * kForwardWarps, kThreads = 32 * kForwardWarps;
  __shared__ __align__(32) bf16 query_rows[kRows * kStride<W>];
  __shared__ __align__(32) bf16 key_rows[kKeyTile * kStride<W>];
  __shared__ __align__(32) bf16 value_rows[kKeyTile * kStride<W>];
  __shared__ __align__(32) float scores[kForwardWarps][kSide * kScoreStride];
  __shared__ __align__(32) bf16 weights[kForwardWarps][kSide * kKeyTile];
  __shared__ float factors[kForwardWarps][kSide];
  const int warp = WarpOf();
  const WarpScratch w{scores[warp], nullptr, weights[warp], factors[warp]};
  Accumulator row_of;
  LoadRowNumbers(w.scores, row_of);
  const int row = warp * kSide + RowHalfOf().row;  // the lane's row of the block's
  for (int64_t unit = blockIdx.x; unit < units; unit += gridDim.x) {
    const UnitRows rows_of_unit = QueryRowsOf(unit, units, query_tiles, kRows);
    const int64_t pair = rows_of_unit.pair, first = rows_of_unit.first;
    const int64_t b = pair / g.heads;
    const int64_t count = g.seq - first < kRows ? g.seq - first : kRows;
    const auto keys_of = [&](int64_t r) -> int64_t {  // the keys row r reads (0 past the sequence)
      if (r >= count) return 0;
      return (positions != nullptr ? positions[b * g.seq + first + r] : first + r) + 1;
    };
    int64_t key_count = 0;
    for (int r = 0; r < kRows; ++r) key_count = keys_of(r) > key_count ? keys_of(r) : key_count;
    __syncthreads();  // the last unit's readers of the query rows are done
    StageRows<W, kRows, kThreads>({query_rows}, {q + (pair * g.seq + first) * W}, count);
    Accumulator o[W / kSide];
    float m, l;
    SweepKeys<W, kThreads>(query_rows + warp * kSide * kStride<W>, key_rows, value_rows, w, row_of,
                           k + g.KeyBase(pair * g.seq), v + g.KeyBase(pair * g.seq), key_count, keys_of(row), g.scale,
                           o, m, l);
    Normalise<W>(o, row_of, w, l);
    StoreRows<W>(out + (pair * g.seq + first + warp * kSide) * W, count - warp * kSide, o, w, 1.0f);
  }
}

// What both gradient kernels stage: kKeyTile rows each of q, dy, k and v
// (a block's own 16 a warp, or a tile of the other side), and each warp's
// scratch (two products and the weights).
template <int W>
struct GradientTiles {
  static_assert(kSide * kGradWarps == kKeyTile, "a block's own rows and the other side's tile are one length");
  __align__(32) bf16 query_rows[kKeyTile * kStride<W>];
  __align__(32) bf16 dy_rows[kKeyTile * kStride<W>];
  __align__(32) bf16 key_rows[kKeyTile * kStride<W>];
  __align__(32) bf16 value_rows[kKeyTile * kStride<W>];
  __align__(32) float scores[kGradWarps][kSide * kScoreStride];
  __align__(32) float second[kGradWarps][kSide * kScoreStride];
  __align__(32) bf16 weights[kGradWarps][kSide * kKeyTile];
};

// dQ: a block of kGradWarps warps takes 16 query rows a warp and sweeps their
// keys twice, the forward (o, m and l, so delta = dy . o), then S and dP = dY
// V^T again for dS = P (dP - delta) and dQ += dS K; it leaves each row's m,
// l and delta in `stats`.
template <int W, typename Out>
__global__ void AttentionQueryGradMmaKernel(const bf16* q, const bf16* k, const bf16* v, const bf16* dy, Out* dq,
                                            float* stats, AttentionGeometry g, int64_t query_tiles, int64_t units) {
  constexpr int kRows = kSide * kGradWarps, kThreads = 32 * kGradWarps;
  __shared__ GradientTiles<W> tiles;
  __shared__ float factors[kGradWarps][kSide];
  bf16* const query_rows = tiles.query_rows;
  bf16* const dy_rows = tiles.dy_rows;
  bf16* const key_rows = tiles.key_rows;
  bf16* const value_rows = tiles.value_rows;
  const int warp = WarpOf();
  const WarpScratch w{tiles.scores[warp], tiles.second[warp], tiles.weights[warp], factors[warp]};
  const RowHalf at = RowHalfOf();
  Accumulator row_of;
  LoadRowNumbers(w.scores, row_of);
  for (int64_t unit = blockIdx.x; unit < units; unit += gridDim.x) {
    const UnitRows rows_of_unit = QueryRowsOf(unit, units, query_tiles, kRows);
    const int64_t pair = rows_of_unit.pair, first = rows_of_unit.first;
    const int64_t count = g.seq - first < kRows ? g.seq - first : kRows;
    const int64_t key_count = first + count;  // the last row reads keys 0..first + count - 1
    const int64_t row = warp * kSide + at.row;
    const int64_t n = row < count ? first + row + 1 : 0;
    const bf16* keys = k + g.KeyBase(pair * g.seq);
    const bf16* values = v + g.KeyBase(pair * g.seq);
    const int64_t base = pair * g.seq + first;  // the block's first query row
    __syncthreads();  // the last unit's readers of the rows are done
    StageRows<W, kRows, kThreads>({query_rows, dy_rows}, {q + base * W, dy + base * W}, count);
    const bf16* my_queries = query_rows + warp * kSide * kStride<W>;
    const bf16* my_dy = dy_rows + warp * kSide * kStride<W>;
    Accumulator acc[W / kSide];
    float m, l;
    SweepKeys<W, kThreads>(my_queries, key_rows, value_rows, w, row_of, keys, values, key_count, n, g.scale, acc, m, l);
    Normalise<W>(acc, row_of, w, l);
    const float delta = RowDot<W>(acc, my_dy, w);
    TANDEM_UNROLL
    for (int c = 0; c < W / kSide; ++c) wmma::fill_fragment(acc[c], 0.0f);  // now dq
    StagedRows<W, kKeyTile, kThreads, 2> next;
    next.Load({keys, values}, key_count);
    for (int64_t tile = 0; tile < key_count; tile += kKeyTile) {
      __syncthreads();
      next.Store({key_rows, value_rows});
      __syncthreads();
      if (const int64_t after = tile + kKeyTile; after < key_count) {
        next.Load({keys + after * W, values + after * W}, key_count - after);
      }
      Accumulator s[kKeyTile / kSide], dp[kKeyTile / kSide];
      ProductWithTransposed<W>(s, my_queries, key_rows);
      ProductWithTransposed<W>(dp, my_dy, value_rows);
      StoreScores(w.scores, s);
      StoreScores(w.second, dp);
      TANDEM_UNROLL
      for (int j = 0; j < kKeyTile / 2; ++j) {
        const int score = at.row * kScoreStride + at.Column(j);
        const float weight = tile + at.Column(j) < n ? expf(w.scores[score] * g.scale - m) / l : 0.0f;
        w.weights[at.row * kKeyTile + at.Column(j)] = __float2bfloat16_rn(weight * (w.second[score] - delta));  // dS
      }
      __syncwarp();
      AddWeightedRows<W>(acc, w.weights, key_rows);
    }
    StoreRows<W>(dq + (base + warp * kSide) * W, count - warp * kSide, acc, w, g.scale);
    if (at.half == 0 && row < count) {
      const int64_t r = base + row;
      stats[3 * r] = m;
      stats[3 * r + 1] = l;
      stats[3 * r + 2] = delta;
    }
  }
}

// dK and dV: a block of kGradWarps warps takes 16 keys a warp of one
// key/value pair and walks the query rows that read them, per query head of
// the pair in order, kKeyTile rows at a time: S^T = K Q^T and dP^T = V dY^T,
// then dV += P^T dY and dK += dS^T Q.
template <int W, typename Out>
__global__ void AttentionKeyGradMmaKernel(const bf16* q, const bf16* k, const bf16* v, const bf16* dy,
                                          const float* stats, Out* dk, Out* dv, AttentionGeometry g, int64_t key_tiles,
                                          int64_t units) {
  constexpr int kKeys = kSide * kGradWarps, kThreads = 32 * kGradWarps;
  static_assert(kKeys == kKeyTile, "a key tile's rows are the query tiles' length: causality skips whole tiles");
  __shared__ GradientTiles<W> tiles;
  __shared__ __align__(32) bf16 gradients[kGradWarps][kSide * kKeyTile];
  __shared__ float stats_tile[3 * kKeyTile];
  bf16* const query_rows = tiles.query_rows;
  bf16* const dy_rows = tiles.dy_rows;
  bf16* const key_rows = tiles.key_rows;
  bf16* const value_rows = tiles.value_rows;
  const int warp = WarpOf();
  const WarpScratch w{tiles.scores[warp], tiles.second[warp], tiles.weights[warp], nullptr};
  bf16* const my_gradients = gradients[warp];
  const RowHalf at = RowHalfOf();  // here: the lane's key and half of a tile's query rows
  for (int64_t unit = blockIdx.x; unit < units; unit += gridDim.x) {
    const UnitRows keys_of_unit = KeyRowsOf(unit, units, key_tiles, kKeys);
    const int64_t kv_pair = keys_of_unit.pair, first = keys_of_unit.first;
    const int64_t count = g.seq - first < kKeys ? g.seq - first : kKeys;
    const int64_t batch = kv_pair / g.kv_heads, kv_head = kv_pair % g.kv_heads;
    const int64_t base = kv_pair * g.seq + first;  // the block's first key
    const int64_t key = first + warp * kSide + at.row;
    __syncthreads();  // the last unit's readers of the key rows are done
    StageRows<W, kKeys, kThreads>({key_rows, value_rows}, {k + base * W, v + base * W}, count);
    Accumulator dk_acc[W / kSide], dv_acc[W / kSide];
    TANDEM_UNROLL
    for (int c = 0; c < W / kSide; ++c) {
      wmma::fill_fragment(dk_acc[c], 0.0f);
      wmma::fill_fragment(dv_acc[c], 0.0f);
    }
    for (int64_t h = kv_head * g.group; h < (kv_head + 1) * g.group; ++h) {
      const int64_t head_rows = (batch * g.heads + h) * g.seq;
      for (int64_t tile = first; tile < g.seq; tile += kKeyTile) {  // rows before `first` read none of these keys
        const int64_t in_tile = g.seq - tile < kKeyTile ? g.seq - tile : kKeyTile;
        __syncthreads();
        StageRows<W, kKeyTile, kThreads>({query_rows, dy_rows},
                                         {q + (head_rows + tile) * W, dy + (head_rows + tile) * W}, in_tile);
        for (int e = threadIdx.x; e < 3 * kKeyTile; e += blockDim.x) {
          stats_tile[e] = e < 3 * in_tile ? stats[3 * (head_rows + tile) + e] : 0.0f;
        }
        __syncthreads();
        Accumulator st[kKeyTile / kSide], dpt[kKeyTile / kSide];  // [key][row]
        ProductWithTransposed<W>(st, key_rows + warp * kSide * kStride<W>, query_rows);
        ProductWithTransposed<W>(dpt, value_rows + warp * kSide * kStride<W>, dy_rows);
        StoreScores(w.scores, st);
        StoreScores(w.second, dpt);
        TANDEM_UNROLL
        for (int j = 0; j < kKeyTile / 2; ++j) {
          const int t = at.Column(j);
          const int score = at.row * kScoreStride + t, weight = at.row * kKeyTile + t;
          const bool reads = t < in_tile && tile + t >= key && key < g.seq;  // query row i reads key j when i >= j
          const float p = reads ? expf(w.scores[score] * g.scale - stats_tile[3 * t]) / stats_tile[3 * t + 1] : 0.0f;
          w.weights[weight] = __float2bfloat16_rn(p);
          my_gradients[weight] = __float2bfloat16_rn(p * (w.second[score] - stats_tile[3 * t + 2]));
        }
        __syncwarp();
        AddWeightedRows<W>(dv_acc, w.weights, dy_rows);
        AddWeightedRows<W>(dk_acc, my_gradients, query_rows);
      }
    }
    StoreRows<W>(dk + (base + warp * kSide) * W, count - warp * kSide, dk_acc, w, g.scale);
    StoreRows<W>(dv + (base + warp * kSide) * W, count - warp * kSide, dv_acc, w, 1.0f);
  }
}

template <int W, typename Out>
cudaError_t Launch(const bf16* q, const bf16* k, const bf16* v, const int32_t* positions, Out* out,
                   const AttentionGeometry& g, int64_t pairs, cudaStream_t stream) {
  constexpr int kRows = kSide * kForwardWarps;
  const int64_t tiles = (g.seq + kRows - 1) / kRows;
  return LaunchUnits(pairs * tiles, 32 * kForwardWarps, stream, AttentionMmaKernel<W, Out>, q, k, v, positions, out, g,
                     tiles, pairs * tiles);
}

template <int W, typename Out>
cudaError_t LaunchGrad(const bf16* q, const bf16* k, const bf16* v, const bf16* dy, Out* dq, Out* dk, Out* dv,
                       float* stats, const AttentionGeometry& g, int64_t batch, cudaStream_t stream) {
  constexpr int kRows = kSide * kGradWarps;
  const int64_t tiles = (g.seq + kRows - 1) / kRows;
  const int64_t query_units = batch * g.heads * tiles, key_units = batch * g.kv_heads * tiles;
  if (cudaError_t error = LaunchUnits(query_units, 32 * kGradWarps, stream, AttentionQueryGradMmaKernel<W, Out>, q, k,
                                      v, dy, dq, stats, g, tiles, query_units);
      error != cudaSuccess) {
    return error;
  }
  return LaunchUnits(key_units, 32 * kGradWarps, stream, AttentionKeyGradMmaKernel<W, Out>, q, k, v, dy, stats, dk, dv,
                     g, tiles, key_units);
}

}  // namespace tensor_cores
}  // namespace

template <typename Out>
cudaError_t LaunchAttentionMma(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                               const int32_t* positions, Out* out, const AttentionGeometry& g, int64_t pairs,
                               cudaStream_t stream) {
  switch (g.width) {
    case 32:
      return tensor_cores::Launch<32>(q, k, v, positions, out, g, pairs, stream);
    case 64:
      return tensor_cores::Launch<64>(q, k, v, positions, out, g, pairs, stream);
    case 128:
      return tensor_cores::Launch<128>(q, k, v, positions, out, g, pairs, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

template <typename Out>
cudaError_t LaunchAttentionMmaGrad(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                                   const __nv_bfloat16* dy, Out* dq, Out* dk, Out* dv, float* stats,
                                   const AttentionGeometry& g, int64_t batch, cudaStream_t stream) {
  switch (g.width) {
    case 32:
      return tensor_cores::LaunchGrad<32>(q, k, v, dy, dq, dk, dv, stats, g, batch, stream);
    case 64:
      return tensor_cores::LaunchGrad<64>(q, k, v, dy, dq, dk, dv, stats, g, batch, stream);
    case 128:
      return tensor_cores::LaunchGrad<128>(q, k, v, dy, dq, dk, dv, stats, g, batch, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

TANDEM_ATTENTION_MMA_OF(float)
TANDEM_ATTENTION_MMA_OF(__nv_bfloat16)

}  // namespace tandem::cuda::kernels
