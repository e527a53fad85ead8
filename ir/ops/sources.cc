// Sources: input and constant. Their type is declared, not inferred, and no
// gradient flows through them.
#include "ir/ops/op_rules.h"

namespace tandem {
namespace ir::ops {
namespace {

using K = AttributeKind;

constexpr OpDef kSourceOps[] = {
    {.kind = OpKind::kInput,
     .name = "input",
     .arity = 0,
     .family = OpFamily::kSource,
     .moves_any_dtype = true,
     .attributes = {{"name", K::kString}, {"role", K::kString}},
     .gradient = NoGradient},
    {.kind = OpKind::kConstant,
     .name = "constant",
     .arity = 0,
     .family = OpFamily::kSource,
     .attributes = {{"value", K::kDouble}},
     .gradient = NoGradient,
     .cost = MovesBytes},
};

}  // namespace

absl::Span<const OpDef> SourceOps() { return kSourceOps; }

}  // namespace ir::ops

Tensor full(const Tensor& like, ir::Shape shape, double value, SourceLoc loc) {
  if (!like.valid()) return like;
  const ir::DType dtype = ir::IsComputedFloat(like.dtype()) ? like.dtype() : ir::DType::kF32;
  ir::GraphBuilder* builder = like.builder();
  return Tensor(builder, builder->AddConstant(value, ir::TensorType{dtype, std::move(shape)}, ir::ToLocation(loc)));
}

}  // namespace tandem
