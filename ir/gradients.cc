#include "ir/gradients.h"

#include <numeric>

#include "absl/strings/str_cat.h"

namespace tandem::ir {
namespace {

// The shape `dy` has after reducing `axes` of `input` with keep_dims.
Shape KeptShape(const Shape& input, const std::vector<int64_t>& axes) {
  Shape kept = input;
  for (int64_t axis : axes) kept[axis] = 1;
  return kept;
}

Tensor Zeros(const Tensor& like, Shape shape) { return full(like, std::move(shape), 0.0); }

// d(a @ b) for one operand, handling transposes and rank-2 broadcasting.
Tensor MatMulGradA(const Tensor& a, const Tensor& b, const Tensor& dy, bool ta, bool tb) {
  Tensor da;
  if (!ta) {
    da = matmul(dy, b, {false, !tb});  // dy @ b^T (or dy @ b when b was transposed)
  } else {
    da = tb ? matmul(b, dy, {true, true}) : matmul(b, dy, {false, true});
  }
  if (da.rank() > a.rank()) da = reduce_sum(da, [&] {
    std::vector<int64_t> axes(da.rank() - a.rank());
    std::iota(axes.begin(), axes.end(), 0);
    return axes;
  }());
  return da;
}

Tensor MatMulGradB(const Tensor& a, const Tensor& b, const Tensor& dy, bool ta, bool tb) {
  // A rank-2 b used for every batch entry of a: fold a's batch axes into its
  // rows so one product sums over them, instead of a batched product
  // followed by a reduction.
  if (b.rank() == 2 && a.rank() > 2 && !ta) {
    int64_t k = a.dim(-1);
    int64_t n = dy.dim(-1);
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
  if (db.rank() > b.rank()) {
    std::vector<int64_t> axes(db.rank() - b.rank());
    std::iota(axes.begin(), axes.end(), 0);
    db = reduce_sum(db, axes);
  }
  return db;
}

}  // namespace

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
  std::vector<Tensor> x;
  for (ValueId operand : node.operands) x.emplace_back(&builder, operand);
  const Tensor y(&builder, id);
  std::vector<Tensor> d(node.operands.size());
  auto want = [&](size_t i) { return i < wanted.size() && wanted[i]; };
  const Attributes& attrs = node.attributes;

  switch (node.op) {
    case OpKind::kInput:
    case OpKind::kConstant:
    case OpKind::kEqual:
      break;
    case OpKind::kPipelineYield:
      if (want(0)) d[0] = dy;
      break;
    case OpKind::kConvert:
      // Between float types the gradient converts back; across i32 there is
      // none.
      if (want(0) && IsComputedFloat(x[0].dtype()) && IsComputedFloat(y.dtype())) {
        d[0] = convert(dy, x[0].dtype());
      }
      break;
    case OpKind::kNeg:
      if (want(0)) d[0] = -dy;
      break;
    case OpKind::kExp:
      if (want(0)) d[0] = dy * y;
      break;
    case OpKind::kExpm1:
      if (want(0)) d[0] = dy * (y + 1.0);
      break;
    case OpKind::kLog:
      if (want(0)) d[0] = dy / x[0];
      break;
    case OpKind::kTanh:
      if (want(0)) d[0] = dy * (1.0 - y * y);
      break;
    case OpKind::kSin:
      if (want(0)) d[0] = dy * cos(x[0]);
      break;
    case OpKind::kCos:
      if (want(0)) d[0] = -(dy * sin(x[0]));
      break;
    case OpKind::kSqrt:
      if (want(0)) d[0] = dy * 0.5 / y;
      break;
    case OpKind::kRelu:
      if (want(0)) d[0] = Apply(OpKind::kReluGrad, {x[0], dy}, {}, {});
      break;
    case OpKind::kGelu:
      if (want(0)) d[0] = Apply(OpKind::kGeluGrad, {x[0], dy}, {}, {});
      break;
    case OpKind::kSilu:
      if (want(0)) d[0] = Apply(OpKind::kSiluGrad, {x[0], dy}, {}, {});
      break;
    case OpKind::kAdd:
      if (want(0)) d[0] = Unbroadcast(dy, x[0].shape());
      if (want(1)) d[1] = Unbroadcast(dy, x[1].shape());
      break;
    case OpKind::kSub:
      if (want(0)) d[0] = Unbroadcast(dy, x[0].shape());
      if (want(1)) d[1] = Unbroadcast(-dy, x[1].shape());
      break;
    case OpKind::kMul:
      if (want(0)) d[0] = Unbroadcast(dy * x[1], x[0].shape());
      if (want(1)) d[1] = Unbroadcast(dy * x[0], x[1].shape());
      break;
    case OpKind::kDiv:
      if (want(0)) d[0] = Unbroadcast(dy / x[1], x[0].shape());
      if (want(1)) d[1] = Unbroadcast(-(dy * y / x[1]), x[1].shape());
      break;
    case OpKind::kPow:
      if (want(0)) d[0] = Unbroadcast(dy * x[1] * pow(x[0], x[1] - 1.0), x[0].shape());
      if (want(1)) d[1] = Unbroadcast(dy * y * log(x[0]), x[1].shape());
      break;
    case OpKind::kMaximum: {
      // Ties go to the first operand.
      Tensor first = equal(y, x[0]);
      Tensor zero = Zeros(dy, {});
      if (want(0)) d[0] = Unbroadcast(where(first, dy, zero), x[0].shape());
      if (want(1)) d[1] = Unbroadcast(where(first, zero, dy), x[1].shape());
      break;
    }
    case OpKind::kWhere: {
      Tensor zero = Zeros(dy, {});
      if (want(1)) d[1] = Unbroadcast(where(x[0], dy, zero), x[1].shape());
      if (want(2)) d[2] = Unbroadcast(where(x[0], zero, dy), x[2].shape());
      break;
    }
    case OpKind::kReduceSum:
    case OpKind::kReduceMean:
    case OpKind::kReduceMax: {
      if (!want(0)) break;
      const std::vector<int64_t>& axes = attrs.GetInts("axes");
      const Shape in = x[0].shape();
      Shape kept = KeptShape(in, axes);
      Tensor g = dy.shape() == kept ? dy : reshape(dy, kept);
      if (node.op == OpKind::kReduceSum) {
        d[0] = broadcast_to(g, in);
      } else if (node.op == OpKind::kReduceMean) {
        int64_t count = 1;
        for (int64_t axis : axes) count *= in[axis];
        d[0] = broadcast_to(g * (1.0 / static_cast<double>(count)), in);
      } else {
        // Split evenly between the positions that hold the maximum.
        Tensor yk = y.shape() == kept ? y : reshape(y, kept);
        Tensor mask = equal(x[0], broadcast_to(yk, in));
        Tensor count = reduce_sum(mask, axes, /*keep_dims=*/true);
        d[0] = mask * broadcast_to(g / count, in);
      }
      break;
    }
    case OpKind::kReshape:
      if (want(0)) d[0] = reshape(dy, x[0].shape());
      break;
    case OpKind::kTranspose: {
      if (!want(0)) break;
      const std::vector<int64_t>& permutation = attrs.GetInts("permutation");
      std::vector<int64_t> inverse(permutation.size());
      for (size_t i = 0; i < permutation.size(); ++i) inverse[permutation[i]] = static_cast<int64_t>(i);
      d[0] = transpose(dy, inverse);
      break;
    }
    case OpKind::kBroadcast:
      if (want(0)) d[0] = Unbroadcast(dy, x[0].shape());
      break;
    case OpKind::kSlice: {
      if (!want(0)) break;
      int64_t axis = attrs.GetInt("axis");
      int64_t start = attrs.GetInt("start");
      int64_t limit = attrs.GetInt("limit");
      const Shape in = x[0].shape();
      std::vector<Tensor> parts;
      if (start > 0) {
        Shape before = in;
        before[axis] = start;
        parts.push_back(Zeros(dy, before));
      }
      parts.push_back(dy);
      if (limit < in[axis]) {
        Shape after = in;
        after[axis] = in[axis] - limit;
        parts.push_back(Zeros(dy, after));
      }
      d[0] = parts.size() == 1 ? dy : concat(parts, axis);
      break;
    }
    case OpKind::kConcat: {
      int64_t axis = attrs.GetInt("axis");
      int64_t offset = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        int64_t extent = x[i].shape()[axis];
        if (want(i)) d[i] = slice(dy, axis, offset, offset + extent);
        offset += extent;
      }
      break;
    }
    case OpKind::kMatMul: {
      bool ta = attrs.GetIntOr("transpose_a", 0) != 0;
      bool tb = attrs.GetIntOr("transpose_b", 0) != 0;
      if (want(0)) d[0] = MatMulGradA(x[0], x[1], dy, ta, tb);
      if (want(1)) d[1] = MatMulGradB(x[0], x[1], dy, ta, tb);
      break;
    }
    case OpKind::kSoftmax:
      if (want(0)) d[0] = Apply(OpKind::kSoftmaxGrad, {y, dy}, {}, {});
      break;
    case OpKind::kLogSoftmax:
      if (want(0)) d[0] = Apply(OpKind::kLogSoftmaxGrad, {y, dy}, {}, {});
      break;
    case OpKind::kNormalize:
      if (want(0)) d[0] = Apply(OpKind::kNormalizeGrad, {x[0], dy}, attrs, {});
      break;
    case OpKind::kLayerNorm: {
      Attributes eps{{"eps", attrs.GetDouble("eps")}};
      if (want(0)) d[0] = Apply(OpKind::kNormalizeGrad, {x[0], dy * x[1]}, eps, {});
      if (want(1)) {
        Tensor xhat = Apply(OpKind::kNormalize, {x[0]}, eps, {});
        d[1] = Unbroadcast(dy * xhat, x[1].shape());
      }
      if (want(2)) d[2] = Unbroadcast(dy, x[2].shape());
      break;
    }
    case OpKind::kCrossEntropy:
      if (want(0)) d[0] = Apply(OpKind::kCrossEntropyGrad, {x[0], x[1], dy}, {}, {});
      break;
    case OpKind::kEmbedding:
      if (want(0)) {
        d[0] = Apply(OpKind::kEmbeddingGrad, {x[1], dy},
                     Attributes{{"num_embeddings", x[0].shape()[0]}}, {});
      }
      break;
    case OpKind::kCausalMask:
      if (want(0)) d[0] = causal_mask(dy, 0.0);
      break;
    case OpKind::kRotary:
      // A rotation's adjoint is the rotation by the opposite angle.
      if (want(0)) d[0] = rotary(dy, attrs.GetDouble("theta"), attrs.GetInt("inverse") == 0);
      break;
    case OpKind::kSoftmaxGrad:
    case OpKind::kLogSoftmaxGrad:
    case OpKind::kNormalizeGrad:
    case OpKind::kGeluGrad:
    case OpKind::kSiluGrad:
    case OpKind::kReluGrad:
    case OpKind::kCrossEntropyGrad:
    case OpKind::kEmbeddingGrad:
      return absl::UnimplementedError(
          absl::StrCat(node.location.ToString(), ": ", OpName(node.op),
                       " has no gradient rule (second-order gradients are not supported)"));
  }
  if (!builder.ok()) return builder.status();
  return d;
}

}  // namespace tandem::ir
