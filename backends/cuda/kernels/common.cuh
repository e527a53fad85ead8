// What the CUDA backend's kernel files share (backends/cuda/kernels/*.cu):
// the launch geometry, grid-stride indexing, strided offsets, the folds in
// a fixed order and the threads a row kernel gives each row. Internal to
// those files: everything here has internal linkage, a copy per file.
//
// Work split: elementwise kernels give one thread an output element; row
// kernels (softmax family, normalization, cross-entropy) give a block a row,
// whose threads share each sum or max over it; reductions give a block one
// output, or 32 neighbouring outputs, whose threads share the reduced
// elements. Those folds run in a fixed tree order (see "Folds in a fixed
// order" below) that depends on the shape alone. Every loop is
// grid-strided, so any grid computes the same values.
//
// The formulas and their rounding order follow backends/cpu/kernels/*.cc; where
// the reference documents a rounding (layer_norm's separate multiply and add),
// __fmul_rn/__fadd_rn keep nvcc from contracting it into an FMA.
#ifndef TANDEM_BACKENDS_CUDA_KERNELS_COMMON_CUH_
#define TANDEM_BACKENDS_CUDA_KERNELS_COMMON_CUH_

#include <cmath>
#include <cstdint>

#ifdef __CUDACC__
#include <cuda_bf16.h>
#endif

#include "backends/cuda/cuda_kernels.cuh"
#include "backends/cuda/kernels/unroll.cuh"

namespace tandem::cuda::kernels {
namespace {


constexpr int kThreads = 256;
// Grid-stride loops cover larger sizes; a bound keeps gridDim.x in range.
constexpr int64_t kMaxBlocks = int64_t{1} << 20;

unsigned BlocksFor(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < kMaxBlocks ? blocks : kMaxBlocks);
}

template <typename Kernel, typename... Args>
cudaError_t Launch(int64_t n, cudaStream_t stream, Kernel kernel, Args... args) {
  if (n <= 0) return cudaSuccess;
  TANDEM_LAUNCH(kernel, BlocksFor(n), kThreads, 0, stream)(args...);
  return cudaGetLastError();
}

__device__ int64_t FirstIndex() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ int64_t GridStride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

// Element i of f32 or bf16 storage, widened exactly to f32; and a value
// stored as f32, or rounded once to the nearest bf16 (ties to even).
__device__ float Load(ElementsIn x, int64_t i) {
  return x.bf16 ? __bfloat162float(static_cast<const __nv_bfloat16*>(x.data)[i]) : static_cast<const float*>(x.data)[i];
}

__device__ void Store(ElementsOut out, int64_t i, float value) {
  if (out.bf16) {
    static_cast<__nv_bfloat16*>(out.data)[i] = __float2bfloat16_rn(value);
  } else {
    static_cast<float*>(out.data)[i] = value;
  }
}

// from[0..4), widened: one 16-byte load (f32) or one 8-byte load (bf16);
// `from` is aligned to it.
__device__ __forceinline__ float4 Load4(const float* from) { return *reinterpret_cast<const float4*>(from); }
__device__ __forceinline__ float WidenBits(unsigned bits) {
  __nv_bfloat16_raw raw;
  raw.x = static_cast<unsigned short>(bits & 0xffffu);
  return __bfloat162float(__nv_bfloat16(raw));
}
__device__ __forceinline__ float4 Load4(const __nv_bfloat16* from) {
  const uint2 bits = *reinterpret_cast<const uint2*>(from);  // elements 0, 1 in .x, 2, 3 in .y (little-endian)
  return make_float4(WidenBits(bits.x), WidenBits(bits.x >> 16), WidenBits(bits.y), WidenBits(bits.y >> 16));
}

// to[0..4) = x, each element rounded once for bf16: one store, aligned as
// Load4's.
__device__ __forceinline__ void Store4(float* to, float4 x) { *reinterpret_cast<float4*>(to) = x; }
__device__ __forceinline__ unsigned NarrowBits(float x) {
  return static_cast<__nv_bfloat16_raw>(__float2bfloat16_rn(x)).x;
}
__device__ __forceinline__ void Store4(__nv_bfloat16* to, float4 x) {
  uint2 bits;
  bits.x = NarrowBits(x.x) | (NarrowBits(x.y) << 16);
  bits.y = NarrowBits(x.z) | (NarrowBits(x.w) << 16);
  *reinterpret_cast<uint2*>(to) = bits;
}

// The element offset of each operand for flat output index `flat`.
__device__ void OffsetsOf(const StridedMap& map, int64_t flat, int64_t* offsets) {
  for (int operand = 0; operand < map.num_operands; ++operand) offsets[operand] = 0;
  for (int axis = map.rank - 1; axis >= 0; --axis) {
    const int64_t extent = map.extents[axis];
    const int64_t index = flat % extent;
    flat /= extent;
    for (int operand = 0; operand < map.num_operands; ++operand) {
      offsets[operand] += index * map.strides[operand][axis];
    }
  }
}

// ---- Folds in a fixed order.
//
// A sum or max over many elements is split between the threads of a block:
// thread t folds the elements t, t + T, t + 2T, ... in increasing order (T
// the threads sharing the fold), and a binary tree then combines the
// threads' partials, partial[t] with partial[t + half] for half = T/2, T/4,
// ..., 1. The order depends on T alone, and the launchers derive T from the
// shape alone, so the bits depend on the inputs and their shape, never on
// scheduling. No atomics.

struct AddOp {
  __device__ float operator()(float a, float b) const { return a + b; }
  static constexpr float kIdentity = 0.0f;
};
// The reference's max: a NaN anywhere wins; ties keep the earlier element.
struct MaxOp {
  __device__ float operator()(float a, float b) const { return (b > a || isnan(b)) ? b : a; }
  static constexpr float kIdentity = -INFINITY;
};

constexpr int kFoldThreads = 256;  // the most threads one fold shares; a power of two

// The tree over the partials of `group` threads, which sit `spacing` apart in
// `scratch` starting at scratch[lane]: thread `lane + t * spacing` holds
// partial t. Every thread of the block calls it (it synchronizes the block);
// the result is left in scratch[lane].
template <typename Op>
__device__ void TreeFold(float* scratch, int lane, int t, int group, int spacing, Op op) {
  for (int half = group / 2; half > 0; half /= 2) {
    if (t < half) scratch[lane + t * spacing] = op(scratch[lane + t * spacing], scratch[lane + (t + half) * spacing]);
    __syncthreads();
  }
}

// The fold of every thread's `mine` over the whole block (blockDim.x, a
// power of two), returned to every thread.
template <typename Op>
__device__ float BlockFold(float mine, float* scratch, Op op) {
  scratch[threadIdx.x] = mine;
  __syncthreads();
  TreeFold(scratch, 0, static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x), 1, op);
  const float total = scratch[0];
  __syncthreads();  // scratch is reused by the next fold
  return total;
}

// take(i, value(i)) for i = first, first + step, ... below end, in that
// order. Values are computed kTermsAhead at a time before they are taken:
// their loads are in flight together, not one after another (the compiler
// would not move a load above a store that may alias it).
constexpr int kTermsAhead = 4;
template <typename Value, typename Take>
__device__ __forceinline__ void EachStrided(int64_t first, int64_t end, int64_t step, Value value, Take take) {
  int64_t i = first;
  for (; i + (kTermsAhead - 1) * step < end; i += kTermsAhead * step) {
    float values[kTermsAhead];
    TANDEM_UNROLL
    for (int k = 0; k < kTermsAhead; ++k) values[k] = value(i + k * step);
    TANDEM_UNROLL
    for (int k = 0; k < kTermsAhead; ++k) take(i + k * step, values[k]);
  }
  for (; i < end; i += step) take(i, value(i));
}

// The fold of term(i) for i = first, first + step, ... below end, in that
// order (EachStrided's).
template <typename Op, typename Term>
__device__ __forceinline__ float FoldStrided(int64_t first, int64_t end, int64_t step, Op op, Term term) {
  float acc = Op::kIdentity;
  EachStrided(first, end, step, term, [&](int64_t, float t) { acc = op(acc, t); });
  return acc;
}

// This thread's share of a row: the fold of x[i] (or of f(i)) for i = t,
// t + blockDim.x, ...
template <typename Op, typename Term>
__device__ float ShareOf(int64_t length, Op op, Term term) {
  return FoldStrided(threadIdx.x, length, blockDim.x, op, term);
}

// put(i, value(i)) for this thread's elements of a row, i = t, t +
// blockDim.x, ... below length (EachStrided's order).
template <typename Value, typename Put>
__device__ __forceinline__ void MapShare(int64_t length, Value value, Put put) {
  EachStrided(threadIdx.x, length, blockDim.x, value, put);
}

// The threads a row kernel gives each row: enough to cover short rows with
// one warp, up to kFoldThreads for long ones. A function of the length
// alone (the fold order depends on it).
int RowThreads(int64_t length) {
  if (length <= 256) return 32;
  if (length <= 2048) return 128;
  return kFoldThreads;
}

unsigned RowBlocks(int64_t rows) { return static_cast<unsigned>(rows < kMaxBlocks ? rows : kMaxBlocks); }

// Whether `pointer` may be read or written 16 bytes at a time (float4, uint4).
bool Aligned16(const void* pointer) { return reinterpret_cast<uintptr_t>(pointer) % 16 == 0; }

}  // namespace
}  // namespace tandem::cuda::kernels

#endif  // TANDEM_BACKENDS_CUDA_KERNELS_COMMON_CUH_
