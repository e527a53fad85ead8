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

}  // namespace warp_mma
}  // namespace
}  // namespace tandem::cuda::kernels

#endif  // TANDEM_BACKENDS_CUDA_KERNELS_WARP_MMA_CUH_
