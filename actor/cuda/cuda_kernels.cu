// The device kernels of the CUDA backend (see cuda_kernels.cuh): one kernel
// per op family with a switch on the op, and their launchers.
//
// Work split: elementwise kernels give one thread an output element; row
// kernels (softmax family, normalization, cross-entropy) give one thread a
// whole row and loop over it in index order, exactly like the reference's
// row loops; reductions give one thread an output element and fold its
// inputs in row-major order of the reduced axes. Every loop is grid-strided,
// so any grid computes the same values.
//
// The formulas and their rounding order follow ir/kernels/*.cc; where the
// reference documents a rounding (layer_norm's separate multiply and add),
// __fmul_rn/__fadd_rn keep nvcc from contracting it into an FMA.
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "actor/cuda/cuda_kernels.cuh"

namespace tandem::actor::cuda::kernels {
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
  kernel<<<BlocksFor(n), kThreads, 0, stream>>>(args...);
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

__device__ float ApplyUnary(UnaryOp op, float x) {
  switch (op) {
    case UnaryOp::kNeg:
      return -x;
    case UnaryOp::kExp:
      return expf(x);
    case UnaryOp::kExpm1:
      return expm1f(x);
    case UnaryOp::kLog:
      return logf(x);
    case UnaryOp::kTanh:
      return Tanh(x);
    case UnaryOp::kSqrt:
      return sqrtf(x);
    case UnaryOp::kRelu:
      return x < 0.0f ? 0.0f : x;  // NaN passes through
    case UnaryOp::kGelu: {
      const float inner = kGeluScale * (x + kGeluCubic * x * x * x);
      return 0.5f * x * (1.0f + Tanh(inner));
    }
  }
  return x;
}

__device__ float ApplyBinary(BinaryOp op, float x, float y) {
  switch (op) {
    case BinaryOp::kAdd:
      return x + y;
    case BinaryOp::kSub:
      return x - y;
    case BinaryOp::kMul:
      return x * y;
    case BinaryOp::kDiv:
      return x / y;
    case BinaryOp::kPow:
      return powf(x, y);
    case BinaryOp::kMaximum:
      return (x >= y || isnan(x)) ? x : y;  // NaN on either side wins; x on ties
    case BinaryOp::kEqual:
      return x == y ? 1.0f : 0.0f;
    case BinaryOp::kGeluGrad: {
      // y is dy; the exact derivative of the tanh approximation.
      const float x2 = x * x;
      const float t = Tanh(kGeluScale * (x + kGeluCubic * x2 * x));
      const float d_inner = kGeluScale * (1.0f + 3.0f * kGeluCubic * x2);
      const float derivative = 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * d_inner;
      return y * derivative;
    }
    case BinaryOp::kReluGrad:
      return x > 0.0f ? y : 0.0f;
  }
  return x;
}

// ---- Elementwise.

__global__ void FillKernel(uint32_t bits, uint32_t* out, int64_t n) {
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) out[i] = bits;
}

__global__ void UnaryKernel(UnaryOp op, const float* x, float* out, int64_t n) {
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) out[i] = ApplyUnary(op, x[i]);
}

__global__ void BinaryKernel(BinaryOp op, const float* x, const float* y, float* out,
                             StridedMap map, int64_t n) {
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) {
    int64_t offsets[kMaxOperands];
    OffsetsOf(map, i, offsets);
    out[i] = ApplyBinary(op, x[offsets[0]], y[offsets[1]]);
  }
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
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) {
    if (op == ConvertOp::kF32ToI32) {
      static_cast<int32_t*>(out)[i] = TruncateToInt32(static_cast<const float*>(in)[i]);
    } else {
      static_cast<float*>(out)[i] = static_cast<float>(static_cast<const int32_t*>(in)[i]);
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

// ---- Reductions: one thread per output element.

__global__ void ReduceKernel(ReduceOp op, const float* x, float* out, ReductionPlan plan) {
  int64_t reduced_total = 1;
  for (int axis = 0; axis < plan.reduced_rank; ++axis) reduced_total *= plan.reduced_extents[axis];
  for (int64_t o = FirstIndex(); o < plan.num_outputs; o += GridStride()) {
    int64_t offset;
    OffsetsOf(plan.kept, o, &offset);
    int64_t index[kMaxRank] = {};
    float acc = op == ReduceOp::kMax ? -INFINITY : 0.0f;
    for (int64_t r = 0; r < reduced_total; ++r) {
      const float v = x[offset];
      if (op == ReduceOp::kMax) {
        acc = (v > acc || isnan(v)) ? v : acc;
      } else {
        acc += v;
      }
      // Advance the row-major odometer over the reduced axes.
      for (int axis = plan.reduced_rank - 1; axis >= 0; --axis) {
        offset += plan.reduced_strides[axis];
        if (++index[axis] < plan.reduced_extents[axis]) break;
        offset -= plan.reduced_strides[axis] * plan.reduced_extents[axis];
        index[axis] = 0;
      }
    }
    if (op == ReduceOp::kMean) acc = acc / plan.reduced_count;
    out[o] = acc;
  }
}

// ---- Rows over the last axis: one thread per row.

__device__ float RowMax(const float* x, int64_t n) {
  float max = -INFINITY;
  for (int64_t i = 0; i < n; ++i) max = x[i] > max ? x[i] : max;
  return max;
}

__global__ void RowsKernel(RowOp op, const float* x, const float* dy, float* out, int64_t rows,
                           int64_t length) {
  for (int64_t r = FirstIndex(); r < rows; r += GridStride()) {
    const float* x_row = x + r * length;
    float* out_row = out + r * length;
    switch (op) {
      case RowOp::kSoftmax: {
        const float max = RowMax(x_row, length);
        for (int64_t i = 0; i < length; ++i) out_row[i] = expf(x_row[i] - max);
        float sum = 0.0f;
        for (int64_t i = 0; i < length; ++i) sum += out_row[i];
        for (int64_t i = 0; i < length; ++i) out_row[i] = out_row[i] / sum;
        break;
      }
      case RowOp::kLogSoftmax: {
        const float max = RowMax(x_row, length);
        float sum = 0.0f;
        for (int64_t i = 0; i < length; ++i) sum += expf(x_row[i] - max);
        const float log_sum = logf(sum);
        for (int64_t i = 0; i < length; ++i) out_row[i] = (x_row[i] - max) - log_sum;
        break;
      }
      case RowOp::kSoftmaxGrad: {
        // x is y = softmax(.): dx = y * (dy - sum(dy * y)).
        const float* dy_row = dy + r * length;
        float dot = 0.0f;
        for (int64_t i = 0; i < length; ++i) dot += dy_row[i] * x_row[i];
        for (int64_t i = 0; i < length; ++i) out_row[i] = x_row[i] * (dy_row[i] - dot);
        break;
      }
      case RowOp::kLogSoftmaxGrad: {
        // x is y = log_softmax(.): dx = dy - exp(y) * sum(dy).
        const float* dy_row = dy + r * length;
        float sum = 0.0f;
        for (int64_t i = 0; i < length; ++i) sum += dy_row[i];
        for (int64_t i = 0; i < length; ++i) out_row[i] = dy_row[i] - expf(x_row[i]) * sum;
        break;
      }
    }
  }
}

// mean and rstd = 1 / sqrt(var + eps) of a row, var biased; sums in index
// order.
struct RowMoments {
  float mean;
  float rstd;
};
__device__ RowMoments MomentsOf(const float* x, int64_t n, float eps) {
  const float count = static_cast<float>(n);
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += x[i];
  const float mean = sum / count;
  float squares = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float centered = x[i] - mean;
    squares += centered * centered;
  }
  const float variance = squares / count;
  return {mean, 1.0f / sqrtf(variance + eps)};
}

__global__ void NormalizationKernel(NormOp op, const float* x, const float* second,
                                    const float* beta, float* out, int64_t rows, int64_t length,
                                    float eps) {
  for (int64_t r = FirstIndex(); r < rows; r += GridStride()) {
    const float* x_row = x + r * length;
    float* out_row = out + r * length;
    const RowMoments moments = MomentsOf(x_row, length, eps);
    switch (op) {
      case NormOp::kNormalize:
        for (int64_t i = 0; i < length; ++i) out_row[i] = (x_row[i] - moments.mean) * moments.rstd;
        break;
      case NormOp::kLayerNorm:
        // second is gamma: xhat * gamma rounded, then + beta rounded.
        for (int64_t i = 0; i < length; ++i) {
          const float xhat = (x_row[i] - moments.mean) * moments.rstd;
          out_row[i] = __fadd_rn(__fmul_rn(xhat, second[i]), beta[i]);
        }
        break;
      case NormOp::kNormalizeGrad: {
        // second is dy: dx = rstd * ((dy - mean(dy)) - xhat * mean(dy * xhat)).
        const float* dy_row = second + r * length;
        const float count = static_cast<float>(length);
        float dy_sum = 0.0f;
        float dy_xhat_sum = 0.0f;
        for (int64_t i = 0; i < length; ++i) {
          const float xhat = (x_row[i] - moments.mean) * moments.rstd;
          dy_sum += dy_row[i];
          dy_xhat_sum += dy_row[i] * xhat;
        }
        const float dy_mean = dy_sum / count;
        const float dy_xhat_mean = dy_xhat_sum / count;
        for (int64_t i = 0; i < length; ++i) {
          const float xhat = (x_row[i] - moments.mean) * moments.rstd;
          out_row[i] = moments.rstd * ((dy_row[i] - dy_mean) - xhat * dy_xhat_mean);
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

// The max of a row and the sum of exp(x - max) over it, in index order.
struct RowExpSum {
  float max;
  float sum;
};
__device__ RowExpSum ExpSumOf(const float* x, int64_t n) {
  const float max = RowMax(x, n);
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += expf(x[i] - max);
  return {max, sum};
}

__global__ void CrossEntropyKernel(const float* logits, const int32_t* labels, float* loss,
                                   int64_t rows, int64_t classes) {
  for (int64_t r = FirstIndex(); r < rows; r += GridStride()) {
    const float* row = logits + r * classes;
    const int32_t label = labels[r];
    if (label < 0 || label >= classes) {
      loss[r] = NAN;
      continue;
    }
    const RowExpSum stats = ExpSumOf(row, classes);
    loss[r] = logf(stats.sum) - (row[label] - stats.max);
  }
}

__global__ void CrossEntropyGradKernel(const float* logits, const int32_t* labels, const float* dy,
                                       float* out, int64_t rows, int64_t classes) {
  for (int64_t r = FirstIndex(); r < rows; r += GridStride()) {
    const float* row = logits + r * classes;
    float* grad = out + r * classes;
    const int32_t label = labels[r];
    const RowExpSum stats = ExpSumOf(row, classes);
    const float scale = dy[r];
    for (int64_t i = 0; i < classes; ++i) {
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

// One thread per output element (row, column) scans every id in position
// order: the reference's sum order, with no atomics. O(rows * width *
// positions) work; fine at the vocabulary sizes we run today.
__global__ void EmbeddingGradKernel(const int32_t* ids, const float* dy, float* out,
                                    int64_t positions, int64_t width, int64_t n) {
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) {
    const int64_t row = i / width;
    const int64_t column = i % width;
    float acc = 0.0f;
    for (int64_t position = 0; position < positions; ++position) {
      if (ids[position] == row) acc += dy[position * width + column];
    }
    out[i] = acc;
  }
}

}  // namespace

cudaError_t LaunchFill32(uint32_t bits, void* out, int64_t n, cudaStream_t stream) {
  return Launch(n, stream, FillKernel, bits, static_cast<uint32_t*>(out), n);
}

cudaError_t LaunchUnary(UnaryOp op, const float* x, float* out, int64_t n, cudaStream_t stream) {
  return Launch(n, stream, UnaryKernel, op, x, out, n);
}

cudaError_t LaunchBinary(BinaryOp op, const float* x, const float* y, float* out,
                         const StridedMap& map, cudaStream_t stream) {
  int64_t n = 1;
  for (int axis = 0; axis < map.rank; ++axis) n *= map.extents[axis];
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

cudaError_t LaunchReduce(ReduceOp op, const float* x, float* out, const ReductionPlan& plan,
                         cudaStream_t stream) {
  return Launch(plan.num_outputs, stream, ReduceKernel, op, x, out, plan);
}

cudaError_t LaunchRows(RowOp op, const float* x, const float* dy, float* out, int64_t rows,
                       int64_t length, cudaStream_t stream) {
  if (length <= 0) return cudaSuccess;
  return Launch(rows, stream, RowsKernel, op, x, dy, out, rows, length);
}

cudaError_t LaunchNormalization(NormOp op, const float* x, const float* second, const float* beta,
                                float* out, int64_t rows, int64_t length, float eps,
                                cudaStream_t stream) {
  if (length <= 0) return cudaSuccess;
  return Launch(rows, stream, NormalizationKernel, op, x, second, beta, out, rows, length, eps);
}

cudaError_t LaunchCausalMask(const float* x, float* out, int64_t matrices, int64_t rows,
                             int64_t cols, float fill, cudaStream_t stream) {
  const int64_t n = matrices * rows * cols;
  return Launch(n, stream, CausalMaskKernel, x, out, rows, cols, fill, n);
}

cudaError_t LaunchFindFirstOutOfRange(const int32_t* values, int64_t n, int64_t limit,
                                      RangeCheckResult* result, cudaStream_t stream) {
  // Launched even for n == 0: the result must be written.
  FindFirstOutOfRangeKernel<<<1, kCheckThreads, 0, stream>>>(values, n, limit, result);
  return cudaGetLastError();
}

cudaError_t LaunchCrossEntropy(const float* logits, const int32_t* labels, float* loss,
                               int64_t rows, int64_t classes, cudaStream_t stream) {
  return Launch(rows, stream, CrossEntropyKernel, logits, labels, loss, rows, classes);
}

cudaError_t LaunchCrossEntropyGrad(const float* logits, const int32_t* labels, const float* dy,
                                   float* out, int64_t rows, int64_t classes,
                                   cudaStream_t stream) {
  if (classes <= 0) return cudaSuccess;
  return Launch(rows, stream, CrossEntropyGradKernel, logits, labels, dy, out, rows, classes);
}

cudaError_t LaunchEmbedding(const float* table, const int32_t* ids, float* out, int64_t positions,
                            int64_t num_rows, int64_t width, cudaStream_t stream) {
  const int64_t n = positions * width;
  return Launch(n, stream, EmbeddingKernel, table, ids, out, num_rows, width, n);
}

cudaError_t LaunchEmbeddingGrad(const int32_t* ids, const float* dy, float* out, int64_t positions,
                                int64_t num_rows, int64_t width, cudaStream_t stream) {
  const int64_t n = num_rows * width;
  return Launch(n, stream, EmbeddingGradKernel, ids, dy, out, positions, width, n);
}

}  // namespace tandem::actor::cuda::kernels
