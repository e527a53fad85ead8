// Causal attention and its gradient on bf16 operands at head widths 32, 64
// and 128, on tensor cores (ir/op.h kAttention; dispatched by
// kernels/attention.cu): FlashAttention-2's structure in mma.sync m16n8k16
// products of bf16 operands with f32 accumulators (kernels/warp_mma.cuh;
// sm_80 and later).
//
// A warp owns 16 rows (query rows, or keys in the key-gradient kernel) and
// walks the other side in tiles staged in shared memory by the block's
// cp.async copies (padded rows: ldmatrix's eight 16-byte rows fall in
// different banks). Every product is a warp's, its result in registers:
// S = Q K^T (and dP = dY V^T) come out as accumulator tiles whose layout
// the PTX ISA fixes, so each lane knows which rows and keys its elements
// are; a row's max and sum fold over the four lanes that share the row (two
// shuffles, the same bits in all four); the weights P (and dS) are rounded
// to bf16 once, in place, as the A operand of the next product (O += P V,
// dQ += dS K, dV += P^T dY, dK += dS^T Q), as FlashAttention-2 does. The
// scores never touch shared memory. Products sum in the tensor cores' own
// order, fixed by the hardware and the shape: the bits repeat, no atomics;
// they differ from the fp32 SIMT families' (bf16 products, bf16 weights).
//
// Query rows and their dY stay in registers as A operands for a whole
// sweep; the forward stages a tile's keys while the last tile's weighted
// values are summed, and its values while its scores are taken
// (FlashAttention-2's overlap, one buffer each). Softmax runs in base 2:
// x = s * scale * log2(e), weights exp2(x - max).

#include "backends/cuda/kernels/attention.cuh"
#include "backends/cuda/kernels/warp_mma.cuh"

namespace tandem::cuda::kernels {
namespace {
namespace tensor_cores {

using namespace warp_mma;  // NOLINT: this file is warp_mma's client

constexpr float kLog2E = 1.4426950408889634f;

// How many of a tile's columns from `tile` on lie below `end`, in 0..kCols:
// column c of the tile is in when c < ColumnsBelow(...), compared in 32 bits.
template <int kCols>
__device__ __forceinline__ int ColumnsBelow(int64_t end, int64_t tile) {
  const int64_t rest = end - tile;
  return rest <= 0 ? 0 : rest >= kCols ? kCols : static_cast<int>(rest);
}

// The base-2 exponential the softmax takes (to within 2 ulp, subnormal
// results flushed to zero: one instruction on the GPU).
__device__ __forceinline__ float Exp2(float x) {
#ifdef __CUDACC__
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#else
  return exp2f(x);
#endif
}

// The forward over `key_count` keys of `keys` and `values` ([keys, W]) for
// the warp's 16 query rows `q` (the lane's row of half h reads keys below
// n[h]): o (unnormalised), each half's max m (base 2, scaled) and sum l.
// ks and vs are the block's tiles of kKeys rows; every warp of the block
// (kThreads threads) calls this together, with no copies in flight.
template <int W, int kKeys, int kThreads>
__device__ void SweepKeys(const Rows (&q)[W / kSide], bf16* ks, bf16* vs, const bf16* keys, const bf16* values,
                          int64_t key_count, const int64_t (&n)[2], float scale, Sums (&o)[W / 8], float (&m)[2],
                          float (&l)[2]) {
  const LanePlace at = LanePlaceOf();
  const float scale2 = scale * kLog2E;
  Zero(o);
  m[0] = m[1] = -INFINITY;
  l[0] = l[1] = 0.0f;
  __syncthreads();  // the tiles' last readers are done
  CopyRows<W, kKeys, kThreads>(ks, keys, key_count);
  CommitCopies();
  CopyRows<W, kKeys, kThreads>(vs, values, key_count);
  CommitCopies();
  for (int64_t tile = 0; tile < key_count; tile += kKeys) {
    const int64_t after = tile + kKeys;
    WaitCopies<1>();  // this tile's keys (its values may be in flight)
    __syncthreads();
    Sums s[kKeys / 8];
    ProductWithTransposed<W, kKeys>(s, q, ks);
    __syncthreads();  // every warp is done with the keys
    if (after < key_count) CopyRows<W, kKeys, kThreads>(ks, keys + after * W, key_count - after);
    CommitCopies();
    float rescale[2];
    TANDEM_UNROLL
    for (int h = 0; h < 2; ++h) {
      const int keys_in = ColumnsBelow<kKeys>(n[h], tile);
      float tile_max = -INFINITY;
      TANDEM_UNROLL
      for (int j = 0; j < kKeys / 8; ++j) {
        TANDEM_UNROLL
        for (int i = 2 * h; i < 2 * h + 2; ++i) {
          s[j][i] = at.Column(j, i) < keys_in ? s[j][i] * scale2 : -INFINITY;
          tile_max = fmaxf(tile_max, s[j][i]);
        }
      }
      const float next = fmaxf(m[h], QuadMax(tile_max));
      rescale[h] = m[h] == next ? 1.0f : Exp2(m[h] - next);
      const float shift = next == -INFINITY ? 0.0f : next;  // masked scores give exp2(-inf) = 0
      float sum = 0.0f;
      TANDEM_UNROLL
      for (int j = 0; j < kKeys / 8; ++j) {
        TANDEM_UNROLL
        for (int i = 2 * h; i < 2 * h + 2; ++i) {
          // l sums the weights the product uses: rounded to bf16.
          s[j][i] = __bfloat162float(__float2bfloat16_rn(Exp2(s[j][i] - shift)));
          sum += s[j][i];
        }
      }
      l[h] = l[h] * rescale[h] + QuadSum(sum);
      m[h] = next;
    }
    ScaleRows(o, rescale);
    Rows p[kKeys / kSide];
    RowsFromSums<kKeys>(p, s);
    WaitCopies<1>();  // this tile's values (the next keys may be in flight)
    __syncthreads();
    AddWeightedRows<W, kKeys>(o, p, vs);
    __syncthreads();  // every warp is done with the values
    if (after < key_count) CopyRows<W, kKeys, kThreads>(vs, values + after * W, key_count - after);
    CommitCopies();
  }
  WaitCopies<0>();
}

// o divided by each row's l (rows without keys: by 1).
template <int W>
__device__ __forceinline__ void Normalise(Sums (&o)[W / 8], const float (&l)[2]) {
  const float inverse[2] = {l[0] > 0.0f ? 1.0f / l[0] : 1.0f, l[1] > 0.0f ? 1.0f / l[1] : 1.0f};
  ScaleRows(o, inverse);
}

// Stages a block's kRows rows of `from` (count of them real) and takes the
// warp's 16 as A operands; `tile` is free before and after.
template <int W, int kRows, int kThreads>
__device__ __forceinline__ void LoadOwnRows(Rows (&a)[W / kSide], bf16* tile, const bf16* from, int64_t count) {
  __syncthreads();  // the tile's last readers are done
  CopyRows<W, kRows, kThreads>(tile, from, count);
  CommitCopies();
  WaitCopies<0>();
  __syncthreads();
  LoadOperandRows<W>(a, tile, WarpOf() * kSide);
}

// The forward: a block of kForwardWarps warps takes 16 query rows a warp of
// one (batch, head) pair, keys in tiles of kForwardKeys.
constexpr int kForwardWarps = 4, kForwardKeys = 64;
template <int W, typename Out>
__global__ void AttentionMmaKernel(const bf16* q, const bf16* k, const bf16* v, const int32_t* positions, Out* out,
                                   AttentionGeometry g, int64_t query_tiles, int64_t units) {
  constexpr int kRows = kSide * kForwardWarps, kThreads = 32 * kForwardWarps;
  static_assert(kRows <= kForwardKeys, "the query rows are staged in the key tile");
  __shared__ __align__(16) bf16 key_rows[kForwardKeys * kStride<W>];
  __shared__ __align__(16) bf16 value_rows[kForwardKeys * kStride<W>];
  const int warp = WarpOf();
  const LanePlace at = LanePlaceOf();
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
    Rows rows[W / kSide];
    LoadOwnRows<W, kRows, kThreads>(rows, key_rows, q + (pair * g.seq + first) * W, count);
    const int64_t n[2] = {keys_of(warp * kSide + at.Row(0)), keys_of(warp * kSide + at.Row(1))};
    Sums o[W / 8];
    float m[2], l[2];
    SweepKeys<W, kForwardKeys, kThreads>(rows, key_rows, value_rows, k + g.KeyBase(pair * g.seq),
                                         v + g.KeyBase(pair * g.seq), key_count, n, g.scale, o, m, l);
    Normalise<W>(o, l);
    StoreRows<W>(out + (pair * g.seq + first + warp * kSide) * W, count - warp * kSide, o, 1.0f);
  }
}

// dQ: a block of kQueryGradWarps warps takes 16 query rows a warp and
// sweeps their keys twice: the forward (o, m and l, so delta = dy . o),
// then S and dP = dY V^T again, in tiles of kGradKeys, for dS = P (dP -
// delta) and dQ += dS K; it leaves each row's m (base 2), 1 / l and delta
// in `stats`.
constexpr int kQueryGradWarps = 4, kGradKeys = 32;
template <int W>
struct QueryGradTiles {
  static constexpr int kRows = kSide * kQueryGradWarps;
  // The block's query rows and dY rows are staged once, then the space is
  // the key and value tiles'.
  union {
    struct {
      __align__(16) bf16 queries[kRows * kStride<W>];
      __align__(16) bf16 dy[kRows * kStride<W>];
    } own;
    struct {
      __align__(16) bf16 keys[kGradKeys * kStride<W>];
      __align__(16) bf16 values[kGradKeys * kStride<W>];
    } tiles;
  };
};

template <int W, typename Out>
__global__ void AttentionQueryGradMmaKernel(const bf16* q, const bf16* k, const bf16* v, const bf16* dy, Out* dq,
                                            float* stats, AttentionGeometry g, int64_t query_tiles, int64_t units) {
  constexpr int kRows = kSide * kQueryGradWarps, kThreads = 32 * kQueryGradWarps;
  __shared__ QueryGradTiles<W> shared;
  const int warp = WarpOf();
  const LanePlace at = LanePlaceOf();
  const float scale2 = g.scale * kLog2E;
  for (int64_t unit = blockIdx.x; unit < units; unit += gridDim.x) {
    const UnitRows rows_of_unit = QueryRowsOf(unit, units, query_tiles, kRows);
    const int64_t pair = rows_of_unit.pair, first = rows_of_unit.first;
    const int64_t count = g.seq - first < kRows ? g.seq - first : kRows;
    const int64_t key_count = first + count;  // the last row reads keys 0..first + count - 1
    int64_t n[2];
    TANDEM_UNROLL
    for (int h = 0; h < 2; ++h) {
      const int64_t row = warp * kSide + at.Row(h);
      n[h] = row < count ? first + row + 1 : 0;
    }
    const bf16* keys = k + g.KeyBase(pair * g.seq);
    const bf16* values = v + g.KeyBase(pair * g.seq);
    const int64_t base = pair * g.seq + first;  // the block's first query row
    Rows own_q[W / kSide], own_dy[W / kSide];
    __syncthreads();  // the last unit's readers of the tiles are done
    CopyRows<W, kRows, kThreads>(shared.own.queries, q + base * W, count);
    CopyRows<W, kRows, kThreads>(shared.own.dy, dy + base * W, count);
    CommitCopies();
    WaitCopies<0>();
    __syncthreads();
    LoadOperandRows<W>(own_q, shared.own.queries, warp * kSide);
    LoadOperandRows<W>(own_dy, shared.own.dy, warp * kSide);
    Sums acc[W / 8];
    float m[2], l[2];
    SweepKeys<W, kGradKeys, kThreads>(own_q, shared.tiles.keys, shared.tiles.values, keys, values, key_count, n,
                                      g.scale, acc, m, l);
    Normalise<W>(acc, l);
    // delta = dy . o over the row: o's elements (row, 8j + 2t + i % 2) meet
    // dy's as own_dy holds them (A operand words 0..3: rows g, g + 8 at
    // columns 2t, then 2t + 8, of each 16).
    float delta[2];
    TANDEM_UNROLL
    for (int h = 0; h < 2; ++h) {
      float part = 0.0f;
      TANDEM_UNROLL
      for (int d = 0; d < W / kSide; ++d) {
        TANDEM_UNROLL
        for (int half = 0; half < 2; ++half) {  // columns 16d + 8 half + 2t (+1)
          const uint32_t word = own_dy[d][h + 2 * half];
          part = fmaf(acc[2 * d + half][2 * h], WidenHalf(word, 0), part);
          part = fmaf(acc[2 * d + half][2 * h + 1], WidenHalf(word, 1), part);
        }
      }
      delta[h] = QuadSum(part);
    }
    Zero(acc);  // now dq
    const float inverse_l[2] = {l[0] > 0.0f ? 1.0f / l[0] : 0.0f, l[1] > 0.0f ? 1.0f / l[1] : 0.0f};
    __syncthreads();  // the sweep's last readers of the tiles are done
    CopyRows<W, kGradKeys, kThreads>(shared.tiles.keys, keys, key_count);
    CopyRows<W, kGradKeys, kThreads>(shared.tiles.values, values, key_count);
    CommitCopies();
    const auto own_rows = [&](int product, int d, Rows& rows) {
      TANDEM_UNROLL
      for (int w = 0; w < 4; ++w) rows[w] = product == 0 ? own_q[d][w] : own_dy[d][w];
    };
    for (int64_t tile = 0; tile < key_count; tile += kGradKeys) {
      WaitCopies<0>();
      __syncthreads();
      Sums s[kGradKeys / 8], dp[kGradKeys / 8];
      TwoProductsWithTransposed<W, kGradKeys>(s, dp, own_rows, shared.tiles.keys, shared.tiles.values);
      const int keys_in[2] = {ColumnsBelow<kGradKeys>(n[0], tile), ColumnsBelow<kGradKeys>(n[1], tile)};
      TANDEM_UNROLL
      for (int j = 0; j < kGradKeys / 8; ++j) {
        TANDEM_UNROLL
        for (int i = 0; i < 4; ++i) {
          const int h = i / 2;
          const float p = at.Column(j, i) < keys_in[h] ? Exp2(fmaf(s[j][i], scale2, -m[h])) * inverse_l[h] : 0.0f;
          s[j][i] = p * (dp[j][i] - delta[h]);  // dS
        }
      }
      Rows ds[kGradKeys / kSide];
      RowsFromSums<kGradKeys>(ds, s);
      AddWeightedRows<W, kGradKeys>(acc, ds, shared.tiles.keys);
      __syncthreads();  // every warp is done with the tiles
      if (const int64_t after = tile + kGradKeys; after < key_count) {
        CopyRows<W, kGradKeys, kThreads>(shared.tiles.keys, keys + after * W, key_count - after);
        CopyRows<W, kGradKeys, kThreads>(shared.tiles.values, values + after * W, key_count - after);
      }
      CommitCopies();
    }
    StoreRows<W>(dq + (base + warp * kSide) * W, count - warp * kSide, acc, g.scale);
    if (at.t == 0) {
      TANDEM_UNROLL
      for (int h = 0; h < 2; ++h) {
        const int64_t row = warp * kSide + at.Row(h);
        if (row >= count) continue;
        stats[3 * (base + row)] = m[h];
        stats[3 * (base + row) + 1] = inverse_l[h];
        stats[3 * (base + row) + 2] = delta[h];
      }
    }
  }
}

// dK and dV: a block of kKeyGradWarps warps takes 16 keys a warp of one
// key/value pair and walks the query rows that read them, per query head of
// the pair in order, kGradKeys rows at a time: S^T = K Q^T and dP^T = V
// dY^T, then dV += P^T dY and dK += dS^T Q.
constexpr int kKeyGradWarps = 2;
template <int W>
struct KeyGradTiles {
  __align__(16) bf16 keys[kSide * kKeyGradWarps * kStride<W>];
  __align__(16) bf16 values[kSide * kKeyGradWarps * kStride<W>];
  __align__(16) bf16 queries[kGradKeys * kStride<W>];
  __align__(16) bf16 dy[kGradKeys * kStride<W>];
  float stats[3 * kGradKeys];
};

template <int W, typename Out>
__global__ void AttentionKeyGradMmaKernel(const bf16* q, const bf16* k, const bf16* v, const bf16* dy,
                                          const float* stats, Out* dk, Out* dv, AttentionGeometry g, int64_t key_tiles,
                                          int64_t units) {
  constexpr int kKeys = kSide * kKeyGradWarps, kThreads = 32 * kKeyGradWarps, kTile = kGradKeys;
  static_assert(kKeys == kTile, "a key tile's rows are the query tiles' length: causality skips whole tiles");
  __shared__ KeyGradTiles<W> shared;
  const int warp = WarpOf();
  const LanePlace at = LanePlaceOf();  // here: the lane's keys (rows) and query rows (columns)
  const float scale2 = g.scale * kLog2E;
  for (int64_t unit = blockIdx.x; unit < units; unit += gridDim.x) {
    const UnitRows keys_of_unit = KeyRowsOf(unit, units, key_tiles, kKeys);
    const int64_t kv_pair = keys_of_unit.pair, first = keys_of_unit.first;
    const int64_t count = g.seq - first < kKeys ? g.seq - first : kKeys;
    const int64_t batch = kv_pair / g.kv_heads, kv_head = kv_pair % g.kv_heads;
    const int64_t base = kv_pair * g.seq + first;  // the block's first key
    const int64_t key[2] = {first + warp * kSide + at.Row(0), first + warp * kSide + at.Row(1)};
    __syncthreads();  // the last unit's readers of the key rows are done
    CopyRows<W, kKeys, kThreads>(shared.keys, k + base * W, count);
    CopyRows<W, kKeys, kThreads>(shared.values, v + base * W, count);
    CommitCopies();
    Sums dk_acc[W / 8], dv_acc[W / 8];
    Zero(dk_acc);
    Zero(dv_acc);
    // Step `step` takes query head kv_head * group + step / tiles_per_head,
    // its kTile rows from tile_of(step) (rows before `first` read none of
    // these keys). The next step's dY stages while this step's dK is
    // summed (dY is done first).
    const int64_t tiles_per_head = (g.seq - first + kTile - 1) / kTile, steps = g.group * tiles_per_head;
    const auto tile_of = [&](int64_t step) { return first + step % tiles_per_head * kTile; };
    const auto in_tile_of = [&](int64_t step) { return g.seq - tile_of(step) < kTile ? g.seq - tile_of(step) : kTile; };
    const auto row_of = [&](int64_t step) {  // the step's first query row
      return (batch * g.heads + kv_head * g.group + step / tiles_per_head) * g.seq + tile_of(step);
    };
    const auto stage_dy = [&](int64_t step) {
      if (step < steps) CopyRows<W, kTile, kThreads>(shared.dy, dy + row_of(step) * W, in_tile_of(step));
      CommitCopies();
    };
    const auto stage_queries = [&](int64_t step) {
      if (step < steps) {
        CopyRows<W, kTile, kThreads>(shared.queries, q + row_of(step) * W, in_tile_of(step));
        for (int e = threadIdx.x; e < 3 * kTile; e += kThreads) {
          if (e < 3 * in_tile_of(step)) {
            CopyAsync4(shared.stats + e, stats + 3 * row_of(step) + e);
          } else {
            shared.stats[e] = 0.0f;
          }
        }
      }
      CommitCopies();
    };
    stage_dy(0);
    stage_queries(0);
    for (int64_t step = 0; step < steps; ++step) {
      const int64_t tile = tile_of(step);
      const int in_tile = static_cast<int>(in_tile_of(step));
      WaitCopies<0>();  // the keys, values and this step's dY, queries and statistics
      __syncthreads();
      Sums st[kTile / 8], dpt[kTile / 8];  // [key][row]
      const auto staged_rows = [&](int product, int d, Rows& rows) {
        LoadRows(rows, product == 0 ? shared.keys : shared.values, kStride<W>, warp * kSide, kSide * d);
      };
      TwoProductsWithTransposed<W, kTile>(st, dpt, staged_rows, shared.queries, shared.dy);
      // Row t of the tile reads the key of half h when first_reader[h] <= t
      // < in_tile (row i reads key j when i >= j; keys past the sequence are
      // read by none).
      int first_reader[2];
      TANDEM_UNROLL
      for (int h = 0; h < 2; ++h) first_reader[h] = key[h] < g.seq ? ColumnsBelow<kTile>(key[h], tile) : kTile;
      TANDEM_UNROLL
      for (int j = 0; j < kTile / 8; ++j) {
        TANDEM_UNROLL
        for (int i = 0; i < 4; ++i) {
          const int t = at.Column(j, i);
          const bool reads = t >= first_reader[i / 2] && t < in_tile;
          const float* row_stats = shared.stats + 3 * t;
          const float p = reads ? Exp2(fmaf(st[j][i], scale2, -row_stats[0])) * row_stats[1] : 0.0f;
          st[j][i] = p;
          dpt[j][i] = p * (dpt[j][i] - row_stats[2]);  // dS^T
        }
      }
      Rows pt[kTile / kSide], dst[kTile / kSide];
      RowsFromSums<kTile>(pt, st);
      RowsFromSums<kTile>(dst, dpt);
      AddWeightedRows<W, kTile>(dv_acc, pt, shared.dy);
      __syncthreads();  // every warp is done with dY
      stage_dy(step + 1);
      AddWeightedRows<W, kTile>(dk_acc, dst, shared.queries);
      __syncthreads();  // every warp is done with the queries and statistics
      stage_queries(step + 1);
    }
    WaitCopies<0>();
    StoreRows<W>(dk + (base + warp * kSide) * W, count - warp * kSide, dk_acc, g.scale);
    StoreRows<W>(dv + (base + warp * kSide) * W, count - warp * kSide, dv_acc, 1.0f);
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
  constexpr int kQueryRows = kSide * kQueryGradWarps, kKeys = kSide * kKeyGradWarps;
  const int64_t query_tiles = (g.seq + kQueryRows - 1) / kQueryRows, key_tiles = (g.seq + kKeys - 1) / kKeys;
  const int64_t query_units = batch * g.heads * query_tiles, key_units = batch * g.kv_heads * key_tiles;
  if (cudaError_t error = LaunchUnits(query_units, 32 * kQueryGradWarps, stream, AttentionQueryGradMmaKernel<W, Out>, q,
                                      k, v, dy, dq, stats, g, query_tiles, query_units);
      error != cudaSuccess) {
    return error;
  }
  return LaunchUnits(key_units, 32 * kKeyGradWarps, stream, AttentionKeyGradMmaKernel<W, Out>, q, k, v, dy, stats, dk,
                     dv, g, key_tiles, key_units);
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
