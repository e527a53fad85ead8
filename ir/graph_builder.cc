#include "ir/graph_builder.h"

#include "absl/strings/str_cat.h"
#include "ir/limits.h"
#include "ir/shape_rules.h"

namespace tandem::ir {

ValueId GraphBuilder::Add(OpKind op, std::vector<ValueId> operands, Attributes attributes,
                          const SourceLocation& location) {
  std::vector<TensorType> types;
  types.reserve(operands.size());
  for (ValueId operand : operands) {
    if (operand == kInvalidValue) return kInvalidValue;
    types.push_back(graph_->type(operand));
  }
  absl::StatusOr<TensorType> type = InferResultType(op, types, attributes);
  if (type.ok()) {
    if (absl::Status bytes = CheckedNumBytes(*type).status(); !bytes.ok()) {
      type = absl::InvalidArgumentError(absl::StrCat(OpName(op), ": ", bytes.message()));
    }
  }
  if (!type.ok()) {
    Fail(location_override_ ? *location_override_ : location, type.status().message());
    return kInvalidValue;
  }
  return Append(op, std::move(operands), std::move(attributes), *std::move(type), location);
}

ValueId GraphBuilder::AddInput(const std::string& name, const std::string& role, TensorType type,
                               const SourceLocation& location) {
  if (absl::Status bytes = CheckedNumBytes(type).status(); !bytes.ok()) {
    Fail(location_override_ ? *location_override_ : location, absl::StrCat(role, " '", name, "': ", bytes.message()));
    return kInvalidValue;
  }
  return Append(OpKind::kInput, {}, Attributes{{"name", name}, {"role", role}}, std::move(type),
                location);
}

ValueId GraphBuilder::AddConstant(double value, TensorType type, const SourceLocation& location) {
  return Append(OpKind::kConstant, {}, Attributes{{"value", value}}, std::move(type), location);
}

void GraphBuilder::Fail(const SourceLocation& location, absl::string_view message) {
  if (!status_.ok()) return;
  status_ = absl::InvalidArgumentError(absl::StrCat(location.ToString(), ": ", message));
}

ValueId GraphBuilder::Append(OpKind op, std::vector<ValueId> operands, Attributes attributes,
                             TensorType type, const SourceLocation& location) {
  Node node;
  node.op = op;
  node.operands = std::move(operands);
  node.attributes = std::move(attributes);
  node.type = std::move(type);
  node.stage = stage_;
  node.phase = phase_;
  node.location = location_override_ ? *location_override_ : location;
  return graph_->Append(std::move(node));
}

}  // namespace tandem::ir
