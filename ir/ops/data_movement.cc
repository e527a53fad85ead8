// Data movement: pipeline_yield, reshape, transpose, broadcast, slice and
// concat. They move elements of any dtype and compute nothing.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/gradients.h"
#include "ir/ops/op_rules.h"
#include "ir/shape_rules.h"

namespace tandem {
namespace ir::ops {
namespace {

using K = AttributeKind;

absl::StatusOr<TensorType> OperandType(OpKind, absl::Span<const TensorType> types, const Attributes&) {
  return types[0];
}

absl::StatusOr<TensorType> ReshapedType(OpKind op, absl::Span<const TensorType> types,
                                        const Attributes& attributes) {
  Shape shape = attributes.GetInts("shape");
  if (NumElements(shape) != types[0].num_elements() ||
      std::any_of(shape.begin(), shape.end(), [](int64_t e) { return e < 0; })) {
    return Error(op, absl::StrCat("cannot reshape to ", ShapeToString(shape)), types);
  }
  return TensorType{types[0].dtype, shape};
}

absl::StatusOr<TensorType> TransposedType(OpKind op, absl::Span<const TensorType> types,
                                          const Attributes& attributes) {
  const std::vector<int64_t>& permutation = attributes.GetInts("permutation");
  std::vector<int64_t> sorted = permutation;
  std::sort(sorted.begin(), sorted.end());
  bool valid = static_cast<int64_t>(permutation.size()) == types[0].rank();
  for (size_t i = 0; valid && i < sorted.size(); ++i) valid = sorted[i] == static_cast<int64_t>(i);
  if (!valid) {
    return Error(op, absl::StrCat("[", absl::StrJoin(permutation, ","), "] is not a permutation of the axes"),
                 types);
  }
  TensorType out{types[0].dtype, {}};
  for (int64_t axis : permutation) out.shape.push_back(types[0].shape[axis]);
  return out;
}

absl::StatusOr<TensorType> BroadcastToType(OpKind op, absl::Span<const TensorType> types,
                                           const Attributes& attributes) {
  Shape shape = attributes.GetInts("shape");
  absl::StatusOr<Shape> joined = BroadcastShapes(types[0].shape, shape);
  if (!joined.ok() || *joined != shape) {
    return Error(op, absl::StrCat("cannot broadcast to ", ShapeToString(shape)), types);
  }
  return TensorType{types[0].dtype, shape};
}

absl::StatusOr<TensorType> SlicedType(OpKind op, absl::Span<const TensorType> types, const Attributes& attributes) {
  const TensorType& x = types[0];
  const int64_t axis = attributes.GetInt("axis");
  const int64_t start = attributes.GetInt("start");
  const int64_t limit = attributes.GetInt("limit");
  if (axis < 0 || axis >= x.rank()) return Error(op, absl::StrCat("axis ", axis, " out of range"), types);
  if (start < 0 || limit > x.shape[axis] || start >= limit) {
    return Error(op,
                 absl::StrCat("range [", start, ", ", limit, ") does not fit extent ", x.shape[axis], " of axis ",
                              axis),
                 types);
  }
  TensorType out = x;
  out.shape[axis] = limit - start;
  return out;
}

absl::StatusOr<TensorType> ConcatenatedType(OpKind op, absl::Span<const TensorType> types,
                                            const Attributes& attributes) {
  if (types.empty()) return Error(op, "needs at least one operand", types);
  const int64_t axis = attributes.GetInt("axis");
  TensorType out = types[0];
  if (axis < 0 || axis >= out.rank()) return Error(op, absl::StrCat("axis ", axis, " out of range"), types);
  for (size_t i = 1; i < types.size(); ++i) {
    const TensorType& t = types[i];
    bool fits = t.dtype == out.dtype && t.rank() == out.rank();
    for (int64_t d = 0; fits && d < t.rank(); ++d) fits = d == axis || t.shape[d] == out.shape[d];
    if (!fits) return Error(op, absl::StrCat("operand ", i, " does not match operand 0 off axis ", axis), types);
    out.shape[axis] += t.shape[axis];
  }
  return out;
}

constexpr OpDef kDataMovementOps[] = {
    {.kind = OpKind::kPipelineYield,
     .name = "pipeline_yield",
     .arity = 1,
     .family = OpFamily::kDataMovement,
     .moves_any_dtype = true,
     .result_type = OperandType,
     .gradient =
         [](const GradientArgs& a, std::vector<Tensor>& d) {
           if (a.want(0)) d[0] = a.dy;
         },
     .cost = MovesBytes},
    {.kind = OpKind::kReshape,
     .name = "reshape",
     .arity = 1,
     .family = OpFamily::kDataMovement,
     .moves_any_dtype = true,
     .attributes = {{"shape", K::kInts}},
     .result_type = ReshapedType,
     .gradient =
         [](const GradientArgs& a, std::vector<Tensor>& d) {
           if (a.want(0)) d[0] = reshape(a.dy, a.x[0].shape());
         },
     .cost = MovesBytes},
    {.kind = OpKind::kTranspose,
     .name = "transpose",
     .arity = 1,
     .family = OpFamily::kDataMovement,
     .moves_any_dtype = true,
     .attributes = {{"permutation", K::kInts}},
     .result_type = TransposedType,
     .gradient =
         [](const GradientArgs& a, std::vector<Tensor>& d) {
           if (!a.want(0)) return;
           const std::vector<int64_t>& permutation = a.node.attributes.GetInts("permutation");
           std::vector<int64_t> inverse(permutation.size());
           for (size_t i = 0; i < permutation.size(); ++i) inverse[permutation[i]] = static_cast<int64_t>(i);
           d[0] = transpose(a.dy, inverse);
         },
     .cost = MovesBytes},
    {.kind = OpKind::kBroadcast,
     .name = "broadcast",
     .arity = 1,
     .family = OpFamily::kDataMovement,
     .moves_any_dtype = true,
     .attributes = {{"shape", K::kInts}},
     .result_type = BroadcastToType,
     .gradient =
         [](const GradientArgs& a, std::vector<Tensor>& d) {
           if (a.want(0)) d[0] = Unbroadcast(a.dy, a.x[0].shape());
         },
     .cost = MovesBytes},
    {.kind = OpKind::kSlice,
     .name = "slice",
     .arity = 1,
     .family = OpFamily::kDataMovement,
     .moves_any_dtype = true,
     .attributes = {{"axis", K::kInt}, {"start", K::kInt}, {"limit", K::kInt}},
     .result_type = SlicedType,
     .gradient =
         [](const GradientArgs& a, std::vector<Tensor>& d) {
           if (!a.want(0)) return;
           // The cotangent between zeros for the elements sliced away.
           const int64_t axis = a.node.attributes.GetInt("axis");
           const int64_t start = a.node.attributes.GetInt("start");
           const int64_t limit = a.node.attributes.GetInt("limit");
           const Shape in = a.x[0].shape();
           std::vector<Tensor> parts;
           if (start > 0) {
             Shape before = in;
             before[axis] = start;
             parts.push_back(Zeros(a.dy, before));
           }
           parts.push_back(a.dy);
           if (limit < in[axis]) {
             Shape after = in;
             after[axis] = in[axis] - limit;
             parts.push_back(Zeros(a.dy, after));
           }
           d[0] = parts.size() == 1 ? a.dy : concat(parts, axis);
         },
     .cost = MovesBytes},
    {.kind = OpKind::kConcat,
     .name = "concat",
     .arity = -1,
     .family = OpFamily::kDataMovement,
     .moves_any_dtype = true,
     .attributes = {{"axis", K::kInt}},
     .result_type = ConcatenatedType,
     .gradient =
         [](const GradientArgs& a, std::vector<Tensor>& d) {
           const int64_t axis = a.node.attributes.GetInt("axis");
           int64_t offset = 0;
           for (size_t i = 0; i < a.x.size(); ++i) {
             const int64_t extent = a.x[i].shape()[axis];
             if (a.want(i)) d[i] = slice(a.dy, axis, offset, offset + extent);
             offset += extent;
           }
         },
     .cost = MovesBytes},
};

}  // namespace

absl::Span<const OpDef> DataMovementOps() { return kDataMovementOps; }

}  // namespace ir::ops

using ir::OpKind;
using ir::ops::ApplyAt;

Tensor pipeline_yield(const Tensor& x, SourceLoc loc) {
  Tensor y = ApplyAt(OpKind::kPipelineYield, {x}, {}, loc);
  if (y.valid()) y.builder()->OpenStage({y.builder()->stage()});
  return y;
}
Tensor reshape(const Tensor& x, ir::Shape shape, SourceLoc loc) {
  return ApplyAt(OpKind::kReshape, {x}, ir::Attributes{{"shape", std::move(shape)}}, loc);
}
Tensor transpose(const Tensor& x, std::vector<int64_t> permutation, SourceLoc loc) {
  return ApplyAt(OpKind::kTranspose, {x}, ir::Attributes{{"permutation", std::move(permutation)}}, loc);
}
Tensor broadcast_to(const Tensor& x, ir::Shape shape, SourceLoc loc) {
  return ApplyAt(OpKind::kBroadcast, {x}, ir::Attributes{{"shape", std::move(shape)}}, loc);
}
Tensor slice(const Tensor& x, int64_t axis, int64_t start, int64_t limit, SourceLoc loc) {
  if (axis < 0) axis += x.rank();
  return ApplyAt(OpKind::kSlice, {x}, ir::Attributes{{"axis", axis}, {"start", start}, {"limit", limit}}, loc);
}
Tensor concat(const std::vector<Tensor>& xs, int64_t axis, SourceLoc loc) {
  if (!xs.empty() && axis < 0) axis += xs[0].rank();
  return ApplyAt(OpKind::kConcat, xs, ir::Attributes{{"axis", axis}}, loc);
}

}  // namespace tandem
