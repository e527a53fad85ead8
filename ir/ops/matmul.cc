// matmul, with the gradient rule that folds a shared rank-2 weight's batch
// axes into one product.
#include <numeric>

#include "absl/strings/str_cat.h"
#include "ir/ops/op_rules.h"

namespace tandem {
namespace ir::ops {
namespace {

using K = AttributeKind;

absl::StatusOr<TensorType> ProductType(OpKind op, absl::Span<const TensorType> types, const Attributes& attributes) {
  if (absl::Status s = RequireSameFloat(op, types); !s.ok()) return s;
  for (size_t i = 0; i < 2; ++i) {
    if (absl::Status s = RequireRankAtLeast(op, types, i, 2); !s.ok()) return s;
  }
  const Shape& a = types[0].shape;
  const Shape& b = types[1].shape;
  const bool transpose_a = attributes.GetIntOr("transpose_a", 0) != 0;
  const bool transpose_b = attributes.GetIntOr("transpose_b", 0) != 0;
  const int64_t m = a[a.size() - (transpose_a ? 1 : 2)];
  const int64_t ka = a[a.size() - (transpose_a ? 2 : 1)];
  const int64_t kb = b[b.size() - (transpose_b ? 1 : 2)];
  const int64_t n = b[b.size() - (transpose_b ? 2 : 1)];
  if (ka != kb) return Error(op, absl::StrCat("contracting dimensions differ: ", ka, " vs ", kb), types);
  Shape batch_a(a.begin(), a.end() - 2);
  Shape batch_b(b.begin(), b.end() - 2);
  Shape batch;
  if (batch_a == batch_b || batch_b.empty()) {
    batch = batch_a;
  } else if (batch_a.empty()) {
    batch = batch_b;
  } else {
    return Error(op, "batch dimensions must be equal, or one operand must have rank 2", types);
  }
  batch.push_back(m);
  batch.push_back(n);
  return TensorType{types[0].dtype, batch};
}

std::vector<int64_t> LeadingAxes(int64_t count) {
  std::vector<int64_t> axes(count);
  std::iota(axes.begin(), axes.end(), 0);
  return axes;
}

// d(a @ b) for one operand, handling transposes and rank-2 broadcasting.
Tensor MatMulGradA(const Tensor& a, const Tensor& b, const Tensor& dy, bool ta, bool tb) {
  Tensor da;
  if (!ta) {
    da = matmul(dy, b, {false, !tb});  // dy @ b^T (or dy @ b when b was transposed)
  } else {
    da = tb ? matmul(b, dy, {true, true}) : matmul(b, dy, {false, true});
  }
  if (da.rank() > a.rank()) da = reduce_sum(da, LeadingAxes(da.rank() - a.rank()));
  return da;
}

Tensor MatMulGradB(const Tensor& a, const Tensor& b, const Tensor& dy, bool ta, bool tb) {
  // A rank-2 b used for every batch entry of a: fold a's batch axes into its
  // rows so one product sums over them, instead of a batched product
  // followed by a reduction.
  if (b.rank() == 2 && a.rank() > 2 && !ta) {
    const int64_t k = a.dim(-1);
    const int64_t n = dy.dim(-1);
    Tensor a2 = reshape(a, {a.type().num_elements() / k, k});
    Tensor dy2 = reshape(dy, {dy.type().num_elements() / n, n});
    return tb ? matmul(dy2, a2, {true, false}) : matmul(a2, dy2, {true, false});
  }
  Tensor db;
  if (!tb) {
    db = matmul(a, dy, {!ta, false});  // a^T @ dy (or a @ dy when a was transposed)
  } else {
    db = ta ? matmul(dy, a, {true, true}) : matmul(dy, a, {true, false});
  }
  if (db.rank() > b.rank()) db = reduce_sum(db, LeadingAxes(db.rank() - b.rank()));
  return db;
}

// 2 M N K per batch entry: one multiply and one add per term.
OpCost ProductCost(const Node& node, absl::Span<const TensorType> operands) {
  OpCost cost = MovesBytes(node, operands);
  const Shape& a = operands[0].shape;
  const int64_t k = node.attributes.GetIntOr("transpose_a", 0) != 0 ? a[a.size() - 2] : a.back();
  cost.flops = 2.0 * static_cast<double>(node.type.num_elements()) * static_cast<double>(k);
  return cost;
}

constexpr OpDef kMatMulOps[] = {
    {.kind = OpKind::kMatMul,
     .name = "matmul",
     .arity = 2,
     .family = OpFamily::kMatMul,
     .attributes = {{"transpose_a", K::kInt, /*required=*/false}, {"transpose_b", K::kInt, /*required=*/false}},
     .result_type = ProductType,
     .gradient =
         [](const GradientArgs& g, std::vector<Tensor>& d) {
           const bool ta = g.node.attributes.GetIntOr("transpose_a", 0) != 0;
           const bool tb = g.node.attributes.GetIntOr("transpose_b", 0) != 0;
           if (g.want(0)) d[0] = MatMulGradA(g.x[0], g.x[1], g.dy, ta, tb);
           if (g.want(1)) d[1] = MatMulGradB(g.x[0], g.x[1], g.dy, ta, tb);
         },
     .cost = ProductCost},
};

}  // namespace

absl::Span<const OpDef> MatMulOps() { return kMatMulOps; }

}  // namespace ir::ops

Tensor matmul(const Tensor& a, const Tensor& b, MatMulOptions options, SourceLoc loc) {
  ir::Attributes attributes;
  if (options.transpose_a) attributes.Set("transpose_a", int64_t{1});
  if (options.transpose_b) attributes.Set("transpose_b", int64_t{1});
  return ir::ops::ApplyAt(ir::OpKind::kMatMul, {a, b}, std::move(attributes), loc);
}

}  // namespace tandem
