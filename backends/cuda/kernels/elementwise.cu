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

// ---- The ops. Each computes kN values at once, each exactly as the scalar
// op would (kN = 1 is the scalar op): a kernel that takes several elements
// a thread (a run, below) decodes its op once for all of them.
template <int kN>
struct Values {
  float v[kN];
};

// f of each value (of x, or of x and y side by side).
template <int kN, typename F>
__device__ __forceinline__ Values<kN> Each(const Values<kN>& x, F f) {
  Values<kN> r;
  TANDEM_UNROLL
  for (int e = 0; e < kN; ++e) r.v[e] = f(x.v[e]);
  return r;
}
template <int kN, typename F>
__device__ __forceinline__ Values<kN> Each(const Values<kN>& x, const Values<kN>& y, F f) {
  Values<kN> r;
  TANDEM_UNROLL
  for (int e = 0; e < kN; ++e) r.v[e] = f(x.v[e], y.v[e]);
  return r;
}

template <int kN>
__device__ Values<kN> ApplyUnary(ir::OpKind op, const Values<kN>& x) {
  switch (op) {
    case ir::OpKind::kNeg:
      return Each(x, [](float a) { return -a; });
    case ir::OpKind::kExp:
      return Each(x, [](float a) { return expf(a); });
    case ir::OpKind::kExpm1:
      return Each(x, [](float a) { return expm1f(a); });
    case ir::OpKind::kLog:
      return Each(x, [](float a) { return logf(a); });
    case ir::OpKind::kTanh:
      return Each(x, [](float a) { return Tanh(a); });
    case ir::OpKind::kSin:  // as the reference: in double, rounded
      return Each(x, [](float a) { return static_cast<float>(sin(static_cast<double>(a))); });
    case ir::OpKind::kCos:
      return Each(x, [](float a) { return static_cast<float>(cos(static_cast<double>(a))); });
    case ir::OpKind::kSqrt:
      return Each(x, [](float a) { return sqrtf(a); });
    case ir::OpKind::kRsqrt:  // IEEE division of the rounded root, as the reference; never rsqrtf
      return Each(x, [](float a) { return 1.0f / sqrtf(a); });
    case ir::OpKind::kRelu:  // NaN passes through
      return Each(x, [](float a) { return a < 0.0f ? 0.0f : a; });
    case ir::OpKind::kGelu:
      return Each(x, [](float a) {
        const float inner = kGeluScale * (a + kGeluCubic * a * a * a);
        return 0.5f * a * (1.0f + Tanh(inner));
      });
    case ir::OpKind::kSilu:
      return Each(x, [](float a) { return a * Sigmoid(a); });
    default:  // not unary: the runner never launches it
      return x;
  }
}

template <int kN>
__device__ Values<kN> ApplyBinary(ir::OpKind op, const Values<kN>& x, const Values<kN>& y) {
  switch (op) {
    case ir::OpKind::kAdd:
      return Each(x, y, [](float a, float b) { return a + b; });
    case ir::OpKind::kSub:
      return Each(x, y, [](float a, float b) { return a - b; });
    case ir::OpKind::kMul:
      return Each(x, y, [](float a, float b) { return a * b; });
    case ir::OpKind::kDiv:
      return Each(x, y, [](float a, float b) { return a / b; });
    case ir::OpKind::kPow:
      return Each(x, y, [](float a, float b) { return powf(a, b); });
    case ir::OpKind::kMaximum:  // NaN on either side wins; x on ties
      return Each(x, y, [](float a, float b) { return (a >= b || isnan(a)) ? a : b; });
    case ir::OpKind::kEqual:
      return Each(x, y, [](float a, float b) { return a == b ? 1.0f : 0.0f; });
    case ir::OpKind::kGeluGrad:  // y is dy; the exact derivative of the tanh approximation
      return Each(x, y, [](float a, float dy) {
        const float a2 = a * a;
        const float t = Tanh(kGeluScale * (a + kGeluCubic * a2 * a));
        const float d_inner = kGeluScale * (1.0f + 3.0f * kGeluCubic * a2);
        const float derivative = 0.5f * (1.0f + t) + 0.5f * a * (1.0f - t * t) * d_inner;
        return dy * derivative;
      });
    case ir::OpKind::kSiluGrad:
      return Each(x, y, [](float a, float dy) {
        const float sigmoid = Sigmoid(a);
        return dy * (sigmoid * (1.0f + a * (1.0f - sigmoid)));
      });
    case ir::OpKind::kReluGrad:
      return Each(x, y, [](float a, float dy) { return a > 0.0f ? dy : 0.0f; });
    default:  // not binary: the runner never launches it
      return x;
  }
}

__device__ __forceinline__ float ApplyBinary(ir::OpKind op, float x, float y) {
  return ApplyBinary(op, Values<1>{{x}}, Values<1>{{y}}).v[0];
}

// ---- Runs: a thread takes kRun consecutive elements (the last run of a
// kernel may be shorter), decodes each op once for them and moves them in
// one 16-byte access (8 bytes of bf16) where the storage is aligned for it.

constexpr int kRun = 4;
using Run = Values<kRun>;

int64_t RunsIn(int64_t n) { return (n + kRun - 1) / kRun; }

// The first element of each of this thread's runs, as FirstIndex and
// GridStride number elements.
__device__ __forceinline__ int64_t FirstOfRun() { return FirstIndex() * kRun; }
__device__ __forceinline__ int64_t RunStride() { return GridStride() * kRun; }
__device__ __forceinline__ int CountOfRun(int64_t first, int64_t n) {
  return n - first < kRun ? static_cast<int>(n - first) : kRun;
}

__device__ __forceinline__ bool AlignedForRuns(const void* data, bool bf16) {
  return (reinterpret_cast<uintptr_t>(data) & (bf16 ? 7u : 15u)) == 0;
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

// Elements first .. first + count - 1 of an operand read at i % period in
// an op of n elements (zeros past count). A full run that stays inside one
// period is one access.
__device__ __forceinline__ Run LoadRun(ElementsIn x, int64_t period, int64_t first, int count, int64_t n) {
  int64_t at = PeriodicOffset(first, period, n);
  if (count == kRun && (period == n || period % kRun == 0) && AlignedForRuns(x.data, x.bf16)) {
    const float4 v =
        x.bf16 ? Load4(static_cast<const __nv_bfloat16*>(x.data) + at) : Load4(static_cast<const float*>(x.data) + at);
    return Run{{v.x, v.y, v.z, v.w}};
  }
  Run r;
  TANDEM_UNROLL
  for (int e = 0; e < kRun; ++e) {
    r.v[e] = e < count ? Load(x, at) : 0.0f;
    if (++at == period) at = 0;
  }
  return r;
}

__device__ __forceinline__ void StoreRun(ElementsOut out, int64_t first, int count, const Run& r) {
  if (count == kRun && AlignedForRuns(out.data, out.bf16)) {
    const float4 v = make_float4(r.v[0], r.v[1], r.v[2], r.v[3]);
    if (out.bf16) {
      Store4(static_cast<__nv_bfloat16*>(out.data) + first, v);
    } else {
      Store4(static_cast<float*>(out.data) + first, v);
    }
    return;
  }
  TANDEM_UNROLL
  for (int e = 0; e < kRun; ++e) {
    if (e < count) Store(out, first + e, r.v[e]);
  }
}

// ---- Elementwise.

template <typename T>
__global__ void FillKernel(T bits, T* out, int64_t n) {
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) out[i] = bits;
}

__global__ void UnaryKernel(ir::OpKind op, ElementsIn x, ElementsOut out, int64_t n) {
  for (int64_t first = FirstOfRun(); first < n; first += RunStride()) {
    const int count = CountOfRun(first, n);
    StoreRun(out, first, count, ApplyUnary(op, LoadRun(x, n, first, count, n)));
  }
}

__global__ void BinaryKernel(ir::OpKind op, ElementsIn x, ElementsIn y, ElementsOut out, StridedMap map, int64_t n) {
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) {
    int64_t offsets[kMaxOperands];
    OffsetsOf(map, i, offsets);
    Store(out, i, ApplyBinary(op, Load(x, offsets[0]), Load(y, offsets[1])));
  }
}

// The periodic case of BinaryKernel: each operand read at i % its period,
// so no per-axis div/mod, in runs.
__global__ void FlatBinaryKernel(ir::OpKind op, ElementsIn x, int64_t x_period, ElementsIn y, int64_t y_period,
                                 ElementsOut out, int64_t n) {
  for (int64_t first = FirstOfRun(); first < n; first += RunStride()) {
    const int count = CountOfRun(first, n);
    StoreRun(out, first, count,
             ApplyBinary(op, LoadRun(x, x_period, first, count, n), LoadRun(y, y_period, first, count, n)));
  }
}

// A fused run's value `from` (an earlier step) out of `values`, whose
// indices are compile-time constants in the unrolled steps: a chain of
// selects keeps them in registers (an array indexed at run time lives in
// local memory).
template <int kBefore>
__device__ __forceinline__ Run Earlier(const Run (&values)[kMaxFusedSteps], int from) {
  Run value{};
  TANDEM_UNROLL
  for (int t = 0; t < kBefore; ++t) value = t == from ? values[t] : value;
  return value;
}

// Step kStep of a fused program and the steps after it, for the run of
// `count` elements from `first`.
template <int kStep>
__device__ __forceinline__ void RunSteps(const FusedProgram& program, int64_t first, int count, int64_t n,
                                         Run (&values)[kMaxFusedSteps]) {
  if constexpr (kStep < kMaxFusedSteps) {
    if (kStep >= program.num_steps) return;
    const FusedStep& step = program.steps[kStep];
    Run operand[2] = {};
    TANDEM_UNROLL
    for (int k = 0; k < 2; ++k) {
      if (k < step.arity) {
        const int from = step.operands[k];
        if (from >= 0) {
          operand[k] = Earlier<kStep>(values, from);
        } else {
          const FusedInput& input = program.inputs[-1 - from];
          operand[k] = LoadRun(ElementsIn{input.data, input.bf16}, input.period, first, count, n);
        }
      }
    }
    Run value = step.arity == 1 ? ApplyUnary(step.op, operand[0]) : ApplyBinary(step.op, operand[0], operand[1]);
    if (step.bf16) {  // what a later node would load
      value = Each(value, [](float a) { return __bfloat162float(__float2bfloat16_rn(a)); });
    }
    values[kStep] = value;
    if (step.out != nullptr) StoreRun(ElementsOut{step.out, step.bf16}, first, count, value);
    RunSteps<kStep + 1>(program, first, count, n, values);
  }
}

__global__ void FusedKernel(FusedProgram program, int64_t n) {
  for (int64_t first = FirstOfRun(); first < n; first += RunStride()) {
    Run values[kMaxFusedSteps];
    RunSteps<0>(program, first, CountOfRun(first, n), n, values);
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
  return Launch(RunsIn(n), stream, UnaryKernel, op, x, out, n);
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
  if (x_period > 0 && y_period > 0) {
    return Launch(RunsIn(n), stream, FlatBinaryKernel, op, x, x_period, y, y_period, out, n);
  }
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
  return Launch(RunsIn(n), stream, FusedKernel, program, n);
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
