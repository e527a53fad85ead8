// Shape and dtype rules: the result type of an op from its operands' types.
#ifndef TANDEM_IR_SHAPE_RULES_H_
#define TANDEM_IR_SHAPE_RULES_H_

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "ir/attributes.h"
#include "ir/dtype.h"
#include "ir/op.h"

namespace tandem::ir {

// The result type of `op` applied to operands of `operand_types` with
// `attributes`, or InvalidArgument saying what does not fit, e.g.
// "matmul: contracting dimensions differ: f32[8,64] x f32[32,10]".
// Sources (input, constant) have no rule: their type is declared.
absl::StatusOr<TensorType> InferResultType(OpKind op, absl::Span<const TensorType> operand_types,
                                           const Attributes& attributes);

// The NumPy broadcast of two shapes, or InvalidArgument.
absl::StatusOr<Shape> BroadcastShapes(const Shape& a, const Shape& b);

}  // namespace tandem::ir

#endif  // TANDEM_IR_SHAPE_RULES_H_
