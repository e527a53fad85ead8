// Attention's position ops: causal_mask over the last two axes and the
// rotary position embedding.
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

absl::StatusOr<TensorType> RotatedType(OpKind op, absl::Span<const TensorType> types, const Attributes& attributes) {
  if (absl::Status s = RequireSameFloat(op, types); !s.ok()) return s;
  if (absl::Status s = RequireRankAtLeast(op, types, 0, 2); !s.ok()) return s;
  if (types[0].shape.back() % 2 != 0) return Error(op, "the last axis must have an even extent", types);
  const double theta = attributes.GetDoubleOr("theta", 0.0);
  if (!(theta > 1.0) || !std::isfinite(theta)) {
    return Error(op, absl::StrCat("theta ", theta, " must be a finite number above 1"), types);
  }
  const int64_t inverse = attributes.GetIntOr("inverse", 0);
  if (inverse != 0 && inverse != 1) return Error(op, absl::StrCat("inverse ", inverse, " must be 0 or 1"), types);
  return types[0];
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
     .family = OpFamily::kRotary,
     .attributes = {{"theta", K::kDouble}, {"inverse", K::kInt}},
     .result_type = RotatedType,
     .gradient =
         [](const GradientArgs& a, std::vector<Tensor>& d) {
           // A rotation's adjoint is the rotation by the opposite angle.
           if (a.want(0)) {
             d[0] = rotary(a.dy, a.node.attributes.GetDouble("theta"), a.node.attributes.GetInt("inverse") == 0);
           }
         },
     .cost = PerElement<3, 1>},
};

}  // namespace

absl::Span<const OpDef> AttentionOps() { return kAttentionOps; }

}  // namespace ir::ops

Tensor causal_mask(const Tensor& x, double fill, SourceLoc loc) {
  return ir::ops::ApplyAt(ir::OpKind::kCausalMask, {x}, ir::Attributes{{"fill", fill}}, loc);
}
Tensor rotary(const Tensor& x, double theta, bool inverse, SourceLoc loc) {
  return ir::ops::ApplyAt(ir::OpKind::kRotary, {x},
                          ir::Attributes{{"theta", theta}, {"inverse", int64_t{inverse ? 1 : 0}}}, loc);
}

}  // namespace tandem
