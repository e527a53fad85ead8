#include "ir/tensor.h"

namespace tandem {
namespace ir {

SourceLocation ToLocation(const SourceLoc& loc) {
  return MakeSourceLocation(loc.file_name(), static_cast<int32_t>(loc.line()));
}

Tensor Apply(OpKind op, const std::vector<Tensor>& operands, Attributes attributes,
             const SourceLocation& location) {
  GraphBuilder* builder = nullptr;
  std::vector<ValueId> ids;
  ids.reserve(operands.size());
  for (const Tensor& operand : operands) {
    if (!operand.valid()) return Tensor(operand.builder(), kInvalidValue);
    if (builder == nullptr) builder = operand.builder();
    ids.push_back(operand.id());
  }
  if (builder == nullptr) return Tensor();
  return Tensor(builder, builder->Add(op, std::move(ids), std::move(attributes), location));
}

}  // namespace ir

ir::TensorType Tensor::type() const { return valid() ? builder_->graph().type(id_) : ir::TensorType{}; }

int64_t Tensor::dim(int64_t axis) const {
  const ir::Shape dims = shape();
  const int64_t rank = static_cast<int64_t>(dims.size());
  if (axis < 0) axis += rank;
  return axis >= 0 && axis < rank ? dims[axis] : 0;
}

}  // namespace tandem
