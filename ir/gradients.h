// Pulling a cotangent back through one node, by the gradient rule of its
// op's definition (ir/op_def.h; the rules live with the ops in ir/ops/ and
// are written in the tensor API). Used by autodiff.
#ifndef TANDEM_IR_GRADIENTS_H_
#define TANDEM_IR_GRADIENTS_H_

#include <vector>

#include "absl/status/statusor.h"
#include "ir/graph_builder.h"
#include "ir/tensor.h"

namespace tandem::ir {

// Records, through `builder`, the ops that map the cotangent `dy` of node
// `id`'s result to a contribution for each operand i with wanted[i] set.
// Returns one Tensor per operand (invalid where not wanted). The caller sets
// the builder's stage, phase and location first. Ops that have no gradient
// rule (the backward helpers themselves: no second order) are Unimplemented.
absl::StatusOr<std::vector<Tensor>> PullBack(GraphBuilder& builder, ValueId id, const Tensor& dy,
                                             const std::vector<bool>& wanted);

// Sums `g` over the axes that broadcasting added to reach g's shape from
// `shape`, and reshapes the result to `shape`. Identity when shapes match.
Tensor Unbroadcast(const Tensor& g, const Shape& shape);

}  // namespace tandem::ir

#endif  // TANDEM_IR_GRADIENTS_H_
