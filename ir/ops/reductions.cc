// Reductions over `axes`: reduce_sum, reduce_mean, reduce_max; with sum and
// mean over every axis.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/ops/op_rules.h"

namespace tandem {
namespace ir::ops {
namespace {

using K = AttributeKind;

absl::StatusOr<TensorType> ReducedType(OpKind op, absl::Span<const TensorType> types,
                                       const Attributes& attributes) {
  if (absl::Status s = RequireSameFloat(op, types); !s.ok()) return s;
  const TensorType& x = types[0];
  const std::vector<int64_t>& axes = attributes.GetInts("axes");
  const bool keep_dims = attributes.GetIntOr("keep_dims", 0) != 0;
  for (size_t i = 0; i < axes.size(); ++i) {
    if (axes[i] < 0 || axes[i] >= x.rank() || (i > 0 && axes[i] <= axes[i - 1])) {
      return Error(op,
                   absl::StrCat("axes [", absl::StrJoin(axes, ","), "] must be sorted, unique and within rank ",
                                x.rank()),
                   types);
    }
  }
  TensorType out{x.dtype, {}};
  for (int64_t axis = 0; axis < x.rank(); ++axis) {
    const bool reduced = std::find(axes.begin(), axes.end(), axis) != axes.end();
    if (!reduced) {
      out.shape.push_back(x.shape[axis]);
    } else if (keep_dims) {
      out.shape.push_back(1);
    }
  }
  return out;
}

// dy reshaped to keep the reduced axes (extent 1), ready to broadcast back.
Tensor KeptCotangent(const GradientArgs& a) {
  const Shape kept = KeptShape(a.x[0].shape(), a.node.attributes.GetInts("axes"));
  return a.dy.shape() == kept ? a.dy : reshape(a.dy, kept);
}

constexpr OpDef Reduction(OpKind kind, const char* name, GradientRule gradient) {
  return OpDef{.kind = kind,
               .name = name,
               .arity = 1,
               .family = OpFamily::kReduction,
               .attributes = {{"axes", K::kInts}, {"keep_dims", K::kInt, /*required=*/false}},
               .result_type = ReducedType,
               .gradient = gradient,
               .cost = PerOperandElement<1>};
}

constexpr OpDef kReductionOps[] = {
    Reduction(OpKind::kReduceSum, "reduce_sum",
              [](const GradientArgs& a, std::vector<Tensor>& d) {
                if (a.want(0)) d[0] = broadcast_to(KeptCotangent(a), a.x[0].shape());
              }),
    Reduction(OpKind::kReduceMean, "reduce_mean",
              [](const GradientArgs& a, std::vector<Tensor>& d) {
                if (!a.want(0)) return;
                const Shape in = a.x[0].shape();
                int64_t count = 1;
                for (int64_t axis : a.node.attributes.GetInts("axes")) count *= in[axis];
                d[0] = broadcast_to(KeptCotangent(a) * (1.0 / static_cast<double>(count)), in);
              }),
    Reduction(OpKind::kReduceMax, "reduce_max",
              [](const GradientArgs& a, std::vector<Tensor>& d) {
                if (!a.want(0)) return;
                // Split evenly between the positions that hold the maximum.
                const std::vector<int64_t>& axes = a.node.attributes.GetInts("axes");
                const Shape in = a.x[0].shape();
                const Shape kept = KeptShape(in, axes);
                Tensor g = KeptCotangent(a);
                Tensor y = a.y.shape() == kept ? a.y : reshape(a.y, kept);
                Tensor mask = equal(a.x[0], broadcast_to(y, in));
                Tensor count = reduce_sum(mask, axes, /*keep_dims=*/true);
                d[0] = mask * broadcast_to(g / count, in);
              }),
};

// Normalizes negative axes and sorts them; an out-of-range axis is left for
// the result-type rule to report.
std::vector<int64_t> NormalizeAxes(std::vector<int64_t> axes, int64_t rank) {
  for (int64_t& axis : axes) {
    if (axis < 0) axis += rank;
  }
  std::sort(axes.begin(), axes.end());
  return axes;
}

Tensor Reduce(OpKind op, const Tensor& x, std::vector<int64_t> axes, bool keep_dims, const SourceLoc& loc) {
  return ApplyAt(op, {x},
                 Attributes{{"axes", NormalizeAxes(std::move(axes), x.rank())}, {"keep_dims", int64_t{keep_dims}}},
                 loc);
}

std::vector<int64_t> AllAxes(const Tensor& x) {
  std::vector<int64_t> axes(x.rank());
  for (int64_t i = 0; i < x.rank(); ++i) axes[i] = i;
  return axes;
}

}  // namespace

absl::Span<const OpDef> ReductionOps() { return kReductionOps; }

}  // namespace ir::ops

using ir::OpKind;
using ir::ops::AllAxes;
using ir::ops::Reduce;

Tensor reduce_sum(const Tensor& x, std::vector<int64_t> axes, bool keep_dims, SourceLoc loc) {
  return Reduce(OpKind::kReduceSum, x, std::move(axes), keep_dims, loc);
}
Tensor reduce_mean(const Tensor& x, std::vector<int64_t> axes, bool keep_dims, SourceLoc loc) {
  return Reduce(OpKind::kReduceMean, x, std::move(axes), keep_dims, loc);
}
Tensor reduce_max(const Tensor& x, std::vector<int64_t> axes, bool keep_dims, SourceLoc loc) {
  return Reduce(OpKind::kReduceMax, x, std::move(axes), keep_dims, loc);
}
Tensor sum(const Tensor& x, SourceLoc loc) { return Reduce(OpKind::kReduceSum, x, AllAxes(x), false, loc); }
Tensor mean(const Tensor& x, SourceLoc loc) { return Reduce(OpKind::kReduceMean, x, AllAxes(x), false, loc); }

}  // namespace tandem
