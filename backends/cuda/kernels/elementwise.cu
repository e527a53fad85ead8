// The CUDA backend's elementwise kernels (cuda_kernels.cuh): fills, unary
// and binary maps (with broadcasting, and a flat path for operands that are
// row-major or one value), the in-order sum of replicas' slots, where,
// dtype conversions, and data movement as bits (gathers, row copies).
#include "backends/cuda/kernels/common.cuh"

namespace tandem::cuda::kernels {
namespace {

// sqrt(2/pi) and the cubic coefficient of GELU's tanh approximation, the
// reference's f32 constants.
constexpr float kGeluScale = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;

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

template <typename T>
__global__ void FillKernel(T bits, T* out, int64_t n) {
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) out[i] = bits;
}

__global__ void UnaryKernel(ir::OpKind op, ElementsIn x, ElementsOut out, int64_t n) {
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) Store(out, i, ApplyUnary(op, Load(x, i)));
}

__global__ void BinaryKernel(ir::OpKind op, ElementsIn x, ElementsIn y, ElementsOut out, StridedMap map, int64_t n) {
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) {
    int64_t offsets[kMaxOperands];
    OffsetsOf(map, i, offsets);
    Store(out, i, ApplyBinary(op, Load(x, offsets[0]), Load(y, offsets[1])));
  }
}

// Element i of an operand read at i % period (the output's own order, one
// value, or a block repeated along leading axes: a bias), in 32 bits where
// the count allows (a 64-bit division costs several times more).
__device__ int64_t PeriodicOffset(int64_t i, int64_t period, int64_t n) {
  if (period == n) return i;
  if (period == 1) return 0;
  if (n <= 0xffffffffll) return static_cast<uint32_t>(i) % static_cast<uint32_t>(period);
  return i % period;
}

// The periodic case of BinaryKernel: each operand read at i % its period,
// so no per-axis div/mod.
__global__ void FlatBinaryKernel(ir::OpKind op, ElementsIn x, int64_t x_period, ElementsIn y, int64_t y_period,
                                 ElementsOut out, int64_t n) {
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) {
    Store(out, i, ApplyBinary(op, Load(x, PeriodicOffset(i, x_period, n)), Load(y, PeriodicOffset(i, y_period, n))));
  }
}

// A run's value `from` (an earlier step) out of `values`, whose indices are
// compile-time constants in the unrolled steps: a chain of selects keeps
// them in registers (an array indexed at run time lives in local memory).
template <int kBefore>
__device__ __forceinline__ float Earlier(const float (&values)[kMaxFusedSteps], int from) {
  float value = 0.0f;
  TANDEM_UNROLL
  for (int t = 0; t < kBefore; ++t) value = t == from ? values[t] : value;
  return value;
}

// Step kStep of a run and the steps after it, for element i.
template <int kStep>
__device__ __forceinline__ void RunSteps(const FusedProgram& program, int64_t i, int64_t n,
                                         float (&values)[kMaxFusedSteps]) {
  if constexpr (kStep < kMaxFusedSteps) {
    if (kStep >= program.num_steps) return;
    const FusedStep& step = program.steps[kStep];
    float operand[2] = {0.0f, 0.0f};
    TANDEM_UNROLL
    for (int k = 0; k < 2; ++k) {
      if (k < step.arity) {
        const int from = step.operands[k];
        if (from >= 0) {
          operand[k] = Earlier<kStep>(values, from);
        } else {
          const FusedInput& input = program.inputs[-1 - from];
          operand[k] = Load(ElementsIn{input.data, input.bf16}, PeriodicOffset(i, input.period, n));
        }
      }
    }
    float value = step.arity == 1 ? ApplyUnary(step.op, operand[0]) : ApplyBinary(step.op, operand[0], operand[1]);
    if (step.bf16) value = __bfloat162float(__float2bfloat16_rn(value));  // what a later node would load
    values[kStep] = value;
    if (step.out != nullptr) Store(ElementsOut{step.out, step.bf16}, i, value);
    RunSteps<kStep + 1>(program, i, n, values);
  }
}

__global__ void FusedKernel(FusedProgram program, int64_t n) {
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) {
    float values[kMaxFusedSteps];
    RunSteps<0>(program, i, n, values);
  }
}

__global__ void WhereKernel(ElementsIn cond, ElementsIn x, ElementsIn y, ElementsOut out, StridedMap map,
                            int64_t n) {
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) {
    int64_t offsets[kMaxOperands];
    OffsetsOf(map, i, offsets);
    Store(out, i, Load(cond, offsets[0]) != 0.0f ? Load(x, offsets[1]) : Load(y, offsets[2]));
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

// ---- Data movement: elements of type T (uint16_t, uint32_t, or 16-byte units
// of them: uint4) moved as bits.

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

}  // namespace

cudaError_t LaunchFill(uint32_t bits, int element_size, void* out, int64_t n, cudaStream_t stream) {
  if (element_size == 2) {
    return Launch(n, stream, FillKernel<uint16_t>, static_cast<uint16_t>(bits), static_cast<uint16_t*>(out), n);
  }
  if (element_size != 4) return cudaErrorInvalidValue;
  return Launch(n, stream, FillKernel<uint32_t>, bits, static_cast<uint32_t*>(out), n);
}

cudaError_t LaunchUnary(ir::OpKind op, ElementsIn x, ElementsOut out, int64_t n, cudaStream_t stream) {
  return Launch(n, stream, UnaryKernel, op, x, out, n);
}

namespace {
// p when `operand` of `map` is read at output element i % p: row-major
// over the trailing axes (p elements of them) and repeated along the rest
// (p = the output's count when it is row-major over all of it, 1 when it
// is one value); -1 otherwise.
int64_t Period(const StridedMap& map, int operand) {
  int64_t stride = 1;
  int axis = map.rank - 1;
  for (; axis >= 0; --axis) {  // the trailing axes it is row-major over
    const int64_t extent = map.extents[axis];
    if (extent != 1 && map.strides[operand][axis] != stride) break;
    stride *= extent;
  }
  for (; axis >= 0; --axis) {  // the leading axes it repeats along
    if (map.extents[axis] != 1 && map.strides[operand][axis] != 0) return -1;
  }
  return stride;
}
}  // namespace

cudaError_t LaunchBinary(ir::OpKind op, ElementsIn x, ElementsIn y, ElementsOut out, const StridedMap& map,
                         cudaStream_t stream) {
  int64_t n = 1;
  for (int axis = 0; axis < map.rank; ++axis) n *= map.extents[axis];
  const int64_t x_period = Period(map, 0), y_period = Period(map, 1);
  if (x_period > 0 && y_period > 0) return Launch(n, stream, FlatBinaryKernel, op, x, x_period, y, y_period, out, n);
  return Launch(n, stream, BinaryKernel, op, x, y, out, map, n);
}

cudaError_t LaunchFused(const FusedProgram& program, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  if (program.num_steps < 1 || program.num_steps > kMaxFusedSteps || program.num_inputs < 0 ||
      program.num_inputs > kMaxFusedInputs) {
    return cudaErrorInvalidValue;
  }
  for (int s = 0; s < program.num_steps; ++s) {
    const FusedStep& step = program.steps[s];
    if (step.arity < 1 || step.arity > 2) return cudaErrorInvalidValue;
    for (int k = 0; k < step.arity; ++k) {
      const int from = step.operands[k];
      if (from >= s || -1 - from >= program.num_inputs) return cudaErrorInvalidValue;
    }
  }
  for (int k = 0; k < program.num_inputs; ++k) {
    if (program.inputs[k].period < 1) return cudaErrorInvalidValue;
  }
  return Launch(n, stream, FusedKernel, program, n);
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

cudaError_t LaunchWhere(ElementsIn cond, ElementsIn x, ElementsIn y, ElementsOut out, const StridedMap& map,
                        cudaStream_t stream) {
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

namespace {
// Data movement in 16-byte units (uint4) where whole units move together:
// `lanes` elements of `element_size` bytes make a unit, both pointers are
// 16-byte aligned, and every run of elements that stays contiguous is made
// of whole units. A transpose that keeps the last axis (a head split) then
// does a quarter of the index arithmetic (an eighth in bf16) and 16-byte
// loads and stores. The same bits move either way.

// `map` in units: its innermost axis read in order (stride 1) with an extent
// of whole units, every other stride a whole number of units.
bool MapInUnits(const StridedMap& map, int64_t lanes, StridedMap* units) {
  const int inner = map.rank - 1;
  if (map.rank < 1 || map.strides[0][inner] != 1 || map.extents[inner] % lanes != 0) return false;
  *units = map;
  units->extents[inner] = map.extents[inner] / lanes;
  for (int axis = 0; axis < inner; ++axis) {
    if (map.strides[0][axis] % lanes != 0) return false;
    units->strides[0][axis] = map.strides[0][axis] / lanes;
  }
  return true;
}
}  // namespace

cudaError_t LaunchGather(const void* in, void* out, int element_size, const StridedMap& map,
                         cudaStream_t stream) {
  if (element_size != 4 && element_size != 2) return cudaErrorInvalidValue;
  StridedMap units;
  if (Aligned16(in) && Aligned16(out) && MapInUnits(map, 16 / element_size, &units)) {
    int64_t n = 1;
    for (int axis = 0; axis < units.rank; ++axis) n *= units.extents[axis];
    return Launch(n, stream, GatherKernel<uint4>, static_cast<const uint4*>(in), static_cast<uint4*>(out), units, n);
  }
  int64_t n = 1;
  for (int axis = 0; axis < map.rank; ++axis) n *= map.extents[axis];
  if (element_size == 4) {
    return Launch(n, stream, GatherKernel<uint32_t>, static_cast<const uint32_t*>(in),
                  static_cast<uint32_t*>(out), map, n);
  }
  return Launch(n, stream, GatherKernel<uint16_t>, static_cast<const uint16_t*>(in),
                static_cast<uint16_t*>(out), map, n);
}

cudaError_t LaunchCopyRows(const void* src, int64_t src_row_stride, void* dst,
                           int64_t dst_row_stride, int64_t rows, int64_t row_length,
                           int element_size, cudaStream_t stream) {
  if (element_size != 4 && element_size != 2) return cudaErrorInvalidValue;
  const int64_t lanes = 16 / element_size;
  if (Aligned16(src) && Aligned16(dst) && src_row_stride % lanes == 0 && dst_row_stride % lanes == 0 &&
      row_length % lanes == 0) {
    const int64_t length = row_length / lanes;
    return Launch(rows * length, stream, CopyRowsKernel<uint4>, static_cast<const uint4*>(src),
                  src_row_stride / lanes, static_cast<uint4*>(dst), dst_row_stride / lanes, length, rows * length);
  }
  const int64_t n = rows * row_length;
  if (element_size == 4) {
    return Launch(n, stream, CopyRowsKernel<uint32_t>, static_cast<const uint32_t*>(src),
                  src_row_stride, static_cast<uint32_t*>(dst), dst_row_stride, row_length, n);
  }
  return Launch(n, stream, CopyRowsKernel<uint16_t>, static_cast<const uint16_t*>(src),
                src_row_stride, static_cast<uint16_t*>(dst), dst_row_stride, row_length, n);
}

}  // namespace tandem::cuda::kernels
