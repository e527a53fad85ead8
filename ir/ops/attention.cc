// Attention: causal_mask over the last two axes, the rotary position
// embedding, and the fused causal attention with its gradient.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "ir/ops/op_rules.h"

namespace tandem {
namespace ir::ops {
namespace {

using K = AttributeKind;

absl::StatusOr<TensorType> MaskedType(OpKind op, absl::Span<const TensorType> types, const Attributes&) {
  if (absl::Status s = RequireSameFloat(op, types); !s.ok()) return s;
  if (absl::Status s = RequireRankAtLeast(op, types, 0, 2); !s.ok()) return s;
  const Shape& shape = types[0].shape;
  if (shape[shape.size() - 1] != shape[shape.size() - 2]) return Error(op, "the last two axes must be square", types);
  return types[0];
}

// The float operands: all but a trailing positions operand.
absl::Span<const TensorType> Floats(absl::Span<const TensorType> types, size_t arity) {
  return types.subspan(0, arity);
}

absl::StatusOr<TensorType> RotatedType(OpKind op, absl::Span<const TensorType> types, const Attributes& attributes) {
  if (absl::Status s = RequireSameFloat(op, Floats(types, 1)); !s.ok()) return s;
  if (absl::Status s = RequireRankAtLeast(op, types, 0, 2); !s.ok()) return s;
  if (types[0].shape.back() % 2 != 0) return Error(op, "the last axis must have an even extent", types);
  if (types.size() > 1) {
    if (absl::Status s = RequireDType(op, types, 1, DType::kI32); !s.ok()) return s;
    const Shape rows(types[0].shape.begin(), types[0].shape.end() - 1);
    if (types[1].shape != rows) return Error(op, "positions must have x's shape without its last axis", types);
  }
  const double theta = attributes.GetDoubleOr("theta", 0.0);
  if (!(theta > 1.0) || !std::isfinite(theta)) {
    return Error(op, absl::StrCat("theta ", theta, " must be a finite number above 1"), types);
  }
  const int64_t inverse = attributes.GetIntOr("inverse", 0);
  if (inverse != 0 && inverse != 1) return Error(op, absl::StrCat("inverse ", inverse, " must be 0 or 1"), types);
  return types[0];
}

// q [B, H, S, D], k and v [B, G, T, D] of one float type, G dividing H;
// then S == T, or positions i32 [B, S] (attention only: `positioned`).
absl::Status CheckAttentionOperands(OpKind op, absl::Span<const TensorType> types, const Attributes& attributes,
                                    size_t floats) {
  if (absl::Status s = RequireSameFloat(op, Floats(types, floats)); !s.ok()) return s;
  for (size_t i = 0; i < 3; ++i) {
    if (types[i].rank() != 4) return Error(op, "q, k and v must have rank 4: [batch, heads, seq, width]", types);
  }
  const Shape &q = types[0].shape, &k = types[1].shape, &v = types[2].shape;
  if (k != v) return Error(op, "k and v must have one shape", types);
  if (k[0] != q[0] || k[3] != q[3]) return Error(op, "k and v must have q's batch and width", types);
  const bool positioned = types.size() > floats;
  if (!positioned && k[2] != q[2]) {
    return Error(op, "k and v must have q's sequence (or attention needs the queries' positions)", types);
  }
  if (positioned) {
    if (absl::Status s = RequireDType(op, types, floats, DType::kI32); !s.ok()) return s;
    if (types[floats].shape != Shape{q[0], q[2]}) return Error(op, "positions must be [batch, queries]", types);
  }
  if (k[1] < 1 || q[1] % k[1] != 0) return Error(op, "the key/value heads must divide the query heads", types);
  const double scale = attributes.GetDoubleOr("scale", 0.0);
  if (!std::isfinite(scale)) return Error(op, absl::StrCat("scale ", scale, " must be finite"), types);
  return absl::OkStatus();
}

absl::StatusOr<TensorType> AttendedType(OpKind op, absl::Span<const TensorType> types, const Attributes& attributes) {
  if (absl::Status s = CheckAttentionOperands(op, types, attributes, 3); !s.ok()) return s;
  return types[0];
}

absl::StatusOr<TensorType> AttentionGradType(OpKind op, absl::Span<const TensorType> types,
                                             const Attributes& attributes) {
  if (absl::Status s = CheckAttentionOperands(op, types, attributes, 4); !s.ok()) return s;
  if (types[3].shape != types[0].shape) return Error(op, "dy must have q's shape", types);
  return TensorType{types[0].dtype, {types[0].num_elements() + 2 * types[1].num_elements()}};
}

// The scores a query row computes against the keys at or before it,
// B * H * T(T+1)/2 in all; with positions, at most B * H * S * T (every
// query against the whole cache, which decoding nears).
double CausalScores(absl::Span<const TensorType> operands) {
  const Shape& q = operands[0].shape;
  const double rows = static_cast<double>(q[0]) * static_cast<double>(q[1]) * static_cast<double>(q[2]);
  if (operands.size() == 4 && operands[3].dtype == DType::kI32) {
    return rows * static_cast<double>(operands[1].shape[2]);
  }
  return rows * static_cast<double>(q[2] + 1) / 2.0;
}

// Two products of width D per score (q.k, then p.v) and one exp.
OpCost AttentionCost(const Node& node, absl::Span<const TensorType> operands) {
  OpCost cost = MovesBytes(node, operands);
  const double scores = CausalScores(operands);
  cost.flops = 4.0 * scores * static_cast<double>(operands[0].shape[3]);
  cost.transcendentals = scores;
  return cost;
}
// Five products per score (q.k and dy.v again, then dq, dk, dv) and one exp.
OpCost AttentionGradCost(const Node& node, absl::Span<const TensorType> operands) {
  OpCost cost = MovesBytes(node, operands);
  const double scores = CausalScores(operands);
  cost.flops = 10.0 * scores * static_cast<double>(operands[0].shape[3]);
  cost.transcendentals = scores;
  return cost;
}

constexpr OpDef kAttentionOps[] = {
    {.kind = OpKind::kCausalMask,
     .name = "causal_mask",
     .arity = 1,
     .family = OpFamily::kRowwise,
     .attributes = {{"fill", K::kDouble}},
     .result_type = MaskedType,
     .gradient =
         [](const GradientArgs& a, std::vector<Tensor>& d) {
           if (a.want(0)) d[0] = causal_mask(a.dy, 0.0);
         },
     .cost = PerElement<1>},
    {.kind = OpKind::kRotary,
     .name = "rotary",
     .arity = 1,
     .optional_operands = 1,
     .family = OpFamily::kRotary,
     .attributes = {{"theta", K::kDouble}, {"inverse", K::kInt}},
     .result_type = RotatedType,
     .gradient =
         [](const GradientArgs& a, std::vector<Tensor>& d) {
           // A rotation's adjoint is the rotation by the opposite angle.
           if (!a.want(0)) return;
           const double theta = a.node.attributes.GetDouble("theta");
           const bool inverse = a.node.attributes.GetInt("inverse") == 0;
           d[0] = a.x.size() > 1 ? rotary_at(a.dy, a.x[1], theta, inverse) : rotary(a.dy, theta, inverse);
         },
     .cost = PerElement<3, 1>},
    {.kind = OpKind::kAttention,
     .name = "attention",
     .arity = 3,
     .optional_operands = 1,
     .family = OpFamily::kAttention,
     .attributes = {{"scale", K::kDouble}},
     .result_type = AttendedType,
     .gradient =
         [](const GradientArgs& a, std::vector<Tensor>& d) {
           if (a.x.size() > 3) {
             a.dy.builder()->Fail(a.node.location,
                                  "attention at positions (queries against a cache) has no gradient rule: "
                                  "differentiate the causal form");
             return;
           }
           // One helper computes all three; each wanted one is its slice.
           const Tensor grads = Apply(OpKind::kAttentionGrad, {a.x[0], a.x[1], a.x[2], a.dy},
                                      Attributes{{"scale", a.node.attributes.GetDouble("scale")}}, {});
           int64_t begin = 0;
           for (size_t i = 0; i < 3; ++i) {
             const int64_t n = a.x[i].type().num_elements();
             if (a.want(i)) d[i] = reshape(slice(grads, 0, begin, begin + n), a.x[i].shape());
             begin += n;
           }
         },
     .cost = AttentionCost},
    {.kind = OpKind::kAttentionGrad,
     .name = "attention_grad",
     .arity = 4,
     .family = OpFamily::kAttention,
     .attributes = {{"scale", K::kDouble}},
     .result_type = AttentionGradType,
     .cost = AttentionGradCost},
};

}  // namespace

absl::Span<const OpDef> AttentionOps() { return kAttentionOps; }

}  // namespace ir::ops

Tensor causal_mask(const Tensor& x, double fill, SourceLoc loc) {
  return ir::ops::ApplyAt(ir::OpKind::kCausalMask, {x}, ir::Attributes{{"fill", fill}}, loc);
}
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, double scale, SourceLoc loc) {
  return ir::ops::ApplyAt(ir::OpKind::kAttention, {q, k, v}, ir::Attributes{{"scale", scale}}, loc);
}
Tensor attention_at(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& positions, double scale,
                    SourceLoc loc) {
  return ir::ops::ApplyAt(ir::OpKind::kAttention, {q, k, v, positions}, ir::Attributes{{"scale", scale}}, loc);
}
Tensor rotary(const Tensor& x, double theta, bool inverse, SourceLoc loc) {
  return ir::ops::ApplyAt(ir::OpKind::kRotary, {x},
                          ir::Attributes{{"theta", theta}, {"inverse", int64_t{inverse ? 1 : 0}}}, loc);
}
Tensor rotary_at(const Tensor& x, const Tensor& positions, double theta, bool inverse, SourceLoc loc) {
  return ir::ops::ApplyAt(ir::OpKind::kRotary, {x, positions},
                          ir::Attributes{{"theta", theta}, {"inverse", int64_t{inverse ? 1 : 0}}}, loc);
}

}  // namespace tandem
