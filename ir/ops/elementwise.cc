// Elementwise ops: the unary maps, the broadcasting binary ops, where,
// convert, and the elementwise backward helpers gelu_grad, silu_grad and
// relu_grad; with the arithmetic operators of tandem::Tensor.
#include "absl/strings/str_cat.h"
#include "ir/gradients.h"
#include "ir/ops/op_rules.h"
#include "ir/shape_rules.h"

namespace tandem {
namespace ir::ops {
namespace {

using K = AttributeKind;

// Every operand of one float type; the result has their broadcast shape.
absl::StatusOr<TensorType> OperandsBroadcastType(OpKind op, absl::Span<const TensorType> types, const Attributes&) {
  if (absl::Status s = RequireSameFloat(op, types); !s.ok()) return s;
  Shape shape = types[0].shape;
  for (size_t i = 1; i < types.size(); ++i) {
    absl::StatusOr<Shape> joined = BroadcastShapes(shape, types[i].shape);
    if (!joined.ok()) return Error(op, joined.status().message(), types);
    shape = *joined;
  }
  return TensorType{types[0].dtype, shape};
}

absl::StatusOr<TensorType> ConvertType(OpKind op, absl::Span<const TensorType> types,
                                       const Attributes& attributes) {
  absl::StatusOr<DType> dtype = ParseDType(attributes.GetString("dtype"));
  if (!dtype.ok()) return Error(op, dtype.status().message(), types);
  return TensorType{*dtype, types[0].shape};
}

// A unary op's definition: f32 or bf16 in, the same type out.
constexpr OpDef Unary(OpKind kind, const char* name, GradientRule gradient, CostRule cost) {
  return OpDef{.kind = kind,
               .name = name,
               .arity = 1,
               .family = OpFamily::kUnary,
               .result_type = SameFloatType,
               .gradient = gradient,
               .cost = cost};
}

constexpr OpDef Binary(OpKind kind, const char* name, GradientRule gradient, CostRule cost) {
  return OpDef{.kind = kind,
               .name = name,
               .arity = 2,
               .family = OpFamily::kBinary,
               .result_type = OperandsBroadcastType,
               .gradient = gradient,
               .cost = cost};
}

// The backward helper of a unary op: (x, dy) of one shape -> dx.
constexpr OpDef UnaryGrad(OpKind kind, const char* name, CostRule cost) {
  return OpDef{.kind = kind,
               .name = name,
               .arity = 2,
               .family = OpFamily::kBinary,
               .result_type = LastAxisSameType,
               .cost = cost};
}

constexpr OpDef kElementwiseOps[] = {
    Unary(
        OpKind::kNeg, "neg",
        [](const GradientArgs& a, std::vector<Tensor>& d) {
          if (a.want(0)) d[0] = -a.dy;
        },
        PerElement<1>),
    Unary(
        OpKind::kExp, "exp",
        [](const GradientArgs& a, std::vector<Tensor>& d) {
          if (a.want(0)) d[0] = a.dy * a.y;
        },
        PerElement<0, 1>),
    Unary(
        OpKind::kExpm1, "expm1",
        [](const GradientArgs& a, std::vector<Tensor>& d) {
          if (a.want(0)) d[0] = a.dy * (a.y + 1.0);
        },
        PerElement<0, 1>),
    Unary(
        OpKind::kLog, "log",
        [](const GradientArgs& a, std::vector<Tensor>& d) {
          if (a.want(0)) d[0] = a.dy / a.x[0];
        },
        PerElement<0, 1>),
    Unary(
        OpKind::kTanh, "tanh",
        [](const GradientArgs& a, std::vector<Tensor>& d) {
          if (a.want(0)) d[0] = a.dy * (1.0 - a.y * a.y);
        },
        PerElement<0, 1>),
    Unary(
        OpKind::kSin, "sin",
        [](const GradientArgs& a, std::vector<Tensor>& d) {
          if (a.want(0)) d[0] = a.dy * cos(a.x[0]);
        },
        PerElement<0, 1>),
    Unary(
        OpKind::kCos, "cos",
        [](const GradientArgs& a, std::vector<Tensor>& d) {
          if (a.want(0)) d[0] = -(a.dy * sin(a.x[0]));
        },
        PerElement<0, 1>),
    Unary(
        OpKind::kSqrt, "sqrt",
        [](const GradientArgs& a, std::vector<Tensor>& d) {
          if (a.want(0)) d[0] = a.dy * 0.5 / a.y;
        },
        PerElement<0, 1>),
    Unary(
        OpKind::kRsqrt, "rsqrt",
        [](const GradientArgs& a, std::vector<Tensor>& d) {
          // d x^(-1/2) = -1/2 x^(-3/2) = -1/2 y^3.
          if (a.want(0)) d[0] = a.dy * (a.y * a.y * a.y) * -0.5;
        },
        PerElement<1, 1>),
    Unary(
        OpKind::kRelu, "relu",
        [](const GradientArgs& a, std::vector<Tensor>& d) {
          if (a.want(0)) d[0] = Apply(OpKind::kReluGrad, {a.x[0], a.dy}, {}, {});
        },
        PerElement<1>),
    Unary(
        OpKind::kGelu, "gelu",
        [](const GradientArgs& a, std::vector<Tensor>& d) {
          if (a.want(0)) d[0] = Apply(OpKind::kGeluGrad, {a.x[0], a.dy}, {}, {});
        },
        PerElement<8, 1>),
    Unary(
        OpKind::kSilu, "silu",
        [](const GradientArgs& a, std::vector<Tensor>& d) {
          if (a.want(0)) d[0] = Apply(OpKind::kSiluGrad, {a.x[0], a.dy}, {}, {});
        },
        PerElement<3, 1>),
    Binary(
        OpKind::kAdd, "add",
        [](const GradientArgs& a, std::vector<Tensor>& d) {
          if (a.want(0)) d[0] = Unbroadcast(a.dy, a.x[0].shape());
          if (a.want(1)) d[1] = Unbroadcast(a.dy, a.x[1].shape());
        },
        PerElement<1>),
    Binary(
        OpKind::kSub, "sub",
        [](const GradientArgs& a, std::vector<Tensor>& d) {
          if (a.want(0)) d[0] = Unbroadcast(a.dy, a.x[0].shape());
          if (a.want(1)) d[1] = Unbroadcast(-a.dy, a.x[1].shape());
        },
        PerElement<1>),
    Binary(
        OpKind::kMul, "mul",
        [](const GradientArgs& a, std::vector<Tensor>& d) {
          if (a.want(0)) d[0] = Unbroadcast(a.dy * a.x[1], a.x[0].shape());
          if (a.want(1)) d[1] = Unbroadcast(a.dy * a.x[0], a.x[1].shape());
        },
        PerElement<1>),
    Binary(
        OpKind::kDiv, "div",
        [](const GradientArgs& a, std::vector<Tensor>& d) {
          if (a.want(0)) d[0] = Unbroadcast(a.dy / a.x[1], a.x[0].shape());
          if (a.want(1)) d[1] = Unbroadcast(-(a.dy * a.y / a.x[1]), a.x[1].shape());
        },
        PerElement<1>),
    Binary(
        OpKind::kPow, "pow",
        [](const GradientArgs& a, std::vector<Tensor>& d) {
          if (a.want(0)) d[0] = Unbroadcast(a.dy * a.x[1] * pow(a.x[0], a.x[1] - 1.0), a.x[0].shape());
          if (a.want(1)) d[1] = Unbroadcast(a.dy * a.y * log(a.x[0]), a.x[1].shape());
        },
        PerElement<0, 1>),
    Binary(
        OpKind::kMaximum, "maximum",
        [](const GradientArgs& a, std::vector<Tensor>& d) {
          // Ties go to the first operand.
          Tensor first = equal(a.y, a.x[0]);
          Tensor zero = Zeros(a.dy, {});
          if (a.want(0)) d[0] = Unbroadcast(where(first, a.dy, zero), a.x[0].shape());
          if (a.want(1)) d[1] = Unbroadcast(where(first, zero, a.dy), a.x[1].shape());
        },
        PerElement<1>),
    Binary(OpKind::kEqual, "equal", NoGradient, PerElement<1>),
    {.kind = OpKind::kWhere,
     .name = "where",
     .arity = 3,
     .family = OpFamily::kSelect,
     .result_type = OperandsBroadcastType,
     .gradient =
         [](const GradientArgs& a, std::vector<Tensor>& d) {
           Tensor zero = Zeros(a.dy, {});
           if (a.want(1)) d[1] = Unbroadcast(where(a.x[0], a.dy, zero), a.x[1].shape());
           if (a.want(2)) d[2] = Unbroadcast(where(a.x[0], zero, a.dy), a.x[2].shape());
         },
     .cost = PerElement<1>},
    {.kind = OpKind::kConvert,
     .name = "convert",
     .arity = 1,
     .family = OpFamily::kConvert,
     .moves_any_dtype = true,
     .attributes = {{"dtype", K::kString}},
     .result_type = ConvertType,
     .gradient =
         [](const GradientArgs& a, std::vector<Tensor>& d) {
           // Between float types the gradient converts back; across i32
           // there is none.
           if (a.want(0) && IsComputedFloat(a.x[0].dtype()) && IsComputedFloat(a.y.dtype())) {
             d[0] = convert(a.dy, a.x[0].dtype());
           }
         },
     .cost = MovesBytes},
    UnaryGrad(OpKind::kGeluGrad, "gelu_grad", PerElement<12, 1>),
    UnaryGrad(OpKind::kSiluGrad, "silu_grad", PerElement<6, 1>),
    UnaryGrad(OpKind::kReluGrad, "relu_grad", PerElement<1>),
};

Tensor UnaryAt(OpKind op, const Tensor& x, const SourceLoc& loc) { return ApplyAt(op, {x}, {}, loc); }
Tensor BinaryAt(OpKind op, const Tensor& x, const Tensor& y, const SourceLoc& loc) {
  return ApplyAt(op, {x, y}, {}, loc);
}

}  // namespace

absl::Span<const OpDef> ElementwiseOps() { return kElementwiseOps; }

}  // namespace ir::ops

using ir::OpKind;
using ir::ops::BinaryAt;
using ir::ops::Scalar;
using ir::ops::UnaryAt;

Tensor operator+(Located a, const Tensor& b) { return BinaryAt(OpKind::kAdd, a.tensor, b, a.location); }
Tensor operator-(Located a, const Tensor& b) { return BinaryAt(OpKind::kSub, a.tensor, b, a.location); }
Tensor operator*(Located a, const Tensor& b) { return BinaryAt(OpKind::kMul, a.tensor, b, a.location); }
Tensor operator/(Located a, const Tensor& b) { return BinaryAt(OpKind::kDiv, a.tensor, b, a.location); }
Tensor operator+(Located a, double b) {
  return BinaryAt(OpKind::kAdd, a.tensor, Scalar(a.tensor, b, a.location), a.location);
}
Tensor operator-(Located a, double b) {
  return BinaryAt(OpKind::kSub, a.tensor, Scalar(a.tensor, b, a.location), a.location);
}
Tensor operator*(Located a, double b) {
  return BinaryAt(OpKind::kMul, a.tensor, Scalar(a.tensor, b, a.location), a.location);
}
Tensor operator/(Located a, double b) {
  return BinaryAt(OpKind::kDiv, a.tensor, Scalar(a.tensor, b, a.location), a.location);
}
Tensor operator+(double a, Located b) {
  return BinaryAt(OpKind::kAdd, Scalar(b.tensor, a, b.location), b.tensor, b.location);
}
Tensor operator-(double a, Located b) {
  return BinaryAt(OpKind::kSub, Scalar(b.tensor, a, b.location), b.tensor, b.location);
}
Tensor operator*(double a, Located b) {
  return BinaryAt(OpKind::kMul, Scalar(b.tensor, a, b.location), b.tensor, b.location);
}
Tensor operator/(double a, Located b) {
  return BinaryAt(OpKind::kDiv, Scalar(b.tensor, a, b.location), b.tensor, b.location);
}
Tensor operator-(Located a) { return UnaryAt(OpKind::kNeg, a.tensor, a.location); }

Tensor exp(const Tensor& x, SourceLoc loc) { return UnaryAt(OpKind::kExp, x, loc); }
Tensor expm1(const Tensor& x, SourceLoc loc) { return UnaryAt(OpKind::kExpm1, x, loc); }
Tensor log(const Tensor& x, SourceLoc loc) { return UnaryAt(OpKind::kLog, x, loc); }
Tensor tanh(const Tensor& x, SourceLoc loc) { return UnaryAt(OpKind::kTanh, x, loc); }
Tensor sin(const Tensor& x, SourceLoc loc) { return UnaryAt(OpKind::kSin, x, loc); }
Tensor cos(const Tensor& x, SourceLoc loc) { return UnaryAt(OpKind::kCos, x, loc); }
Tensor sqrt(const Tensor& x, SourceLoc loc) { return UnaryAt(OpKind::kSqrt, x, loc); }
Tensor rsqrt(const Tensor& x, SourceLoc loc) { return UnaryAt(OpKind::kRsqrt, x, loc); }
Tensor relu(const Tensor& x, SourceLoc loc) { return UnaryAt(OpKind::kRelu, x, loc); }
Tensor gelu(const Tensor& x, SourceLoc loc) { return UnaryAt(OpKind::kGelu, x, loc); }
Tensor silu(const Tensor& x, SourceLoc loc) { return UnaryAt(OpKind::kSilu, x, loc); }
Tensor pow(const Tensor& x, const Tensor& y, SourceLoc loc) { return BinaryAt(OpKind::kPow, x, y, loc); }
Tensor pow(double x, const Tensor& y, SourceLoc loc) { return BinaryAt(OpKind::kPow, Scalar(y, x, loc), y, loc); }
Tensor maximum(const Tensor& x, const Tensor& y, SourceLoc loc) { return BinaryAt(OpKind::kMaximum, x, y, loc); }
Tensor equal(const Tensor& x, const Tensor& y, SourceLoc loc) { return BinaryAt(OpKind::kEqual, x, y, loc); }
Tensor where(const Tensor& cond, const Tensor& x, const Tensor& y, SourceLoc loc) {
  return ir::ops::ApplyAt(OpKind::kWhere, {cond, x, y}, {}, loc);
}
Tensor convert(const Tensor& x, ir::DType dtype, SourceLoc loc) {
  if (x.valid() && x.dtype() == dtype) return x;
  return ir::ops::ApplyAt(OpKind::kConvert, {x}, ir::Attributes{{"dtype", std::string(ir::DTypeName(dtype))}}, loc);
}

}  // namespace tandem
