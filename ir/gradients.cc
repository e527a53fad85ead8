#include "ir/gradients.h"

#include "absl/strings/str_cat.h"
#include "ir/op_def.h"

namespace tandem::ir {

Tensor Unbroadcast(const Tensor& g, const Shape& shape) {
  const Shape g_shape = g.shape();
  if (!g.valid() || g_shape == shape) return g;
  const int64_t rank = static_cast<int64_t>(g_shape.size());
  const int64_t lead = rank - static_cast<int64_t>(shape.size());
  std::vector<int64_t> axes;
  for (int64_t axis = 0; axis < rank; ++axis) {
    if (axis < lead || (shape[axis - lead] == 1 && g_shape[axis] != 1)) axes.push_back(axis);
  }
  Tensor reduced = axes.empty() ? g : reduce_sum(g, axes, /*keep_dims=*/true);
  return reduced.shape() == shape ? reduced : reshape(reduced, shape);
}

absl::StatusOr<std::vector<Tensor>> PullBack(GraphBuilder& builder, ValueId id, const Tensor& dy,
                                             const std::vector<bool>& wanted) {
  // Copy: appending nodes may move the graph's storage.
  const Node node = builder.graph().node(id);
  const OpDef& def = Def(node.op);
  if (def.gradient == nullptr) {
    return absl::UnimplementedError(absl::StrCat(node.location.ToString(), ": ", def.name,
                                                 " has no gradient rule (second-order gradients are not supported)"));
  }
  std::vector<Tensor> x;
  for (ValueId operand : node.operands) x.emplace_back(&builder, operand);
  const Tensor y(&builder, id);
  std::vector<Tensor> d(node.operands.size());
  def.gradient(GradientArgs{.node = node, .x = x, .y = y, .dy = dy, .wanted = wanted}, d);
  if (!builder.ok()) return builder.status();
  return d;
}

}  // namespace tandem::ir
