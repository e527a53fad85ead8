// A warp's tensor-core products at the PTX level (sm_80 and later), for
// kernels that keep a product's result in registers as the next product's
// operand (FlashAttention-2's weights): mma.sync m16n8k16 on bf16 operands
// with f32 accumulators, the ldmatrix loads that feed it from shared
// memory, and cp.async copies from device to shared memory. Under nvcc
// each is its one instruction; on the CPU (cuda_on_cpu.h) the products and
// loads are warp collectives in the same register layouts and the copies
// are plain copies (they complete at once, which is one of the orders the
// GPU allows).
//
// The register layouts (the PTX ISA's, "Matrix Fragments for mma.m16n8k16
// with floating point type"): lane L, group g = L / 4, t = L % 4.
//  - A [16 x 16] (Rows): 4 words of 2 bf16 each: a[0] row g, columns 2t and
//    2t + 1; a[1] row g + 8, the same columns; a[2] and a[3] as a[0] and
//    a[1] at columns 8 on.
//  - B [16 x 8] (two words): b[0] rows (depth) 2t and 2t + 1 of column g,
//    b[1] rows 2t + 8 and 2t + 9.
//  - C [16 x 8] (Sums, 4 f32): c[0], c[1] row g, columns 2t, 2t + 1; c[2],
//    c[3] row g + 8, the same columns.
// So the C tiles of columns 16k..16k+7 and 16k+8..16k+15, packed to bf16,
// are the A operand of depth 16k..16k+15 (RowsFromSums): a product's rows
// feed the next product without leaving the registers.
// An ldmatrix x4 loads four 8 x 8 matrices of bf16: lanes 8i..8i+7 give
// the addresses of rows 0..7 of matrix i (16-byte aligned), and lane L
// receives word i = row g, columns 2t and 2t + 1 of matrix i (transposed:
// rows 2t and 2t + 1 of column g).
//
// On those, the tile level (below): staging [rows, W] bf16 tiles with
// cp.async, a warp's 16 rows times a staged tile (as it is, or
// transposed), and an accumulator's rows scaled, folded across their four
// lanes and stored.
#ifndef TANDEM_BACKENDS_CUDA_KERNELS_WARP_MMA_CUH_
#define TANDEM_BACKENDS_CUDA_KERNELS_WARP_MMA_CUH_

#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#include <cuda_bf16.h>
#endif

#include "backends/cuda/kernels/unroll.cuh"

namespace tandem::cuda::kernels {
namespace {
namespace warp_mma {

using bf16 = __nv_bfloat16;
using Rows = uint32_t[4];  // an A operand
using Sums = float[4];     // a C accumulator

// d += a b, b = {b0, b1}.
__device__ __forceinline__ void Mma(Sums& d, const Rows& a, uint32_t b0, uint32_t b1) {
#ifdef __CUDACC__
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  tandem::cuda_on_cpu::WarpMmaM16N8K16(d, a, b0, b1);
#endif
}

// ldmatrix x4 from shared memory: `row` is this lane's row address (see
// the header comment).
__device__ __forceinline__ void LoadMatrices(uint32_t (&r)[4], const bf16* row) {
#ifdef __CUDACC__
  const auto address = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
#else
  tandem::cuda_on_cpu::WarpLoadMatrices(r, row, /*transposed=*/false);
#endif
}
__device__ __forceinline__ void LoadMatricesTransposed(uint32_t (&r)[4], const bf16* row) {
#ifdef __CUDACC__
  const auto address = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
#else
  tandem::cuda_on_cpu::WarpLoadMatrices(r, row, /*transposed=*/true);
#endif
}

// 16 bytes from device memory to shared memory (both 16-byte aligned),
// asynchronously: visible to the block after WaitCopies and a barrier.
// Copies are committed in groups; WaitCopies<N> waits until at most N of
// the thread's latest groups are in flight.
__device__ __forceinline__ void CopyAsync16(void* shared, const void* from) {
#ifdef __CUDACC__
  const auto address = static_cast<unsigned>(__cvta_generic_to_shared(shared));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(address), "l"(from));
#else
  std::memcpy(shared, from, 16);
#endif
}
// The same for 4 bytes (both 4-byte aligned).
__device__ __forceinline__ void CopyAsync4(void* shared, const void* from) {
#ifdef __CUDACC__
  const auto address = static_cast<unsigned>(__cvta_generic_to_shared(shared));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(address), "l"(from));
#else
  std::memcpy(shared, from, 4);
#endif
}
__device__ __forceinline__ void CommitCopies() {
#ifdef __CUDACC__
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}
template <int N>
__device__ __forceinline__ void WaitCopies() {
#ifdef __CUDACC__
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

// Two f32 rounded to bf16 (to nearest even), `low` in the low half.
// One instruction on the GPU (cvt.rn.bf16x2.f32).
__device__ __forceinline__ uint32_t PackBf16(float low, float high) {
  const __nv_bfloat162 two = __floats2bfloat162_rn(low, high);
  uint32_t bits;
  std::memcpy(&bits, &two, sizeof bits);
  return bits;
}
// A bf16 half of a word, widened.
__device__ __forceinline__ float WidenHalf(uint32_t word, int half) {
  __nv_bfloat16_raw raw;
  raw.x = static_cast<unsigned short>(half == 0 ? word & 0xffffu : word >> 16);
  return __bfloat162float(__nv_bfloat16(raw));
}

__device__ __forceinline__ int Lane() { return static_cast<int>(threadIdx.x) % 32; }

// A operand: rows r0..r0+15, columns c0..c0+15 of a row-major bf16 tile
// in shared memory with rows of `stride` elements.
__device__ __forceinline__ void LoadRows(Rows& a, const bf16* tile, int stride, int r0, int c0) {
  const int lane = Lane(), matrix = lane / 8;
  LoadMatrices(a, tile + (r0 + (matrix % 2) * 8 + lane % 8) * stride + c0 + (matrix / 2) * 8);
}
// B operands of two n8 tiles of a product with a transposed tile: B[k][n] =
// tile[n0 + n][c0 + k], k < 16, n < 16; b[0], b[1] the columns n0..n0+7,
// b[2], b[3] the next 8.
__device__ __forceinline__ void LoadTransposedColumns(uint32_t (&b)[4], const bf16* tile, int stride, int n0, int c0) {
  const int lane = Lane(), matrix = lane / 8;
  LoadMatrices(b, tile + (n0 + (matrix / 2) * 8 + lane % 8) * stride + c0 + (matrix % 2) * 8);
}
// B operands of two n8 tiles of a product with a tile as it is: B[k][n] =
// tile[k0 + k][n0 + n], laid out as LoadTransposedColumns'.
__device__ __forceinline__ void LoadColumns(uint32_t (&b)[4], const bf16* tile, int stride, int k0, int n0) {
  const int lane = Lane(), matrix = lane / 8;
  LoadMatricesTransposed(b, tile + (k0 + (matrix % 2) * 8 + lane % 8) * stride + n0 + (matrix / 2) * 8);
}

// The A operands of a [16 x kColumns] product held as C tiles (s[j] the
// columns 8j..8j+7), rounded to bf16 (see the header comment).
template <int kColumns>
__device__ __forceinline__ void RowsFromSums(Rows (&a)[kColumns / 16], const Sums (&s)[kColumns / 8]) {
  TANDEM_UNROLL
  for (int k = 0; k < kColumns / 16; ++k) {
    a[k][0] = PackBf16(s[2 * k][0], s[2 * k][1]);
    a[k][1] = PackBf16(s[2 * k][2], s[2 * k][3]);
    a[k][2] = PackBf16(s[2 * k + 1][0], s[2 * k + 1][1]);
    a[k][3] = PackBf16(s[2 * k + 1][2], s[2 * k + 1][3]);
  }
}

template <int kCount>
__device__ __forceinline__ void Zero(Sums (&s)[kCount]) {
  TANDEM_UNROLL
  for (int j = 0; j < kCount; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
}

// ---- Tile products: a warp's 16 rows against tiles the block stages in
// shared memory (rows padded by 16 bytes: ldmatrix's eight 16-byte rows
// then fall in different banks), W columns wide (a multiple of 16).

constexpr int kSide = 16;  // an A operand's rows: the rows a warp owns
// Shared rows of a staged [rows, W] bf16 tile, padded by 16 bytes.
template <int W>
constexpr int kStride = W + 8;

// The calling thread's warp in its block.
__device__ __forceinline__ int WarpOf() { return static_cast<int>(threadIdx.x) / 32; }

// The lane's place in an accumulator tile: rows g and g + 8 (half h = 0, 1),
// columns 2t and 2t + 1 of each n8 tile.
struct LanePlace {
  int g, t;
  __device__ int Row(int half) const { return g + 8 * half; }
  // Column of element i (0..3) of accumulator tile j.
  __device__ int Column(int j, int i) const { return 8 * j + 2 * t + i % 2; }
};
__device__ __forceinline__ LanePlace LanePlaceOf() { return {Lane() / 4, Lane() % 4}; }
// Folds over the four lanes of a row (xor 1, then 2): the same bits in all four.
__device__ __forceinline__ float QuadMax(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float QuadSum(float x) {
  x = x + __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// Rows [0, kRows) of a [rows, W] bf16 matrix `from` copied to `to` (rows of
// kStride<W>) by the block's kThreads threads, asynchronously, 16 bytes a
// copy; rows from `count` on are zeros (stored at once). The caller
// commits, waits and syncs.
template <int W, int kRows, int kThreads>
__device__ __forceinline__ void CopyRows(bf16* to, const bf16* from, int64_t count) {
  constexpr int kPieces = kRows * W / 8;
  static_assert(kPieces % kThreads == 0, "every thread copies as many pieces");
  TANDEM_UNROLL
  for (int i = 0; i < kPieces / kThreads; ++i) {
    const int piece = static_cast<int>(threadIdx.x) + i * kThreads;
    const int row = piece / (W / 8), column = 8 * (piece % (W / 8));
    bf16* at = to + row * kStride<W> + column;
    if (row < count) {
      CopyAsync16(at, from + static_cast<int64_t>(row) * W + column);
    } else {
      *reinterpret_cast<uint4*>(at) = make_uint4(0u, 0u, 0u, 0u);
    }
  }
}

// A warp's 16 rows of a staged tile as A operands over all W columns.
template <int W>
__device__ __forceinline__ void LoadOperandRows(Rows (&a)[W / kSide], const bf16* tile, int first_row) {
  TANDEM_UNROLL
  for (int d = 0; d < W / kSide; ++d) LoadRows(a[d], tile, kStride<W>, first_row, kSide * d);
}

// s = a b^T: a the warp's 16 rows (A operands over W), b kCols staged rows;
// s[j] holds columns 8j..8j+7.
template <int W, int kCols>
__device__ __forceinline__ void ProductWithTransposed(Sums (&s)[kCols / 8], const Rows (&a)[W / kSide], const bf16* b) {
  Zero(s);
  TANDEM_UNROLL
  for (int d = 0; d < W / kSide; ++d) {
    TANDEM_UNROLL
    for (int n = 0; n < kCols / kSide; ++n) {
      uint32_t columns[4];
      LoadTransposedColumns(columns, b, kStride<W>, kSide * n, kSide * d);
      Mma(s[2 * n], a[d], columns[0], columns[1]);
      Mma(s[2 * n + 1], a[d], columns[2], columns[3]);
    }
  }
}
// Two such products side by side, s = a b^T and s2 = a2 b2^T, their
// products interleaved (twice the independent tensor-core work in flight):
// rows_of(p, d, rows) gives product p's A operand of depth 16d.
template <int W, int kCols, typename RowsOf>
__device__ __forceinline__ void TwoProductsWithTransposed(Sums (&s)[kCols / 8], Sums (&s2)[kCols / 8],
                                                          const RowsOf& rows_of, const bf16* b, const bf16* b2) {
  Zero(s);
  Zero(s2);
  TANDEM_UNROLL
  for (int d = 0; d < W / kSide; ++d) {
    Rows rows, rows2;
    rows_of(0, d, rows);
    rows_of(1, d, rows2);
    TANDEM_UNROLL
    for (int n = 0; n < kCols / kSide; ++n) {
      uint32_t columns[4], columns2[4];
      LoadTransposedColumns(columns, b, kStride<W>, kSide * n, kSide * d);
      LoadTransposedColumns(columns2, b2, kStride<W>, kSide * n, kSide * d);
      Mma(s[2 * n], rows, columns[0], columns[1]);
      Mma(s2[2 * n], rows2, columns2[0], columns2[1]);
      Mma(s[2 * n + 1], rows, columns[2], columns[3]);
      Mma(s2[2 * n + 1], rows2, columns2[2], columns2[3]);
    }
  }
}

// acc += w b: w the warp's [16, kDepth] weights as A operands, b kDepth
// staged rows of W columns; acc[j] holds columns 8j..8j+7.
template <int W, int kDepth>
__device__ __forceinline__ void AddWeightedRows(Sums (&acc)[W / 8], const Rows (&w)[kDepth / kSide], const bf16* b) {
  TANDEM_UNROLL
  for (int k = 0; k < kDepth / kSide; ++k) {
    TANDEM_UNROLL
    for (int n = 0; n < W / kSide; ++n) {
      uint32_t columns[4];
      LoadColumns(columns, b, kStride<W>, kSide * k, kSide * n);
      Mma(acc[2 * n], w[k], columns[0], columns[1]);
      Mma(acc[2 * n + 1], w[k], columns[2], columns[3]);
    }
  }
}

// acc's rows (half h: the lane's row g + 8h) times factor[h].
template <int kCount>
__device__ __forceinline__ void ScaleRows(Sums (&acc)[kCount], const float (&factor)[2]) {
  TANDEM_UNROLL
  for (int j = 0; j < kCount; ++j) {
    TANDEM_UNROLL
    for (int i = 0; i < 4; ++i) acc[j][i] *= factor[i / 2];
  }
}

// Two neighbouring elements stored (f32, or rounded to bf16).
__device__ __forceinline__ void StorePair(float* to, float a, float b) {
  *reinterpret_cast<float2*>(to) = make_float2(a, b);
}
__device__ __forceinline__ void StorePair(bf16* to, float a, float b) {
  *reinterpret_cast<uint32_t*>(to) = PackBf16(a, b);
}

// The warp's 16 rows of acc times `factor` into to[row * W + column], rows
// below `valid`.
template <int W, typename Out>
__device__ __forceinline__ void StoreRows(Out* to, int64_t valid, const Sums (&acc)[W / 8], float factor) {
  const LanePlace at = LanePlaceOf();
  TANDEM_UNROLL
  for (int h = 0; h < 2; ++h) {
    if (at.Row(h) >= valid) continue;
    TANDEM_UNROLL
    for (int j = 0; j < W / 8; ++j) {
      StorePair(to + at.Row(h) * W + at.Column(j, 0), acc[j][2 * h] * factor, acc[j][2 * h + 1] * factor);
    }
  }
}

}  // namespace warp_mma
}  // namespace
}  // namespace tandem::cuda::kernels

#endif  // TANDEM_BACKENDS_CUDA_KERNELS_WARP_MMA_CUH_
