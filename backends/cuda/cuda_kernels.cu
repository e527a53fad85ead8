// The device kernels of the CUDA backend (see cuda_kernels.cuh): one kernel
// per op family with a switch on the op, and their launchers.
//
// Work split: elementwise kernels give one thread an output element; row
// kernels (softmax family, normalization, cross-entropy) give a block a row,
// whose threads share each sum or max over it; reductions give a block one
// output, or 32 neighbouring outputs, whose threads share the reduced
// elements. Those folds run in a fixed tree order (see "Folds in a fixed
// order" below) that depends on the shape alone. The embedding gradient
// sorts the ids stably and sums each id's rows in position order. Every
// loop is grid-strided, so any grid computes the same values.
//
// The formulas and their rounding order follow backends/cpu/kernels/*.cc; where
// the reference documents a rounding (layer_norm's separate multiply and add),
// __fmul_rn/__fadd_rn keep nvcc from contracting it into an FMA.
#ifdef __CUDACC__
#include <cuda_bf16.h>

#include <cub/device/device_radix_sort.cuh>
#else
#include <algorithm>
#include <numeric>
#endif

#include <cmath>
#include <cstdint>

#include "backends/cuda/cuda_kernels.cuh"

namespace tandem::cuda::kernels {
namespace {

constexpr int kThreads = 256;
// Grid-stride loops cover larger sizes; a bound keeps gridDim.x in range.
constexpr int64_t kMaxBlocks = int64_t{1} << 20;

// sqrt(2/pi) and the cubic coefficient of GELU's tanh approximation, the
// reference's f32 constants.
constexpr float kGeluScale = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;

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

__device__ float Tanh(float x) { return tanhf(x); }

// 1 / (1 + e^-x), through e^x for x < 0 so that no e^|x| overflows.
__device__ float Sigmoid(float x) {
  if (x >= 0.0f) return 1.0f / (1.0f + expf(-x));
  const float e = expf(x);
  return e / (1.0f + e);
}

__device__ float ApplyUnary(ir::OpKind op, float x) {
  switch (op) {
    case ir::OpKind::kNeg:
      return -x;
    case ir::OpKind::kExp:
      return expf(x);
    case ir::OpKind::kExpm1:
      return expm1f(x);
    case ir::OpKind::kLog:
      return logf(x);
    case ir::OpKind::kTanh:
      return Tanh(x);
    case ir::OpKind::kSin:
      return static_cast<float>(sin(static_cast<double>(x)));  // as the reference: double, rounded
    case ir::OpKind::kCos:
      return static_cast<float>(cos(static_cast<double>(x)));
    case ir::OpKind::kSqrt:
      return sqrtf(x);
    case ir::OpKind::kRsqrt:
      return 1.0f / sqrtf(x);  // IEEE division of the rounded root, as the reference; never rsqrtf
    case ir::OpKind::kRelu:
      return x < 0.0f ? 0.0f : x;  // NaN passes through
    case ir::OpKind::kGelu: {
      const float inner = kGeluScale * (x + kGeluCubic * x * x * x);
      return 0.5f * x * (1.0f + Tanh(inner));
    }
    case ir::OpKind::kSilu:
      return x * Sigmoid(x);
    default:  // not unary: the runner never launches it
      return x;
  }
}

__device__ float ApplyBinary(ir::OpKind op, float x, float y) {
  switch (op) {
    case ir::OpKind::kAdd:
      return x + y;
    case ir::OpKind::kSub:
      return x - y;
    case ir::OpKind::kMul:
      return x * y;
    case ir::OpKind::kDiv:
      return x / y;
    case ir::OpKind::kPow:
      return powf(x, y);
    case ir::OpKind::kMaximum:
      return (x >= y || isnan(x)) ? x : y;  // NaN on either side wins; x on ties
    case ir::OpKind::kEqual:
      return x == y ? 1.0f : 0.0f;
    case ir::OpKind::kGeluGrad: {
      // y is dy; the exact derivative of the tanh approximation.
      const float x2 = x * x;
      const float t = Tanh(kGeluScale * (x + kGeluCubic * x2 * x));
      const float d_inner = kGeluScale * (1.0f + 3.0f * kGeluCubic * x2);
      const float derivative = 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * d_inner;
      return y * derivative;
    }
    case ir::OpKind::kSiluGrad: {
      const float sigmoid = Sigmoid(x);
      return y * (sigmoid * (1.0f + x * (1.0f - sigmoid)));
    }
    case ir::OpKind::kReluGrad:
      return x > 0.0f ? y : 0.0f;
    default:  // not binary: the runner never launches it
      return x;
  }
}

// ---- Elementwise.

__global__ void FillKernel(uint32_t bits, uint32_t* out, int64_t n) {
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) out[i] = bits;
}

__global__ void UnaryKernel(ir::OpKind op, const float* x, float* out, int64_t n) {
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) out[i] = ApplyUnary(op, x[i]);
}

__global__ void BinaryKernel(ir::OpKind op, const float* x, const float* y, float* out,
                             StridedMap map, int64_t n) {
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) {
    int64_t offsets[kMaxOperands];
    OffsetsOf(map, i, offsets);
    out[i] = ApplyBinary(op, x[offsets[0]], y[offsets[1]]);
  }
}

// The contiguous case of BinaryKernel: each operand either row-major over
// the output (step 1) or one value (step 0), so no per-axis div/mod.
__global__ void FlatBinaryKernel(ir::OpKind op, const float* x, int64_t x_step, const float* y, int64_t y_step,
                                 float* out, int64_t n) {
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) out[i] = ApplyBinary(op, x[i * x_step], y[i * y_step]);
}

__global__ void WhereKernel(const float* cond, const float* x, const float* y, float* out,
                            StridedMap map, int64_t n) {
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) {
    int64_t offsets[kMaxOperands];
    OffsetsOf(map, i, offsets);
    out[i] = cond[offsets[0]] != 0.0f ? x[offsets[1]] : y[offsets[2]];
  }
}

__device__ int32_t TruncateToInt32(float value) {
  if (isnan(value)) return 0;
  if (value >= 2147483648.0f) return INT32_MAX;
  if (value < -2147483648.0f) return INT32_MIN;
  return static_cast<int32_t>(value);
}

__global__ void ConvertKernel(ConvertOp op, const void* in, void* out, int64_t n) {
  const auto* f32_in = static_cast<const float*>(in);
  const auto* i32_in = static_cast<const int32_t*>(in);
  const auto* bf16_in = static_cast<const __nv_bfloat16*>(in);
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) {
    switch (op) {
      case ConvertOp::kF32ToI32:
        static_cast<int32_t*>(out)[i] = TruncateToInt32(f32_in[i]);
        break;
      case ConvertOp::kI32ToF32:
        static_cast<float*>(out)[i] = static_cast<float>(i32_in[i]);
        break;
      case ConvertOp::kF32ToBf16:
        static_cast<__nv_bfloat16*>(out)[i] = __float2bfloat16_rn(f32_in[i]);
        break;
      case ConvertOp::kBf16ToF32:
        static_cast<float*>(out)[i] = __bfloat162float(bf16_in[i]);
        break;
      case ConvertOp::kBf16ToI32:
        static_cast<int32_t*>(out)[i] = TruncateToInt32(__bfloat162float(bf16_in[i]));
        break;
      case ConvertOp::kI32ToBf16:
        static_cast<__nv_bfloat16*>(out)[i] = __float2bfloat16_rn(static_cast<float>(i32_in[i]));
        break;
    }
  }
}

__global__ void ToBf16Kernel(const float* in, __nv_bfloat16* out, int64_t n) {
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) out[i] = __float2bfloat16_rn(in[i]);
}

// ---- Data movement: elements of type T (uint16_t or uint32_t) moved as bits.

template <typename T>
__global__ void GatherKernel(const T* in, T* out, StridedMap map, int64_t n) {
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) {
    int64_t offset;
    OffsetsOf(map, i, &offset);
    out[i] = in[offset];
  }
}

template <typename T>
__global__ void CopyRowsKernel(const T* src, int64_t src_row_stride, T* dst,
                               int64_t dst_row_stride, int64_t row_length, int64_t n) {
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) {
    const int64_t row = i / row_length;
    const int64_t column = i % row_length;
    dst[row * dst_row_stride + column] = src[row * src_row_stride + column];
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

// This thread's share of a row: the fold of x[i] (or of f(i)) for i = t,
// t + blockDim.x, ...
template <typename Op, typename Term>
__device__ float ShareOf(int64_t length, Op op, Term term) {
  float acc = Op::kIdentity;
  for (int64_t i = threadIdx.x; i < length; i += blockDim.x) acc = op(acc, term(i));
  return acc;
}

// ---- Reductions: a block folds `outputs_per_block` consecutive outputs,
// kFoldThreads / outputs_per_block threads each. Outputs that lie next to
// each other in the input (a bias gradient: columns summed over rows) take
// 32 per block, so a warp reads 32 neighbours; outputs whose reduced
// elements lie next to each other (a row sum) take one per block, so the
// block reads along the row.

__device__ int64_t ReducedOffset(const ReductionPlan& plan, int64_t r) {
  int64_t offset = 0;
  for (int axis = plan.reduced_rank - 1; axis >= 0; --axis) {
    const int64_t extent = plan.reduced_extents[axis];
    offset += (r % extent) * plan.reduced_strides[axis];
    r /= extent;
  }
  return offset;
}

// Output o's fold over its reduced elements [chunk * chunk_length,
// (chunk + 1) * chunk_length) in each of `chunks` chunks, into
// out[o * chunks + chunk] (divided by the mean's count when `mean`, which
// only a single chunk asks for). A work item is one (outputs, chunk) pair.
template <typename Op>
__global__ void ReduceKernel(const float* x, float* out, ReductionPlan plan, int outputs_per_block,
                             int64_t chunks, int64_t chunk_length, bool mean, Op op) {
  __shared__ float scratch[kFoldThreads];
  const int lane = static_cast<int>(threadIdx.x) % outputs_per_block;
  const int t = static_cast<int>(threadIdx.x) / outputs_per_block;
  const int group = static_cast<int>(blockDim.x) / outputs_per_block;
  int64_t reduced_total = 1;
  for (int axis = 0; axis < plan.reduced_rank; ++axis) reduced_total *= plan.reduced_extents[axis];
  const int64_t output_groups = (plan.num_outputs + outputs_per_block - 1) / outputs_per_block;
  // The loop bound is the same for the whole block, so every thread reaches
  // every __syncthreads.
  for (int64_t item = blockIdx.x; item < output_groups * chunks; item += gridDim.x) {
    const int64_t chunk = item % chunks;
    const int64_t o = (item / chunks) * outputs_per_block + lane;
    const int64_t begin = chunk * chunk_length;
    const int64_t end = begin + chunk_length < reduced_total ? begin + chunk_length : reduced_total;
    float acc = Op::kIdentity;
    if (o < plan.num_outputs) {
      int64_t base;
      OffsetsOf(plan.kept, o, &base);
      for (int64_t r = begin + t; r < end; r += group) acc = op(acc, x[base + ReducedOffset(plan, r)]);
    }
    scratch[threadIdx.x] = acc;
    __syncthreads();
    TreeFold(scratch, lane, t, group, outputs_per_block, op);
    if (t == 0 && o < plan.num_outputs) {
      out[o * chunks + chunk] = mean ? scratch[lane] / plan.reduced_count : scratch[lane];
    }
    __syncthreads();
  }
}

// ---- Rows over the last axis: a block per row (grid-strided over rows),
// blockDim.x threads sharing each of the row's folds.

__global__ void RowsKernel(RowOp op, const float* x, const float* dy, float* out, int64_t rows,
                           int64_t length) {
  __shared__ float scratch[kFoldThreads];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* x_row = x + r * length;
    float* out_row = out + r * length;
    const float* dy_row = dy == nullptr ? nullptr : dy + r * length;
    switch (op) {
      case RowOp::kSoftmax: {
        const float max = BlockFold(ShareOf(length, MaxOp(), [&](int64_t i) { return x_row[i]; }), scratch, MaxOp());
        float share = 0.0f;
        for (int64_t i = threadIdx.x; i < length; i += blockDim.x) {
          out_row[i] = expf(x_row[i] - max);
          share += out_row[i];
        }
        const float sum = BlockFold(share, scratch, AddOp());
        for (int64_t i = threadIdx.x; i < length; i += blockDim.x) out_row[i] = out_row[i] / sum;
        break;
      }
      case RowOp::kLogSoftmax: {
        const float max = BlockFold(ShareOf(length, MaxOp(), [&](int64_t i) { return x_row[i]; }), scratch, MaxOp());
        const float sum =
            BlockFold(ShareOf(length, AddOp(), [&](int64_t i) { return expf(x_row[i] - max); }), scratch, AddOp());
        const float log_sum = logf(sum);
        for (int64_t i = threadIdx.x; i < length; i += blockDim.x) out_row[i] = (x_row[i] - max) - log_sum;
        break;
      }
      case RowOp::kSoftmaxGrad: {
        // x is y = softmax(.): dx = y * (dy - sum(dy * y)).
        const float dot =
            BlockFold(ShareOf(length, AddOp(), [&](int64_t i) { return dy_row[i] * x_row[i]; }), scratch, AddOp());
        for (int64_t i = threadIdx.x; i < length; i += blockDim.x) out_row[i] = x_row[i] * (dy_row[i] - dot);
        break;
      }
      case RowOp::kLogSoftmaxGrad: {
        // x is y = log_softmax(.): dx = dy - exp(y) * sum(dy).
        const float sum = BlockFold(ShareOf(length, AddOp(), [&](int64_t i) { return dy_row[i]; }), scratch, AddOp());
        for (int64_t i = threadIdx.x; i < length; i += blockDim.x) out_row[i] = dy_row[i] - expf(x_row[i]) * sum;
        break;
      }
    }
  }
}

// mean and rstd = 1 / sqrt(var + eps) of a row, var biased.
struct RowMoments {
  float mean;
  float rstd;
};
__device__ RowMoments MomentsOf(const float* x, int64_t n, float eps, float* scratch) {
  const float count = static_cast<float>(n);
  const float mean = BlockFold(ShareOf(n, AddOp(), [&](int64_t i) { return x[i]; }), scratch, AddOp()) / count;
  const float squares = BlockFold(ShareOf(n, AddOp(),
                                          [&](int64_t i) {
                                            const float centered = x[i] - mean;
                                            return centered * centered;
                                          }),
                                  scratch, AddOp());
  return {mean, 1.0f / sqrtf(squares / count + eps)};
}

__global__ void NormalizationKernel(NormOp op, const float* x, const float* second,
                                    const float* beta, float* out, int64_t rows, int64_t length,
                                    float eps) {
  __shared__ float scratch[kFoldThreads];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* x_row = x + r * length;
    float* out_row = out + r * length;
    const RowMoments moments = MomentsOf(x_row, length, eps, scratch);
    switch (op) {
      case NormOp::kNormalize:
        for (int64_t i = threadIdx.x; i < length; i += blockDim.x) {
          out_row[i] = (x_row[i] - moments.mean) * moments.rstd;
        }
        break;
      case NormOp::kLayerNorm:
        // second is gamma: xhat * gamma rounded, then + beta rounded.
        for (int64_t i = threadIdx.x; i < length; i += blockDim.x) {
          const float xhat = (x_row[i] - moments.mean) * moments.rstd;
          out_row[i] = __fadd_rn(__fmul_rn(xhat, second[i]), beta[i]);
        }
        break;
      case NormOp::kNormalizeGrad: {
        // second is dy: dx = rstd * ((dy - mean(dy)) - xhat * mean(dy * xhat)).
        const float* dy_row = second + r * length;
        const float count = static_cast<float>(length);
        const auto xhat = [&](int64_t i) { return (x_row[i] - moments.mean) * moments.rstd; };
        const float dy_mean =
            BlockFold(ShareOf(length, AddOp(), [&](int64_t i) { return dy_row[i]; }), scratch, AddOp()) / count;
        const float dy_xhat_mean =
            BlockFold(ShareOf(length, AddOp(), [&](int64_t i) { return dy_row[i] * xhat(i); }), scratch, AddOp()) /
            count;
        for (int64_t i = threadIdx.x; i < length; i += blockDim.x) {
          out_row[i] = moments.rstd * ((dy_row[i] - dy_mean) - xhat(i) * dy_xhat_mean);
        }
        break;
      }
    }
  }
}

__global__ void CausalMaskKernel(const float* x, float* out, int64_t rows, int64_t cols,
                                 float fill, int64_t n) {
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) {
    const int64_t column = i % cols;
    const int64_t row = (i / cols) % rows;
    out[i] = column <= row ? x[i] : fill;
  }
}

// ---- Ids and labels.

constexpr int kCheckThreads = 256;  // a power of two: the tree below halves it

// One block: each thread finds the first bad index of its strided share, in
// increasing order, then a fixed tree takes the minimum. The minimum does
// not depend on scheduling, so neither does the answer.
__global__ void FindFirstOutOfRangeKernel(const int32_t* values, int64_t n, int64_t limit,
                                          RangeCheckResult* result) {
  __shared__ int64_t first[kCheckThreads];
  int64_t mine = n;
  for (int64_t i = threadIdx.x; i < n; i += kCheckThreads) {
    const int32_t v = values[i];
    if (v < 0 || v >= limit) {
      mine = i;
      break;
    }
  }
  first[threadIdx.x] = mine;
  __syncthreads();
  for (unsigned half = kCheckThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half && first[threadIdx.x + half] < first[threadIdx.x]) {
      first[threadIdx.x] = first[threadIdx.x + half];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const int64_t position = first[0];
    result->position = position < n ? position : -1;
    result->value = position < n ? values[position] : 0;
    result->unused = 0;
  }
}

// The max of a row and the sum of exp(x - max) over it, folded by the block.
struct RowExpSum {
  float max;
  float sum;
};
__device__ RowExpSum ExpSumOf(const float* x, int64_t n, float* scratch) {
  const float max = BlockFold(ShareOf(n, MaxOp(), [&](int64_t i) { return x[i]; }), scratch, MaxOp());
  const float sum = BlockFold(ShareOf(n, AddOp(), [&](int64_t i) { return expf(x[i] - max); }), scratch, AddOp());
  return {max, sum};
}

// A block per row, as the row kernels.
__global__ void CrossEntropyKernel(const float* logits, const int32_t* labels, float* loss,
                                   int64_t rows, int64_t classes) {
  __shared__ float scratch[kFoldThreads];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* row = logits + r * classes;
    const int32_t label = labels[r];
    const RowExpSum stats = ExpSumOf(row, classes, scratch);
    if (threadIdx.x == 0) {
      loss[r] = (label < 0 || label >= classes) ? NAN : logf(stats.sum) - (row[label] - stats.max);
    }
  }
}

__global__ void CrossEntropyGradKernel(const float* logits, const int32_t* labels, const float* dy,
                                       float* out, int64_t rows, int64_t classes) {
  __shared__ float scratch[kFoldThreads];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* row = logits + r * classes;
    float* grad = out + r * classes;
    const int32_t label = labels[r];
    const RowExpSum stats = ExpSumOf(row, classes, scratch);
    const float scale = dy[r];
    for (int64_t i = threadIdx.x; i < classes; i += blockDim.x) {
      const float probability = expf(row[i] - stats.max) / stats.sum;
      const float target = i == label ? 1.0f : 0.0f;
      grad[i] = (probability - target) * scale;
    }
  }
}

__global__ void EmbeddingKernel(const float* table, const int32_t* ids, float* out,
                                int64_t num_rows, int64_t width, int64_t n) {
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) {
    const int64_t position = i / width;
    const int64_t column = i % width;
    const int32_t id = ids[position];
    out[i] = (id >= 0 && id < num_rows) ? table[id * width + column] : 0.0f;
  }
}

// The embedding gradient from the ids sorted stably (so each id's positions
// stay in position order): a block per run of equal ids sums its dy rows
// in position order, the reference's order, into that id's output row.
// Blocks whose sorted index does not start a run, and runs of out-of-range
// ids, write nothing (the output was zeroed first).
__global__ void EmbeddingGradRunsKernel(const int32_t* sorted_ids, const int32_t* sorted_positions,
                                        const float* dy, float* out, int64_t positions, int64_t num_rows,
                                        int64_t width) {
  for (int64_t i = blockIdx.x; i < positions; i += gridDim.x) {
    const int32_t id = sorted_ids[i];
    if ((i > 0 && sorted_ids[i - 1] == id) || id < 0 || id >= num_rows) continue;
    for (int64_t column = threadIdx.x; column < width; column += blockDim.x) {
      float acc = 0.0f;
      for (int64_t j = i; j < positions && sorted_ids[j] == id; ++j) {
        acc += dy[static_cast<int64_t>(sorted_positions[j]) * width + column];
      }
      out[static_cast<int64_t>(id) * width + column] = acc;
    }
  }
}

__global__ void IotaKernel(int32_t* out, int64_t n) {
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) out[i] = static_cast<int32_t>(i);
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

// Sorts `count` (key, value) pairs by key, stably (equal keys keep their
// order), into sorted_keys and sorted_values; with temp == nullptr, only
// sets temp_bytes to the scratch it needs. A library call, not a kernel:
// CUB's LSD radix sort on the GPU, std::stable_sort on the CPU (the same
// permutation).
cudaError_t SortPairsStably(void* temp, size_t& temp_bytes, const int32_t* keys, int32_t* sorted_keys,
                            const int32_t* values, int32_t* sorted_values, int count, cudaStream_t stream) {
#ifdef __CUDACC__
  return cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys, sorted_keys, values, sorted_values, count, 0, 32,
                                         stream);
#else
  (void)stream;
  if (temp == nullptr) {
    temp_bytes = static_cast<size_t>(count) * sizeof(int32_t);
    return cudaSuccess;
  }
  int32_t* order = static_cast<int32_t*>(temp);
  std::iota(order, order + count, 0);
  std::stable_sort(order, order + count, [keys](int32_t a, int32_t b) { return keys[a] < keys[b]; });
  for (int i = 0; i < count; ++i) {
    sorted_keys[i] = keys[order[i]];
    sorted_values[i] = values[order[i]];
  }
  return cudaSuccess;
#endif
}

// The embedding gradient's scratch: sorted ids, positions, sorted positions,
// then the sort's own, each 256-byte aligned.
struct EmbeddingGradScratch {
  size_t ids_offset = 0, positions_offset = 0, sorted_positions_offset = 0, cub_offset = 0, cub_bytes = 0, total = 0;
};
size_t Aligned(size_t bytes) { return (bytes + 255) / 256 * 256; }
EmbeddingGradScratch EmbeddingGradLayout(int64_t positions) {
  EmbeddingGradScratch layout;
  const size_t ints = Aligned(static_cast<size_t>(positions) * sizeof(int32_t));
  SortPairsStably(nullptr, layout.cub_bytes, nullptr, nullptr, nullptr, nullptr, static_cast<int>(positions), nullptr);
  layout.ids_offset = 0;
  layout.positions_offset = ints;
  layout.sorted_positions_offset = 2 * ints;
  layout.cub_offset = 3 * ints;
  layout.total = 3 * ints + Aligned(layout.cub_bytes);
  return layout;
}


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

}  // namespace

cudaError_t LaunchFill32(uint32_t bits, void* out, int64_t n, cudaStream_t stream) {
  return Launch(n, stream, FillKernel, bits, static_cast<uint32_t*>(out), n);
}

cudaError_t LaunchUnary(ir::OpKind op, const float* x, float* out, int64_t n, cudaStream_t stream) {
  return Launch(n, stream, UnaryKernel, op, x, out, n);
}

namespace {
// 1 when `operand` of `map` is row-major over the output, 0 when it is one
// value broadcast everywhere, -1 otherwise.
int64_t FlatStep(const StridedMap& map, int operand) {
  bool row_major = true, repeated = true;
  int64_t stride = 1;
  for (int axis = map.rank - 1; axis >= 0; --axis) {
    const int64_t extent = map.extents[axis], actual = map.strides[operand][axis];
    row_major = row_major && (extent == 1 || actual == stride);
    repeated = repeated && (extent == 1 || actual == 0);
    stride *= extent;
  }
  return repeated ? 0 : row_major ? 1 : -1;
}
}  // namespace

cudaError_t LaunchBinary(ir::OpKind op, const float* x, const float* y, float* out,
                         const StridedMap& map, cudaStream_t stream) {
  int64_t n = 1;
  for (int axis = 0; axis < map.rank; ++axis) n *= map.extents[axis];
  const int64_t x_step = FlatStep(map, 0), y_step = FlatStep(map, 1);
  if (x_step >= 0 && y_step >= 0) return Launch(n, stream, FlatBinaryKernel, op, x, x_step, y, y_step, out, n);
  return Launch(n, stream, BinaryKernel, op, x, y, out, map, n);
}

__global__ void SumInOrderKernel(const float* slots, int64_t stride, int32_t count, float* out, int64_t n) {
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) {
    float sum = slots[i];
    // __fadd_rn: never contracted or reassociated.
    for (int32_t r = 1; r < count; ++r) sum = __fadd_rn(sum, slots[r * stride + i]);
    out[i] = sum;
  }
}

cudaError_t LaunchSumInOrder(const float* slots, int64_t stride, int32_t count, float* out, int64_t n,
                             cudaStream_t stream) {
  if (count < 1) return cudaErrorInvalidValue;
  return Launch(n, stream, SumInOrderKernel, slots, stride, count, out, n);
}

cudaError_t LaunchWhere(const float* cond, const float* x, const float* y, float* out,
                        const StridedMap& map, cudaStream_t stream) {
  int64_t n = 1;
  for (int axis = 0; axis < map.rank; ++axis) n *= map.extents[axis];
  return Launch(n, stream, WhereKernel, cond, x, y, out, map, n);
}

cudaError_t LaunchConvert(ConvertOp op, const void* in, void* out, int64_t n,
                          cudaStream_t stream) {
  return Launch(n, stream, ConvertKernel, op, in, out, n);
}

cudaError_t LaunchToBf16(const float* in, void* out, int64_t n, cudaStream_t stream) {
  return Launch(n, stream, ToBf16Kernel, in, static_cast<__nv_bfloat16*>(out), n);
}

cudaError_t LaunchGather(const void* in, void* out, int element_size, const StridedMap& map,
                         cudaStream_t stream) {
  int64_t n = 1;
  for (int axis = 0; axis < map.rank; ++axis) n *= map.extents[axis];
  if (element_size == 4) {
    return Launch(n, stream, GatherKernel<uint32_t>, static_cast<const uint32_t*>(in),
                  static_cast<uint32_t*>(out), map, n);
  }
  if (element_size == 2) {
    return Launch(n, stream, GatherKernel<uint16_t>, static_cast<const uint16_t*>(in),
                  static_cast<uint16_t*>(out), map, n);
  }
  return cudaErrorInvalidValue;
}

cudaError_t LaunchCopyRows(const void* src, int64_t src_row_stride, void* dst,
                           int64_t dst_row_stride, int64_t rows, int64_t row_length,
                           int element_size, cudaStream_t stream) {
  const int64_t n = rows * row_length;
  if (element_size == 4) {
    return Launch(n, stream, CopyRowsKernel<uint32_t>, static_cast<const uint32_t*>(src),
                  src_row_stride, static_cast<uint32_t*>(dst), dst_row_stride, row_length, n);
  }
  if (element_size == 2) {
    return Launch(n, stream, CopyRowsKernel<uint16_t>, static_cast<const uint16_t*>(src),
                  src_row_stride, static_cast<uint16_t*>(dst), dst_row_stride, row_length, n);
  }
  return cudaErrorInvalidValue;
}

namespace {
// A reduction of more than kReduceChunk elements per output, into fewer
// outputs than fill the GPU, runs in two passes: each chunk of
// kReduceChunk reduced elements is folded by a block of its own (so a full
// reduction of 4M floats takes 64 blocks, not one), then each output's
// chunk results are folded in chunk order. The chunk length is a constant,
// so the order depends on the shape alone, never on the GPU.
constexpr int64_t kReduceChunk = 65536;
constexpr int64_t kFewOutputs = 1024;

int64_t ReducedTotal(const ReductionPlan& plan) {
  int64_t total = 1;
  for (int axis = 0; axis < plan.reduced_rank; ++axis) total *= plan.reduced_extents[axis];
  return total;
}

// The chunks each output's reduction is cut into: 1 for a single pass.
int64_t ReduceChunks(const ReductionPlan& plan) {
  const int64_t total = ReducedTotal(plan);
  if (plan.num_outputs > kFewOutputs || total <= kReduceChunk) return 1;
  return (total + kReduceChunk - 1) / kReduceChunk;
}

template <typename Op>
cudaError_t LaunchReducePass(const float* x, float* out, const ReductionPlan& plan, int64_t chunks,
                             int64_t chunk_length, bool mean, Op op, cudaStream_t stream) {
  const int64_t reduced = chunks > 1 ? chunk_length : ReducedTotal(plan);
  const bool outputs_adjacent = plan.kept.rank > 0 && plan.kept.strides[0][plan.kept.rank - 1] == 1;
  const bool reduced_adjacent = plan.reduced_rank > 0 && plan.reduced_strides[plan.reduced_rank - 1] == 1;
  const int outputs_per_block = (outputs_adjacent && !reduced_adjacent) || reduced < kFoldThreads ? 32 : 1;
  const int64_t blocks = (plan.num_outputs + outputs_per_block - 1) / outputs_per_block * chunks;
  const unsigned grid = static_cast<unsigned>(blocks < kMaxBlocks ? blocks : kMaxBlocks);
  TANDEM_LAUNCH(ReduceKernel, grid, kFoldThreads, 0, stream)(x, out, plan, outputs_per_block, chunks, chunk_length,
                                                           mean, op);
  return cudaGetLastError();
}

template <typename Op>
cudaError_t ReduceInPasses(const float* x, float* out, const ReductionPlan& plan, bool mean, Op op, void* scratch,
                           cudaStream_t stream) {
  const int64_t chunks = ReduceChunks(plan);
  if (chunks == 1) return LaunchReducePass(x, out, plan, 1, ReducedTotal(plan), mean, op, stream);
  float* partials = static_cast<float*>(scratch);  // [num_outputs, chunks]
  if (cudaError_t error = LaunchReducePass(x, partials, plan, chunks, kReduceChunk, false, op, stream);
      error != cudaSuccess) {
    return error;
  }
  ReductionPlan second;
  second.num_outputs = plan.num_outputs;
  second.kept.rank = 1;
  second.kept.num_operands = 1;
  second.kept.extents[0] = plan.num_outputs;
  second.kept.strides[0][0] = chunks;
  second.reduced_rank = 1;
  second.reduced_extents[0] = chunks;
  second.reduced_strides[0] = 1;
  second.reduced_count = plan.reduced_count;
  return LaunchReducePass(partials, out, second, 1, chunks, mean, op, stream);
}
}  // namespace

size_t ReduceScratchBytes(const ReductionPlan& plan) {
  const int64_t chunks = ReduceChunks(plan);
  return chunks == 1 ? 0 : static_cast<size_t>(plan.num_outputs * chunks) * sizeof(float);
}

cudaError_t LaunchReduce(ReduceOp op, const float* x, float* out, const ReductionPlan& plan, void* scratch,
                         cudaStream_t stream) {
  if (plan.num_outputs <= 0) return cudaSuccess;
  if (op == ReduceOp::kMax) return ReduceInPasses(x, out, plan, false, MaxOp(), scratch, stream);
  return ReduceInPasses(x, out, plan, op == ReduceOp::kMean, AddOp(), scratch, stream);
}

cudaError_t LaunchRows(RowOp op, const float* x, const float* dy, float* out, int64_t rows,
                       int64_t length, cudaStream_t stream) {
  if (length <= 0 || rows <= 0) return cudaSuccess;
  TANDEM_LAUNCH(RowsKernel, RowBlocks(rows), RowThreads(length), 0, stream)(op, x, dy, out, rows, length);
  return cudaGetLastError();
}

cudaError_t LaunchNormalization(NormOp op, const float* x, const float* second, const float* beta,
                                float* out, int64_t rows, int64_t length, float eps,
                                cudaStream_t stream) {
  if (length <= 0 || rows <= 0) return cudaSuccess;
  TANDEM_LAUNCH(NormalizationKernel, RowBlocks(rows), RowThreads(length), 0, stream)(op, x, second, beta, out, rows, length,
                                                                          eps);
  return cudaGetLastError();
}

cudaError_t LaunchCausalMask(const float* x, float* out, int64_t matrices, int64_t rows,
                             int64_t cols, float fill, cudaStream_t stream) {
  const int64_t n = matrices * rows * cols;
  return Launch(n, stream, CausalMaskKernel, x, out, rows, cols, fill, n);
}

// One thread per (row, pair): rows are positions of `positions`-row
// matrices, or have their own in `given` (one per row, at least 0).
__global__ void RotaryKernel(const float* x, const int32_t* given, float* out, int64_t positions, int64_t half,
                             double theta, float direction, int64_t pairs) {
  for (int64_t p = FirstIndex(); p < pairs; p += GridStride()) {
    const int64_t row = p / half;
    const int64_t i = p - row * half;
    const int64_t t = given != nullptr ? given[row] : row % positions;
    const float frequency = static_cast<float>(pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(2 * half)));
    const double angle = static_cast<double>(static_cast<float>(t) * frequency);
    const float c = static_cast<float>(cos(angle));
    const float s = direction * static_cast<float>(sin(angle));
    const float* in = x + row * 2 * half;
    float* o = out + row * 2 * half;
    const float a = in[i];
    const float b = in[i + half];
    o[i] = a * c - b * s;
    o[i + half] = b * c + a * s;
  }
}

cudaError_t LaunchRotary(const float* x, const int32_t* given, float* out, int64_t matrices, int64_t positions,
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
  return Launch(rows, stream, AttentionKernel, q, k, v, positions, out, geometry, rows);
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
  if (cudaError_t error = Launch(rows, stream, AttentionQueryGradKernel, q, k, v, dy, dq, stats, geometry, rows);
      error != cudaSuccess) {
    return error;
  }
  const int64_t key_rows = batch * kv_heads * seq;
  return Launch(key_rows, stream, AttentionKeyGradKernel, q, k, v, dy, stats, dk, dv, geometry, key_rows);
}

cudaError_t LaunchFindFirstOutOfRange(const int32_t* values, int64_t n, int64_t limit,
                                      RangeCheckResult* result, cudaStream_t stream) {
  // Launched even for n == 0: the result must be written.
  TANDEM_LAUNCH(FindFirstOutOfRangeKernel, 1, kCheckThreads, 0, stream)(values, n, limit, result);
  return cudaGetLastError();
}

cudaError_t LaunchCrossEntropy(const float* logits, const int32_t* labels, float* loss,
                               int64_t rows, int64_t classes, cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  TANDEM_LAUNCH(CrossEntropyKernel, RowBlocks(rows), RowThreads(classes), 0, stream)(logits, labels, loss, rows, classes);
  return cudaGetLastError();
}

cudaError_t LaunchCrossEntropyGrad(const float* logits, const int32_t* labels, const float* dy,
                                   float* out, int64_t rows, int64_t classes,
                                   cudaStream_t stream) {
  if (classes <= 0 || rows <= 0) return cudaSuccess;
  TANDEM_LAUNCH(CrossEntropyGradKernel, RowBlocks(rows), RowThreads(classes), 0, stream)(logits, labels, dy, out, rows,
                                                                              classes);
  return cudaGetLastError();
}

cudaError_t LaunchEmbedding(const float* table, const int32_t* ids, float* out, int64_t positions,
                            int64_t num_rows, int64_t width, cudaStream_t stream) {
  const int64_t n = positions * width;
  return Launch(n, stream, EmbeddingKernel, table, ids, out, num_rows, width, n);
}

size_t EmbeddingGradScratchBytes(int64_t positions) { return EmbeddingGradLayout(positions).total; }

cudaError_t LaunchEmbeddingGrad(const int32_t* ids, const float* dy, float* out, int64_t positions,
                                int64_t num_rows, int64_t width, void* scratch, cudaStream_t stream) {
  const int64_t n = num_rows * width;
  if (n <= 0) return cudaSuccess;
  if (cudaError_t error = cudaMemsetAsync(out, 0, static_cast<size_t>(n) * sizeof(float), stream);
      error != cudaSuccess || positions <= 0) {
    return error;
  }
  if (positions > INT32_MAX) return cudaErrorInvalidValue;
  const EmbeddingGradScratch layout = EmbeddingGradLayout(positions);
  auto* base = static_cast<char*>(scratch);
  auto* sorted_ids = reinterpret_cast<int32_t*>(base + layout.ids_offset);
  auto* position_of = reinterpret_cast<int32_t*>(base + layout.positions_offset);
  auto* sorted_positions = reinterpret_cast<int32_t*>(base + layout.sorted_positions_offset);
  if (cudaError_t error = Launch(positions, stream, IotaKernel, position_of, positions); error != cudaSuccess) {
    return error;
  }
  size_t cub_bytes = layout.cub_bytes;
  // Stable: equal ids keep their positions' order.
  if (cudaError_t error = SortPairsStably(base + layout.cub_offset, cub_bytes, ids, sorted_ids, position_of,
                                          sorted_positions, static_cast<int>(positions), stream);
      error != cudaSuccess) {
    return error;
  }
  const int threads = width >= 256 ? 256 : 32;
  TANDEM_LAUNCH(EmbeddingGradRunsKernel, RowBlocks(positions), threads, 0, stream)(sorted_ids, sorted_positions, dy, out,
                                                                       positions, num_rows, width);
  return cudaGetLastError();
}

}  // namespace tandem::cuda::kernels
