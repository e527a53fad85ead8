#include "ir/ops/op_rules.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tandem::ir::ops {

absl::Status Error(OpKind op, absl::string_view what, absl::Span<const TensorType> types) {
  std::vector<std::string> names;
  for (const TensorType& type : types) names.push_back(TypeToString(type));
  return absl::InvalidArgumentError(
      absl::StrCat(OpName(op), ": ", what, " (operands: ", absl::StrJoin(names, ", "), ")"));
}

absl::Status RequireDType(OpKind op, absl::Span<const TensorType> types, size_t index, DType dtype) {
  if (types[index].dtype != dtype) {
    return Error(op, absl::StrCat("operand ", index, " must be ", DTypeName(dtype)), types);
  }
  return absl::OkStatus();
}

absl::Status RequireSameFloat(OpKind op, absl::Span<const TensorType> types) {
  if (types.empty()) return absl::OkStatus();
  const DType dtype = types[0].dtype;
  if (!IsComputedFloat(dtype)) return Error(op, "operand 0 must be f32 or bf16", types);
  for (size_t i = 1; i < types.size(); ++i) {
    if (types[i].dtype != dtype) {
      return Error(op, absl::StrCat("operand ", i, " must be ", DTypeName(dtype), " as operand 0 is (convert one)"),
                   types);
    }
  }
  return absl::OkStatus();
}

absl::Status RequireFloat(OpKind op, absl::Span<const TensorType> types, size_t index) {
  if (!IsComputedFloat(types[index].dtype)) {
    return Error(op, absl::StrCat("operand ", index, " must be f32 or bf16"), types);
  }
  return absl::OkStatus();
}

absl::Status RequireRankAtLeast(OpKind op, absl::Span<const TensorType> types, size_t index, int64_t rank) {
  if (types[index].rank() < rank) {
    return Error(op, absl::StrCat("operand ", index, " needs rank >= ", rank), types);
  }
  return absl::OkStatus();
}

namespace {

absl::Status RequireSameShapes(OpKind op, absl::Span<const TensorType> types) {
  for (size_t i = 1; i < types.size(); ++i) {
    if (types[i].shape != types[0].shape) return Error(op, "operand shapes differ", types);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TensorType> SameFloatType(OpKind op, absl::Span<const TensorType> types, const Attributes&) {
  if (absl::Status s = RequireSameFloat(op, types); !s.ok()) return s;
  if (absl::Status s = RequireSameShapes(op, types); !s.ok()) return s;
  return types[0];
}

absl::StatusOr<TensorType> LastAxisSameType(OpKind op, absl::Span<const TensorType> types, const Attributes&) {
  if (absl::Status s = RequireSameFloat(op, types); !s.ok()) return s;
  if (absl::Status s = RequireRankAtLeast(op, types, 0, 1); !s.ok()) return s;
  if (absl::Status s = RequireSameShapes(op, types); !s.ok()) return s;
  return types[0];
}

Tensor Zeros(const Tensor& like, Shape shape) { return full(like, std::move(shape), 0.0); }

Shape KeptShape(const Shape& input, const std::vector<int64_t>& axes) {
  Shape kept = input;
  for (int64_t axis : axes) kept[axis] = 1;
  return kept;
}

double Bytes(const TensorType& type) {
  return static_cast<double>(type.num_elements()) * static_cast<double>(DTypeSize(type.dtype));
}

OpCost MovesBytes(const Node& node, absl::Span<const TensorType> operands) {
  OpCost cost;
  cost.bytes = Bytes(node.type);
  for (const TensorType& operand : operands) cost.bytes += Bytes(operand);
  return cost;
}

Tensor ApplyAt(OpKind op, const std::vector<Tensor>& operands, Attributes attributes, const SourceLoc& loc) {
  return Apply(op, operands, std::move(attributes), ToLocation(loc));
}

Tensor Scalar(const Tensor& like, double value, const SourceLoc& loc) { return full(like, {}, value, loc); }

}  // namespace tandem::ir::ops
