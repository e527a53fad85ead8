// What the op definitions of ir/ops/ share: the checks their result-type
// rules make, the helpers their gradient rules and tandem::Tensor functions
// use, the usual cost rules, and each family's list of definitions, which
// ir/op_def.cc gathers into the table. Internal to ir/.
#ifndef TANDEM_IR_OPS_OP_RULES_H_
#define TANDEM_IR_OPS_OP_RULES_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "ir/graph.h"
#include "ir/op_def.h"
#include "ir/tensor.h"

namespace tandem::ir::ops {

// ---- Result-type rules.

// InvalidArgument "<op>: <what> (operands: f32[2,3], ...)".
absl::Status Error(OpKind op, absl::string_view what, absl::Span<const TensorType> types);
absl::Status RequireDType(OpKind op, absl::Span<const TensorType> types, size_t index, DType dtype);
// Arithmetic: every operand of one computed float type (f32 or bf16), which
// becomes the result's. Mixing them takes an explicit convert.
absl::Status RequireSameFloat(OpKind op, absl::Span<const TensorType> types);
absl::Status RequireFloat(OpKind op, absl::Span<const TensorType> types, size_t index);
absl::Status RequireRankAtLeast(OpKind op, absl::Span<const TensorType> types, size_t index, int64_t rank);

// The rule of ops whose operands are of one float type and one shape, the
// result being of that type (unary ops; softmax and the row-wise gradients
// with rank >= 1).
absl::StatusOr<TensorType> SameFloatType(OpKind op, absl::Span<const TensorType> types, const Attributes&);
absl::StatusOr<TensorType> LastAxisSameType(OpKind op, absl::Span<const TensorType> types, const Attributes&);

// ---- Gradient rules.

// The rule of ops through which no gradient flows (sources, equal).
inline void NoGradient(const GradientArgs&, std::vector<Tensor>&) {}

// A tensor of `like`'s dtype and `shape`, all zeros.
Tensor Zeros(const Tensor& like, Shape shape);
// `input`'s shape with `axes` of extent 1 (a reduction's keep_dims result).
Shape KeptShape(const Shape& input, const std::vector<int64_t>& axes);

// ---- Cost rules.

double Bytes(const TensorType& type);
// Reads every operand and writes the result once; no arithmetic.
OpCost MovesBytes(const Node& node, absl::Span<const TensorType> operands);
// kFlops floating-point operations and kTranscendentals transcendental
// evaluations per result element, plus the bytes moved.
template <int kFlops, int kTranscendentals = 0>
OpCost PerElement(const Node& node, absl::Span<const TensorType> operands) {
  OpCost cost = MovesBytes(node, operands);
  const double elements = static_cast<double>(node.type.num_elements());
  cost.flops = kFlops * elements;
  cost.transcendentals = kTranscendentals * elements;
  return cost;
}
// Per element of operand 0 (a reduction reads more than it writes).
template <int kFlops, int kTranscendentals = 0>
OpCost PerOperandElement(const Node& node, absl::Span<const TensorType> operands) {
  OpCost cost = MovesBytes(node, operands);
  const double elements = operands.empty() ? 0.0 : static_cast<double>(operands[0].num_elements());
  cost.flops = kFlops * elements;
  cost.transcendentals = kTranscendentals * elements;
  return cost;
}

// ---- tandem::Tensor functions.

// `op` applied to `operands` at the caller's source location.
Tensor ApplyAt(OpKind op, const std::vector<Tensor>& operands, Attributes attributes, const SourceLoc& loc);
// A scalar constant beside `like`: of like's dtype where arithmetic computes
// on it (f32, bf16), else f32.
Tensor Scalar(const Tensor& like, double value, const SourceLoc& loc);

// ---- The families, for ir/op_def.cc.
absl::Span<const OpDef> SourceOps();
absl::Span<const OpDef> ElementwiseOps();
absl::Span<const OpDef> ReductionOps();
absl::Span<const OpDef> DataMovementOps();
absl::Span<const OpDef> MatMulOps();
absl::Span<const OpDef> NormalizationOps();
absl::Span<const OpDef> AttentionOps();
absl::Span<const OpDef> LossOps();
absl::Span<const OpDef> EmbeddingOps();

}  // namespace tandem::ir::ops

#endif  // TANDEM_IR_OPS_OP_RULES_H_
