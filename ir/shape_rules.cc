#include "ir/shape_rules.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tandem::ir {
namespace {

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

// Arithmetic: every operand of one computed float type (f32 or bf16), which
// becomes the result's. Mixing them takes an explicit convert.
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

absl::Status RequireRankAtLeast(OpKind op, absl::Span<const TensorType> types, size_t index,
                                int64_t rank) {
  if (types[index].rank() < rank) {
    return Error(op, absl::StrCat("operand ", index, " needs rank >= ", rank), types);
  }
  return absl::OkStatus();
}

absl::StatusOr<TensorType> Reduce(OpKind op, absl::Span<const TensorType> types,
                                  const Attributes& attributes) {
  const TensorType& x = types[0];
  const std::vector<int64_t>& axes = attributes.GetInts("axes");
  bool keep_dims = attributes.GetIntOr("keep_dims", 0) != 0;
  for (size_t i = 0; i < axes.size(); ++i) {
    if (axes[i] < 0 || axes[i] >= x.rank() || (i > 0 && axes[i] <= axes[i - 1])) {
      return Error(op, absl::StrCat("axes [", absl::StrJoin(axes, ","),
                                    "] must be sorted, unique and within rank ", x.rank()),
                   types);
    }
  }
  TensorType out{x.dtype, {}};
  for (int64_t axis = 0; axis < x.rank(); ++axis) {
    bool reduced = std::find(axes.begin(), axes.end(), axis) != axes.end();
    if (!reduced) {
      out.shape.push_back(x.shape[axis]);
    } else if (keep_dims) {
      out.shape.push_back(1);
    }
  }
  return out;
}

absl::StatusOr<TensorType> MatMul(absl::Span<const TensorType> types, const Attributes& attributes) {
  constexpr OpKind op = OpKind::kMatMul;
  if (absl::Status s = RequireSameFloat(op, types); !s.ok()) return s;
  for (size_t i = 0; i < 2; ++i) {
    if (absl::Status s = RequireRankAtLeast(op, types, i, 2); !s.ok()) return s;
  }
  const Shape& a = types[0].shape;
  const Shape& b = types[1].shape;
  bool transpose_a = attributes.GetIntOr("transpose_a", 0) != 0;
  bool transpose_b = attributes.GetIntOr("transpose_b", 0) != 0;
  int64_t m = a[a.size() - (transpose_a ? 1 : 2)];
  int64_t ka = a[a.size() - (transpose_a ? 2 : 1)];
  int64_t kb = b[b.size() - (transpose_b ? 1 : 2)];
  int64_t n = b[b.size() - (transpose_b ? 2 : 1)];
  if (ka != kb) {
    return Error(op, absl::StrCat("contracting dimensions differ: ", ka, " vs ", kb), types);
  }
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

absl::StatusOr<TensorType> Slice(absl::Span<const TensorType> types, const Attributes& attributes) {
  const TensorType& x = types[0];
  int64_t axis = attributes.GetInt("axis");
  int64_t start = attributes.GetInt("start");
  int64_t limit = attributes.GetInt("limit");
  if (axis < 0 || axis >= x.rank()) {
    return Error(OpKind::kSlice, absl::StrCat("axis ", axis, " out of range"), types);
  }
  if (start < 0 || limit > x.shape[axis] || start >= limit) {
    return Error(OpKind::kSlice,
                 absl::StrCat("range [", start, ", ", limit, ") does not fit extent ",
                              x.shape[axis], " of axis ", axis),
                 types);
  }
  TensorType out = x;
  out.shape[axis] = limit - start;
  return out;
}

absl::StatusOr<TensorType> Concat(absl::Span<const TensorType> types, const Attributes& attributes) {
  if (types.empty()) return Error(OpKind::kConcat, "needs at least one operand", types);
  int64_t axis = attributes.GetInt("axis");
  TensorType out = types[0];
  if (axis < 0 || axis >= out.rank()) {
    return Error(OpKind::kConcat, absl::StrCat("axis ", axis, " out of range"), types);
  }
  for (size_t i = 1; i < types.size(); ++i) {
    const TensorType& t = types[i];
    bool fits = t.dtype == out.dtype && t.rank() == out.rank();
    for (int64_t d = 0; fits && d < t.rank(); ++d) fits = d == axis || t.shape[d] == out.shape[d];
    if (!fits) {
      return Error(OpKind::kConcat, absl::StrCat("operand ", i, " does not match operand 0 off axis ", axis),
                   types);
    }
    out.shape[axis] += t.shape[axis];
  }
  return out;
}

absl::StatusOr<TensorType> LastAxisSame(OpKind op, absl::Span<const TensorType> types) {
  if (absl::Status s = RequireSameFloat(op, types); !s.ok()) return s;
  if (absl::Status s = RequireRankAtLeast(op, types, 0, 1); !s.ok()) return s;
  for (size_t i = 1; i < types.size(); ++i) {
    if (types[i].shape != types[0].shape) return Error(op, "operand shapes differ", types);
  }
  return types[0];
}

}  // namespace

absl::StatusOr<Shape> BroadcastShapes(const Shape& a, const Shape& b) {
  size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t ea = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t eb = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (ea != eb && ea != 1 && eb != 1) {
      return absl::InvalidArgumentError(absl::StrCat("shapes ", ShapeToString(a), " and ",
                                                     ShapeToString(b), " do not broadcast"));
    }
    out[i] = ea == 1 ? eb : ea;
  }
  return out;
}

absl::StatusOr<TensorType> InferResultType(OpKind op, absl::Span<const TensorType> types,
                                           const Attributes& attributes) {
  int arity = OpArity(op);
  if (arity >= 0 && static_cast<int>(types.size()) != arity) {
    return Error(op, absl::StrCat("takes ", arity, " operands, got ", types.size()), types);
  }
  switch (op) {
    case OpKind::kInput:
    case OpKind::kConstant:
      return Error(op, "a source has a declared type, not a rule", types);
    case OpKind::kNeg:
    case OpKind::kExp:
    case OpKind::kExpm1:
    case OpKind::kLog:
    case OpKind::kTanh:
    case OpKind::kSin:
    case OpKind::kCos:
    case OpKind::kSqrt:
    case OpKind::kRelu:
    case OpKind::kGelu:
    case OpKind::kSilu:
      if (absl::Status s = RequireSameFloat(op, types); !s.ok()) return s;
      return types[0];
    case OpKind::kPipelineYield:
      return types[0];
    case OpKind::kConvert: {
      absl::StatusOr<DType> dtype = ParseDType(attributes.GetString("dtype"));
      if (!dtype.ok()) return Error(op, dtype.status().message(), types);
      return TensorType{*dtype, types[0].shape};
    }
    case OpKind::kAdd:
    case OpKind::kSub:
    case OpKind::kMul:
    case OpKind::kDiv:
    case OpKind::kPow:
    case OpKind::kMaximum:
    case OpKind::kEqual:
    case OpKind::kWhere: {
      if (absl::Status s = RequireSameFloat(op, types); !s.ok()) return s;
      Shape shape = types[0].shape;
      for (size_t i = 1; i < types.size(); ++i) {
        absl::StatusOr<Shape> joined = BroadcastShapes(shape, types[i].shape);
        if (!joined.ok()) return Error(op, joined.status().message(), types);
        shape = *joined;
      }
      return TensorType{types[0].dtype, shape};
    }
    case OpKind::kReduceSum:
    case OpKind::kReduceMean:
    case OpKind::kReduceMax:
      if (absl::Status s = RequireSameFloat(op, types); !s.ok()) return s;
      return Reduce(op, types, attributes);
    case OpKind::kReshape: {
      Shape shape = attributes.GetInts("shape");
      if (NumElements(shape) != types[0].num_elements() ||
          std::any_of(shape.begin(), shape.end(), [](int64_t e) { return e < 0; })) {
        return Error(op, absl::StrCat("cannot reshape to ", ShapeToString(shape)), types);
      }
      return TensorType{types[0].dtype, shape};
    }
    case OpKind::kTranspose: {
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
    case OpKind::kBroadcast: {
      Shape shape = attributes.GetInts("shape");
      absl::StatusOr<Shape> joined = BroadcastShapes(types[0].shape, shape);
      if (!joined.ok() || *joined != shape) {
        return Error(op, absl::StrCat("cannot broadcast to ", ShapeToString(shape)), types);
      }
      return TensorType{types[0].dtype, shape};
    }
    case OpKind::kSlice:
      return Slice(types, attributes);
    case OpKind::kConcat:
      return Concat(types, attributes);
    case OpKind::kMatMul:
      return MatMul(types, attributes);
    case OpKind::kSoftmax:
    case OpKind::kLogSoftmax:
    case OpKind::kNormalize:
    case OpKind::kSoftmaxGrad:
    case OpKind::kLogSoftmaxGrad:
    case OpKind::kNormalizeGrad:
    case OpKind::kGeluGrad:
    case OpKind::kSiluGrad:
    case OpKind::kReluGrad:
      return LastAxisSame(op, types);
    case OpKind::kLayerNorm: {
      if (absl::Status s = RequireSameFloat(op, types); !s.ok()) return s;
      if (absl::Status s = RequireRankAtLeast(op, types, 0, 1); !s.ok()) return s;
      Shape feature{types[0].shape.back()};
      if (types[1].shape != feature || types[2].shape != feature) {
        return Error(op, absl::StrCat("gamma and beta must have shape ", ShapeToString(feature)), types);
      }
      return types[0];
    }
    case OpKind::kCrossEntropy: {
      if (absl::Status s = RequireDType(op, types, 0, DType::kF32); !s.ok()) return s;
      if (absl::Status s = RequireDType(op, types, 1, DType::kI32); !s.ok()) return s;
      if (absl::Status s = RequireRankAtLeast(op, types, 0, 1); !s.ok()) return s;
      Shape batch(types[0].shape.begin(), types[0].shape.end() - 1);
      if (types[1].shape != batch) {
        return Error(op, absl::StrCat("labels must have shape ", ShapeToString(batch)), types);
      }
      return TensorType{DType::kF32, batch};
    }
    case OpKind::kCrossEntropyGrad: {
      if (absl::Status s = RequireDType(op, types, 1, DType::kI32); !s.ok()) return s;
      Shape batch(types[0].shape.begin(), types[0].shape.end() - 1);
      if (types[1].shape != batch || types[2].shape != batch) {
        return Error(op, absl::StrCat("labels and dy must have shape ", ShapeToString(batch)), types);
      }
      return types[0];
    }
    case OpKind::kEmbedding: {
      if (absl::Status s = RequireFloat(op, types, 0); !s.ok()) return s;
      if (absl::Status s = RequireDType(op, types, 1, DType::kI32); !s.ok()) return s;
      if (types[0].rank() != 2) return Error(op, "the table must have rank 2", types);
      Shape shape = types[1].shape;
      shape.push_back(types[0].shape[1]);
      return TensorType{types[0].dtype, shape};
    }
    case OpKind::kEmbeddingGrad: {
      if (absl::Status s = RequireDType(op, types, 0, DType::kI32); !s.ok()) return s;
      if (absl::Status s = RequireFloat(op, types, 1); !s.ok()) return s;
      Shape expected = types[0].shape;
      if (types[1].rank() != types[0].rank() + 1 ||
          !std::equal(expected.begin(), expected.end(), types[1].shape.begin())) {
        return Error(op, "dy must have the ids' shape plus one feature axis", types);
      }
      return TensorType{types[1].dtype, {attributes.GetInt("num_embeddings"), types[1].shape.back()}};
    }
    case OpKind::kCausalMask: {
      if (absl::Status s = RequireSameFloat(op, types); !s.ok()) return s;
      if (absl::Status s = RequireRankAtLeast(op, types, 0, 2); !s.ok()) return s;
      const Shape& shape = types[0].shape;
      if (shape[shape.size() - 1] != shape[shape.size() - 2]) {
        return Error(op, "the last two axes must be square", types);
      }
      return types[0];
    }
    case OpKind::kRotary: {
      if (absl::Status s = RequireSameFloat(op, types); !s.ok()) return s;
      if (absl::Status s = RequireRankAtLeast(op, types, 0, 2); !s.ok()) return s;
      if (types[0].shape.back() % 2 != 0) return Error(op, "the last axis must have an even extent", types);
      const double theta = attributes.GetDoubleOr("theta", 0.0);
      if (!(theta > 1.0) || !std::isfinite(theta)) {
        return Error(op, absl::StrCat("theta ", theta, " must be a finite number above 1"), types);
      }
      const int64_t inverse = attributes.GetIntOr("inverse", 0);
      if (inverse != 0 && inverse != 1) return Error(op, absl::StrCat("inverse ", inverse, " must be 0 or 1"), types);
      return types[0];
    }
  }
  return Error(op, "unknown op", types);
}

}  // namespace tandem::ir
