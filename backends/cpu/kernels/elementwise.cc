// Elementwise kernels: constant, the unary ops, convert, the
// broadcasting binary ops, where, and the elementwise backward helpers
// gelu_grad, silu_grad and relu_grad.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "backends/cpu/kernels/float_math.h"
#include "backends/cpu/kernels/kernel_support.h"
#include "backends/cpu/kernels/parallel.h"
#include "ir/op_def.h"

namespace tandem::cpu::internal {
namespace {

// sqrt(2/pi) and the cubic coefficient of the tanh approximation of GELU.
constexpr float kGeluScale = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;

// ---- Unary ops: static float Apply(float x).
struct NegOp {
  static float Apply(float x) { return -x; }
};
struct ExpOp {
  static float Apply(float x) { return ExpF32(x); }
};
struct Expm1Op {
  static float Apply(float x) { return std::expm1(x); }
};
struct LogOp {
  static float Apply(float x) { return std::log(x); }
};
struct TanhOp {
  static float Apply(float x) { return TanhF32(x); }
};
struct SinOp {
  static float Apply(float x) {
    float sine, cosine;
    SinCosF32(x, &sine, &cosine);
    return sine;
  }
};
struct CosOp {
  static float Apply(float x) {
    float sine, cosine;
    SinCosF32(x, &sine, &cosine);
    return cosine;
  }
};
struct SqrtOp {
  static float Apply(float x) { return std::sqrt(x); }
};
struct RsqrtOp {
  static float Apply(float x) { return 1.0f / std::sqrt(x); }
};
struct ReluOp {
  static float Apply(float x) { return x < 0.0f ? 0.0f : x; }
};
struct GeluOp {
  static float Apply(float x) {
    const float inner = kGeluScale * (x + kGeluCubic * x * x * x);
    return 0.5f * x * (1.0f + TanhF32(inner));
  }
};

// sigmoid(x) = 1 / (1 + e^-x), through e^x for x < 0 so that no e^|x|
// overflows into inf / inf.
inline float Sigmoid(float x) {
  if (x >= 0.0f) return 1.0f / (1.0f + ExpF32(-x));
  const float e = ExpF32(x);
  return e / (1.0f + e);
}
struct SiluOp {
  static float Apply(float x) { return x * Sigmoid(x); }
};

// ---- Binary ops: static float Apply(float x, float y).
struct AddOp {
  static float Apply(float x, float y) { return x + y; }
};
struct SubOp {
  static float Apply(float x, float y) { return x - y; }
};
struct MulOp {
  static float Apply(float x, float y) { return x * y; }
};
struct DivOp {
  static float Apply(float x, float y) { return x / y; }
};
struct PowOp {
  static float Apply(float x, float y) { return std::pow(x, y); }
};
struct MaximumOp {
  static float Apply(float x, float y) { return (x >= y || std::isnan(x)) ? x : y; }
};
struct EqualOp {
  static float Apply(float x, float y) { return x == y ? 1.0f : 0.0f; }
};
// (x, dy) -> dy * gelu'(x).
struct GeluGradOp {
  static float Apply(float x, float dy) {
    const float x2 = x * x;
    const float t = TanhF32(kGeluScale * (x + kGeluCubic * x2 * x));
    const float d_inner = kGeluScale * (1.0f + 3.0f * kGeluCubic * x2);
    const float derivative = 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * d_inner;
    return dy * derivative;
  }
};
// (x, dy) -> dy * silu'(x) = dy * s (1 + x (1 - s)), s = sigmoid(x).
struct SiluGradOp {
  static float Apply(float x, float dy) {
    const float s = Sigmoid(x);
    return dy * (s * (1.0f + x * (1.0f - s)));
  }
};
// (x, dy) -> dy where x > 0, else 0.
struct ReluGradOp {
  static float Apply(float x, float dy) { return x > 0.0f ? dy : 0.0f; }
};

absl::Status ExpectAllF32(const ir::Node& node, Operands operands) {
  for (size_t i = 0; i < operands.size(); ++i) {
    if (absl::Status s = ExpectDType(node, operands, static_cast<int>(i), ir::DType::kF32); !s.ok()) {
      return s;
    }
  }
  return ExpectResultDType(node, ir::DType::kF32);
}

// One contiguous output row from inputs with element stride 1 or 0.
template <typename Op>
void BinaryRow(const float* __restrict x, int64_t x_stride, const float* __restrict y,
               int64_t y_stride, float* __restrict out, int64_t n) {
  if (x_stride == 1 && y_stride == 1) {
    for (int64_t i = 0; i < n; ++i) out[i] = Op::Apply(x[i], y[i]);
  } else if (x_stride == 1) {
    const float y0 = y[0];
    for (int64_t i = 0; i < n; ++i) out[i] = Op::Apply(x[i], y0);
  } else if (y_stride == 1) {
    const float x0 = x[0];
    for (int64_t i = 0; i < n; ++i) out[i] = Op::Apply(x0, y[i]);
  } else {
    const float value = Op::Apply(x[0], y[0]);
    for (int64_t i = 0; i < n; ++i) out[i] = value;
  }
}

absl::StatusOr<ir::HostTensor> Where(const ir::Node& node, Operands operands) {
  if (absl::Status s = ExpectAllF32(node, operands); !s.ok()) return s;
  const ir::Shape* shapes[] = {&operands[0]->shape(), &operands[1]->shape(), &operands[2]->shape()};
  absl::StatusOr<BroadcastLayout> layout = MakeBroadcastLayout(node, node.type.shape, shapes);
  if (!layout.ok()) return layout.status();
  absl::StatusOr<ir::HostTensor> allocated = AllocateOverwrittenResult(node);
  if (!allocated.ok()) return allocated.status();
  ir::HostTensor out = *std::move(allocated);
  if (out.num_elements() == 0) return out;
  const int64_t c_stride = layout->inner_stride(0);
  const int64_t x_stride = layout->inner_stride(1);
  const int64_t y_stride = layout->inner_stride(2);
  const float* cond = operands[0]->f32();
  const float* x = operands[1]->f32();
  const float* y = operands[2]->f32();
  float* result = out.f32();
  ParallelForEachBroadcastRow(*layout, [&](int64_t out_offset, const auto& offsets, int64_t n) {
    const float* __restrict c_row = cond + offsets[0];
    const float* __restrict x_row = x + offsets[1];
    const float* __restrict y_row = y + offsets[2];
    float* __restrict out_row = result + out_offset;
    for (int64_t i = 0; i < n; ++i) {
      out_row[i] = c_row[i * c_stride] != 0.0f ? x_row[i * x_stride] : y_row[i * y_stride];
    }
  });
  return out;
}

absl::StatusOr<ir::HostTensor> Constant(const ir::Node& node) {
  const double value = node.attributes.GetDouble("value");
  absl::StatusOr<ir::HostTensor> allocated = AllocateResult(node);
  if (!allocated.ok()) return allocated.status();
  ir::HostTensor out = *std::move(allocated);
  const int64_t n = out.num_elements();
  switch (node.type.dtype) {
    case ir::DType::kF32: {
      const float v = static_cast<float>(value);
      float* data = out.f32();
      for (int64_t i = 0; i < n; ++i) data[i] = v;
      return out;
    }
    case ir::DType::kI32: {
      const int32_t v = static_cast<int32_t>(value);
      int32_t* data = out.i32();
      for (int64_t i = 0; i < n; ++i) data[i] = v;
      return out;
    }
    default:
      return absl::UnimplementedError(
          absl::StrCat("constant: dtype ", DTypeName(node.type.dtype), " is not computed on CPU"));
  }
}

int32_t TruncateToInt32(float value) {
  if (std::isnan(value)) return 0;
  if (value >= 2147483648.0f) return std::numeric_limits<int32_t>::max();
  if (value < -2147483648.0f) return std::numeric_limits<int32_t>::min();
  return static_cast<int32_t>(value);
}

absl::StatusOr<ir::HostTensor> Convert(const ir::Node& node, Operands operands) {
  const ir::HostTensor& in = *operands[0];
  if (absl::Status s = ExpectShape(node, operands, 0, node.type.shape); !s.ok()) return s;
  const ir::DType from = in.dtype();
  const ir::DType to = node.type.dtype;
  if (from == ir::DType::kF32 && to == ir::DType::kBF16) return NarrowToBf16(node, in);
  if (from == ir::DType::kBF16 && to == ir::DType::kF32) return WidenBf16(node, in);
  absl::StatusOr<ir::HostTensor> allocated = AllocateResult(node);
  if (!allocated.ok()) return allocated.status();
  ir::HostTensor out = *std::move(allocated);
  const int64_t n = out.num_elements();
  if (from == to) {
    std::memcpy(out.data(), in.data(), static_cast<size_t>(out.num_bytes()));
  } else if (from == ir::DType::kF32 && to == ir::DType::kI32) {
    for (int64_t i = 0; i < n; ++i) out.i32()[i] = TruncateToInt32(in.f32()[i]);
  } else if (from == ir::DType::kI32 && to == ir::DType::kF32) {
    for (int64_t i = 0; i < n; ++i) out.f32()[i] = static_cast<float>(in.i32()[i]);
  } else if (from == ir::DType::kBF16 && to == ir::DType::kI32) {
    for (int64_t i = 0; i < n; ++i) out.i32()[i] = TruncateToInt32(ir::Bf16ToFloat(in.bf16()[i]));
  } else if (from == ir::DType::kI32 && to == ir::DType::kBF16) {
    for (int64_t i = 0; i < n; ++i) out.bf16()[i] = ir::FloatToBf16(static_cast<float>(in.i32()[i]));
  } else {
    return absl::UnimplementedError(absl::StrCat("convert: ", DTypeName(from), " to ",
                                                 DTypeName(to), " is not computed on CPU"));
  }
  return out;
}

template <typename Op>
void UnaryRange(const float* __restrict in, float* __restrict out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = Op::Apply(in[i]);
}

}  // namespace

bool IsFusibleElementwise(ir::OpKind op) {
  const ir::OpFamily family = ir::Def(op).family;
  return family == ir::OpFamily::kUnary || family == ir::OpFamily::kBinary;
}

TANDEM_KERNEL_CLONES
void ElementwiseRange(ir::OpKind op, const float* const* in, const int64_t* strides, float* out, int64_t n) {
  switch (op) {
    case ir::OpKind::kNeg: return UnaryRange<NegOp>(in[0], out, n);
    case ir::OpKind::kExp: return UnaryRange<ExpOp>(in[0], out, n);
    case ir::OpKind::kExpm1: return UnaryRange<Expm1Op>(in[0], out, n);
    case ir::OpKind::kLog: return UnaryRange<LogOp>(in[0], out, n);
    case ir::OpKind::kTanh: return UnaryRange<TanhOp>(in[0], out, n);
    case ir::OpKind::kSin: return UnaryRange<SinOp>(in[0], out, n);
    case ir::OpKind::kCos: return UnaryRange<CosOp>(in[0], out, n);
    case ir::OpKind::kSqrt: return UnaryRange<SqrtOp>(in[0], out, n);
    case ir::OpKind::kRsqrt: return UnaryRange<RsqrtOp>(in[0], out, n);
    case ir::OpKind::kRelu: return UnaryRange<ReluOp>(in[0], out, n);
    case ir::OpKind::kGelu: return UnaryRange<GeluOp>(in[0], out, n);
    case ir::OpKind::kSilu: return UnaryRange<SiluOp>(in[0], out, n);
    case ir::OpKind::kAdd: return BinaryRow<AddOp>(in[0], strides[0], in[1], strides[1], out, n);
    case ir::OpKind::kSub: return BinaryRow<SubOp>(in[0], strides[0], in[1], strides[1], out, n);
    case ir::OpKind::kMul: return BinaryRow<MulOp>(in[0], strides[0], in[1], strides[1], out, n);
    case ir::OpKind::kDiv: return BinaryRow<DivOp>(in[0], strides[0], in[1], strides[1], out, n);
    case ir::OpKind::kPow: return BinaryRow<PowOp>(in[0], strides[0], in[1], strides[1], out, n);
    case ir::OpKind::kMaximum: return BinaryRow<MaximumOp>(in[0], strides[0], in[1], strides[1], out, n);
    case ir::OpKind::kEqual: return BinaryRow<EqualOp>(in[0], strides[0], in[1], strides[1], out, n);
    case ir::OpKind::kGeluGrad: return BinaryRow<GeluGradOp>(in[0], strides[0], in[1], strides[1], out, n);
    case ir::OpKind::kSiluGrad: return BinaryRow<SiluGradOp>(in[0], strides[0], in[1], strides[1], out, n);
    case ir::OpKind::kReluGrad: return BinaryRow<ReluGradOp>(in[0], strides[0], in[1], strides[1], out, n);
    default:
      KernelBug(absl::StrCat("ElementwiseRange: ", OpName(op), " is not fusible"));
  }
}

// A map of IsFusibleElementwise's: its operands of its shape or broadcast
// to it, each element through ElementwiseRange, the one dispatch of these
// ops whether a node runs alone or in a fused run (interpreter.cc).
absl::StatusOr<ir::HostTensor> MapFusible(const ir::Node& node, Operands operands) {
  if (absl::Status s = ExpectAllF32(node, operands); !s.ok()) return s;
  if (operands.size() == 1) {
    if (absl::Status s = ExpectShape(node, operands, 0, node.type.shape); !s.ok()) return s;
  }
  absl::StatusOr<ir::HostTensor> allocated = AllocateOverwrittenResult(node);
  if (!allocated.ok()) return allocated.status();
  ir::HostTensor out = *std::move(allocated);
  float* result = out.f32();
  bool contiguous = true;
  for (const ir::HostTensor* operand : operands) contiguous = contiguous && operand->shape() == node.type.shape;
  if (contiguous) {
    ParallelFor(out.num_elements(), kElementGrain, [&](int64_t begin, int64_t end) {
      const float* in[2];
      int64_t strides[2] = {1, 1};
      for (size_t k = 0; k < operands.size(); ++k) in[k] = operands[k]->f32() + begin;
      ElementwiseRange(node.op, in, strides, result + begin, end - begin);
    });
    return out;
  }
  const ir::Shape* shapes[] = {&operands[0]->shape(), &operands[1]->shape()};
  absl::StatusOr<BroadcastLayout> layout = MakeBroadcastLayout(node, node.type.shape, shapes);
  if (!layout.ok()) return layout.status();
  if (out.num_elements() == 0) return out;
  const int64_t strides[2] = {layout->inner_stride(0), layout->inner_stride(1)};
  ParallelForEachBroadcastRow(*layout, [&](int64_t out_offset, const auto& offsets, int64_t n) {
    const float* in[2] = {operands[0]->f32() + offsets[0], operands[1]->f32() + offsets[1]};
    ElementwiseRange(node.op, in, strides, result + out_offset, n);
  });
  return out;
}

absl::StatusOr<ir::HostTensor> EvaluateElementwise(const ir::Node& node, Operands operands) {
  if (IsFusibleElementwise(node.op)) return MapFusible(node, operands);
  switch (node.op) {
    case ir::OpKind::kConstant:
      return Constant(node);
    case ir::OpKind::kConvert:
      return Convert(node, operands);
    case ir::OpKind::kWhere:
      return Where(node, operands);
    default:
      KernelBug(absl::StrCat("EvaluateElementwise: ", OpName(node.op), " is not elementwise"));
  }
}

}  // namespace tandem::cpu::internal
