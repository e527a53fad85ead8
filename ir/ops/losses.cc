// cross_entropy over the last axis, and its backward helper.
#include "absl/strings/str_cat.h"
#include "ir/ops/op_rules.h"

namespace tandem {
namespace ir::ops {
namespace {

absl::StatusOr<TensorType> LossType(OpKind op, absl::Span<const TensorType> types, const Attributes&) {
  if (absl::Status s = RequireDType(op, types, 0, DType::kF32); !s.ok()) return s;
  if (absl::Status s = RequireDType(op, types, 1, DType::kI32); !s.ok()) return s;
  if (absl::Status s = RequireRankAtLeast(op, types, 0, 1); !s.ok()) return s;
  const Shape batch(types[0].shape.begin(), types[0].shape.end() - 1);
  if (types[1].shape != batch) return Error(op, absl::StrCat("labels must have shape ", ShapeToString(batch)), types);
  return TensorType{DType::kF32, batch};
}

absl::StatusOr<TensorType> LossGradType(OpKind op, absl::Span<const TensorType> types, const Attributes&) {
  if (absl::Status s = RequireDType(op, types, 1, DType::kI32); !s.ok()) return s;
  const Shape batch(types[0].shape.begin(), types[0].shape.end() - 1);
  if (types[1].shape != batch || types[2].shape != batch) {
    return Error(op, absl::StrCat("labels and dy must have shape ", ShapeToString(batch)), types);
  }
  return types[0];
}

constexpr OpDef kLossOps[] = {
    {.kind = OpKind::kCrossEntropy,
     .name = "cross_entropy",
     .arity = 2,
     .family = OpFamily::kCrossEntropy,
     .result_type = LossType,
     .gradient =
         [](const GradientArgs& a, std::vector<Tensor>& d) {
           if (a.want(0)) d[0] = Apply(OpKind::kCrossEntropyGrad, {a.x[0], a.x[1], a.dy}, {}, {});
         },
     .cost = PerOperandElement<4, 1>},
    {.kind = OpKind::kCrossEntropyGrad,
     .name = "cross_entropy_grad",
     .arity = 3,
     .family = OpFamily::kCrossEntropy,
     .result_type = LossGradType,
     .cost = PerElement<4, 1>},
};

}  // namespace

absl::Span<const OpDef> LossOps() { return kLossOps; }

}  // namespace ir::ops

Tensor cross_entropy(const Tensor& logits, const Tensor& labels, SourceLoc loc) {
  return ir::ops::ApplyAt(ir::OpKind::kCrossEntropy, {logits, labels}, {}, loc);
}

}  // namespace tandem
