// Row-wise normalizations over the last axis: softmax, log_softmax,
// layer_norm, normalize, and their backward helpers.
#include "absl/strings/str_cat.h"
#include "ir/gradients.h"
#include "ir/ops/op_rules.h"

namespace tandem {
namespace ir::ops {
namespace {

using K = AttributeKind;

absl::StatusOr<TensorType> LayerNormType(OpKind op, absl::Span<const TensorType> types, const Attributes&) {
  if (absl::Status s = RequireSameFloat(op, types); !s.ok()) return s;
  if (absl::Status s = RequireRankAtLeast(op, types, 0, 1); !s.ok()) return s;
  const Shape feature{types[0].shape.back()};
  if (types[1].shape != feature || types[2].shape != feature) {
    return Error(op, absl::StrCat("gamma and beta must have shape ", ShapeToString(feature)), types);
  }
  return types[0];
}

constexpr OpDef Rowwise(OpKind kind, const char* name, int arity, OpFamily family, GradientRule gradient,
                        CostRule cost, bool eps = false) {
  OpDef def{.kind = kind,
            .name = name,
            .arity = arity,
            .family = family,
            .result_type = LastAxisSameType,
            .gradient = gradient,
            .cost = cost};
  if (eps) def.attributes[0] = {"eps", K::kDouble};
  return def;
}

constexpr OpDef kNormalizationOps[] = {
    Rowwise(OpKind::kSoftmax, "softmax", 1, OpFamily::kRowwise,
            [](const GradientArgs& a, std::vector<Tensor>& d) {
              if (a.want(0)) d[0] = Apply(OpKind::kSoftmaxGrad, {a.y, a.dy}, {}, {});
            },
            PerElement<4, 1>),
    Rowwise(OpKind::kLogSoftmax, "log_softmax", 1, OpFamily::kRowwise,
            [](const GradientArgs& a, std::vector<Tensor>& d) {
              if (a.want(0)) d[0] = Apply(OpKind::kLogSoftmaxGrad, {a.y, a.dy}, {}, {});
            },
            PerElement<4, 1>),
    {.kind = OpKind::kLayerNorm,
     .name = "layer_norm",
     .arity = 3,
     .family = OpFamily::kNormalization,
     .attributes = {{"eps", K::kDouble}},
     .result_type = LayerNormType,
     .gradient =
         [](const GradientArgs& a, std::vector<Tensor>& d) {
           const Attributes eps{{"eps", a.node.attributes.GetDouble("eps")}};
           if (a.want(0)) d[0] = Apply(OpKind::kNormalizeGrad, {a.x[0], a.dy * a.x[1]}, eps, {});
           if (a.want(1)) {
             Tensor xhat = Apply(OpKind::kNormalize, {a.x[0]}, eps, {});
             d[1] = Unbroadcast(a.dy * xhat, a.x[1].shape());
           }
           if (a.want(2)) d[2] = Unbroadcast(a.dy, a.x[2].shape());
         },
     .cost = PerElement<8>},
    Rowwise(OpKind::kNormalize, "normalize", 1, OpFamily::kNormalization,
            [](const GradientArgs& a, std::vector<Tensor>& d) {
              if (a.want(0)) d[0] = Apply(OpKind::kNormalizeGrad, {a.x[0], a.dy}, a.node.attributes, {});
            },
            PerElement<6>, /*eps=*/true),
    Rowwise(OpKind::kSoftmaxGrad, "softmax_grad", 2, OpFamily::kRowwise, nullptr, PerElement<4>),
    Rowwise(OpKind::kLogSoftmaxGrad, "log_softmax_grad", 2, OpFamily::kRowwise, nullptr, PerElement<4, 1>),
    Rowwise(OpKind::kNormalizeGrad, "normalize_grad", 2, OpFamily::kNormalization, nullptr, PerElement<10>,
            /*eps=*/true),
};

}  // namespace

absl::Span<const OpDef> NormalizationOps() { return kNormalizationOps; }

}  // namespace ir::ops

using ir::OpKind;
using ir::ops::ApplyAt;

Tensor softmax(const Tensor& x, SourceLoc loc) { return ApplyAt(OpKind::kSoftmax, {x}, {}, loc); }
Tensor log_softmax(const Tensor& x, SourceLoc loc) { return ApplyAt(OpKind::kLogSoftmax, {x}, {}, loc); }
Tensor layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, SourceLoc loc) {
  return ApplyAt(OpKind::kLayerNorm, {x, gamma, beta}, ir::Attributes{{"eps", eps}}, loc);
}

}  // namespace tandem
