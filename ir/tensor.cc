#include "ir/tensor.h"

#include <algorithm>

namespace tandem {
namespace ir {

SourceLocation ToLocation(const SourceLoc& loc) {
  return MakeSourceLocation(loc.file_name(), static_cast<int32_t>(loc.line()));
}

Tensor Apply(OpKind op, const std::vector<Tensor>& operands, Attributes attributes,
             const SourceLocation& location) {
  GraphBuilder* builder = nullptr;
  std::vector<ValueId> ids;
  ids.reserve(operands.size());
  for (const Tensor& operand : operands) {
    if (!operand.valid()) return Tensor(operand.builder(), kInvalidValue);
    if (builder == nullptr) builder = operand.builder();
    ids.push_back(operand.id());
  }
  if (builder == nullptr) return Tensor();
  return Tensor(builder, builder->Add(op, std::move(ids), std::move(attributes), location));
}

}  // namespace ir

namespace {

using ir::Apply;
using ir::OpKind;
using ir::ToLocation;

// The dtype a constant beside `like` takes: like's where arithmetic computes
// on it (f32, bf16), else f32.
ir::DType ConstantDType(const Tensor& like) {
  const ir::DType dtype = like.dtype();
  return ir::IsComputedFloat(dtype) ? dtype : ir::DType::kF32;
}

Tensor Scalar(const Tensor& like, double value, const SourceLoc& loc) {
  if (!like.valid()) return like;
  ir::GraphBuilder* builder = like.builder();
  return Tensor(builder, builder->AddConstant(value, ir::TensorType{ConstantDType(like), {}}, ToLocation(loc)));
}

Tensor Binary(OpKind op, const Tensor& a, const Tensor& b, const SourceLoc& loc) {
  return Apply(op, {a, b}, {}, ToLocation(loc));
}

Tensor Unary(OpKind op, const Tensor& x, const SourceLoc& loc) {
  return Apply(op, {x}, {}, ToLocation(loc));
}

// Normalizes negative axes and sorts them; an out-of-range axis is left for
// the shape rule to report.
std::vector<int64_t> NormalizeAxes(std::vector<int64_t> axes, int64_t rank) {
  for (int64_t& axis : axes) {
    if (axis < 0) axis += rank;
  }
  std::sort(axes.begin(), axes.end());
  return axes;
}

Tensor Reduce(OpKind op, const Tensor& x, std::vector<int64_t> axes, bool keep_dims,
              const SourceLoc& loc) {
  return Apply(op, {x},
               ir::Attributes{{"axes", NormalizeAxes(std::move(axes), x.rank())},
                              {"keep_dims", int64_t{keep_dims}}},
               ToLocation(loc));
}

std::vector<int64_t> AllAxes(const Tensor& x) {
  std::vector<int64_t> axes(x.rank());
  for (int64_t i = 0; i < x.rank(); ++i) axes[i] = i;
  return axes;
}

}  // namespace

ir::TensorType Tensor::type() const { return valid() ? builder_->graph().type(id_) : ir::TensorType{}; }

int64_t Tensor::dim(int64_t axis) const {
  const ir::Shape dims = shape();
  const int64_t rank = static_cast<int64_t>(dims.size());
  if (axis < 0) axis += rank;
  return axis >= 0 && axis < rank ? dims[axis] : 0;
}

Tensor operator+(Located a, const Tensor& b) { return Binary(OpKind::kAdd, a.tensor, b, a.location); }
Tensor operator-(Located a, const Tensor& b) { return Binary(OpKind::kSub, a.tensor, b, a.location); }
Tensor operator*(Located a, const Tensor& b) { return Binary(OpKind::kMul, a.tensor, b, a.location); }
Tensor operator/(Located a, const Tensor& b) { return Binary(OpKind::kDiv, a.tensor, b, a.location); }
Tensor operator+(Located a, double b) {
  return Binary(OpKind::kAdd, a.tensor, Scalar(a.tensor, b, a.location), a.location);
}
Tensor operator-(Located a, double b) {
  return Binary(OpKind::kSub, a.tensor, Scalar(a.tensor, b, a.location), a.location);
}
Tensor operator*(Located a, double b) {
  return Binary(OpKind::kMul, a.tensor, Scalar(a.tensor, b, a.location), a.location);
}
Tensor operator/(Located a, double b) {
  return Binary(OpKind::kDiv, a.tensor, Scalar(a.tensor, b, a.location), a.location);
}
Tensor operator+(double a, Located b) {
  return Binary(OpKind::kAdd, Scalar(b.tensor, a, b.location), b.tensor, b.location);
}
Tensor operator-(double a, Located b) {
  return Binary(OpKind::kSub, Scalar(b.tensor, a, b.location), b.tensor, b.location);
}
Tensor operator*(double a, Located b) {
  return Binary(OpKind::kMul, Scalar(b.tensor, a, b.location), b.tensor, b.location);
}
Tensor operator/(double a, Located b) {
  return Binary(OpKind::kDiv, Scalar(b.tensor, a, b.location), b.tensor, b.location);
}
Tensor operator-(Located a) { return Unary(OpKind::kNeg, a.tensor, a.location); }

Tensor exp(const Tensor& x, SourceLoc loc) { return Unary(OpKind::kExp, x, loc); }
Tensor expm1(const Tensor& x, SourceLoc loc) { return Unary(OpKind::kExpm1, x, loc); }
Tensor log(const Tensor& x, SourceLoc loc) { return Unary(OpKind::kLog, x, loc); }
Tensor tanh(const Tensor& x, SourceLoc loc) { return Unary(OpKind::kTanh, x, loc); }
Tensor sin(const Tensor& x, SourceLoc loc) { return Unary(OpKind::kSin, x, loc); }
Tensor cos(const Tensor& x, SourceLoc loc) { return Unary(OpKind::kCos, x, loc); }
Tensor sqrt(const Tensor& x, SourceLoc loc) { return Unary(OpKind::kSqrt, x, loc); }
Tensor relu(const Tensor& x, SourceLoc loc) { return Unary(OpKind::kRelu, x, loc); }
Tensor gelu(const Tensor& x, SourceLoc loc) { return Unary(OpKind::kGelu, x, loc); }
Tensor silu(const Tensor& x, SourceLoc loc) { return Unary(OpKind::kSilu, x, loc); }
Tensor pow(const Tensor& x, const Tensor& y, SourceLoc loc) { return Binary(OpKind::kPow, x, y, loc); }
Tensor pow(double x, const Tensor& y, SourceLoc loc) {
  return Binary(OpKind::kPow, Scalar(y, x, loc), y, loc);
}
Tensor maximum(const Tensor& x, const Tensor& y, SourceLoc loc) {
  return Binary(OpKind::kMaximum, x, y, loc);
}
Tensor equal(const Tensor& x, const Tensor& y, SourceLoc loc) { return Binary(OpKind::kEqual, x, y, loc); }
Tensor where(const Tensor& cond, const Tensor& x, const Tensor& y, SourceLoc loc) {
  return Apply(OpKind::kWhere, {cond, x, y}, {}, ToLocation(loc));
}
Tensor full(const Tensor& like, ir::Shape shape, double value, SourceLoc loc) {
  if (!like.valid()) return like;
  ir::GraphBuilder* builder = like.builder();
  return Tensor(builder, builder->AddConstant(value, ir::TensorType{ConstantDType(like), std::move(shape)},
                                              ToLocation(loc)));
}
Tensor convert(const Tensor& x, ir::DType dtype, SourceLoc loc) {
  if (x.valid() && x.dtype() == dtype) return x;
  return Apply(OpKind::kConvert, {x}, ir::Attributes{{"dtype", std::string(ir::DTypeName(dtype))}},
               ToLocation(loc));
}

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

Tensor reshape(const Tensor& x, ir::Shape shape, SourceLoc loc) {
  return Apply(OpKind::kReshape, {x}, ir::Attributes{{"shape", std::move(shape)}}, ToLocation(loc));
}
Tensor transpose(const Tensor& x, std::vector<int64_t> permutation, SourceLoc loc) {
  return Apply(OpKind::kTranspose, {x}, ir::Attributes{{"permutation", std::move(permutation)}},
               ToLocation(loc));
}
Tensor broadcast_to(const Tensor& x, ir::Shape shape, SourceLoc loc) {
  return Apply(OpKind::kBroadcast, {x}, ir::Attributes{{"shape", std::move(shape)}}, ToLocation(loc));
}
Tensor slice(const Tensor& x, int64_t axis, int64_t start, int64_t limit, SourceLoc loc) {
  if (axis < 0) axis += x.rank();
  return Apply(OpKind::kSlice, {x}, ir::Attributes{{"axis", axis}, {"start", start}, {"limit", limit}},
               ToLocation(loc));
}
Tensor concat(const std::vector<Tensor>& xs, int64_t axis, SourceLoc loc) {
  if (!xs.empty() && axis < 0) axis += xs[0].rank();
  return Apply(OpKind::kConcat, xs, ir::Attributes{{"axis", axis}}, ToLocation(loc));
}

Tensor matmul(const Tensor& a, const Tensor& b, MatMulOptions options, SourceLoc loc) {
  ir::Attributes attributes;
  if (options.transpose_a) attributes.Set("transpose_a", int64_t{1});
  if (options.transpose_b) attributes.Set("transpose_b", int64_t{1});
  return Apply(OpKind::kMatMul, {a, b}, std::move(attributes), ToLocation(loc));
}
Tensor softmax(const Tensor& x, SourceLoc loc) { return Unary(OpKind::kSoftmax, x, loc); }
Tensor log_softmax(const Tensor& x, SourceLoc loc) { return Unary(OpKind::kLogSoftmax, x, loc); }
Tensor layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, SourceLoc loc) {
  return Apply(OpKind::kLayerNorm, {x, gamma, beta}, ir::Attributes{{"eps", eps}}, ToLocation(loc));
}
Tensor cross_entropy(const Tensor& logits, const Tensor& labels, SourceLoc loc) {
  return Binary(OpKind::kCrossEntropy, logits, labels, loc);
}
Tensor embedding(const Tensor& table, const Tensor& ids, SourceLoc loc) {
  return Binary(OpKind::kEmbedding, table, ids, loc);
}
Tensor causal_mask(const Tensor& x, double fill, SourceLoc loc) {
  return Apply(OpKind::kCausalMask, {x}, ir::Attributes{{"fill", fill}}, ToLocation(loc));
}

Tensor rotary(const Tensor& x, double theta, bool inverse, SourceLoc loc) {
  return Apply(OpKind::kRotary, {x}, ir::Attributes{{"theta", theta}, {"inverse", int64_t{inverse ? 1 : 0}}},
               ToLocation(loc));
}

Tensor pipeline_yield(const Tensor& x, SourceLoc loc) {
  Tensor y = Unary(OpKind::kPipelineYield, x, loc);
  if (y.valid()) y.builder()->OpenStage({y.builder()->stage()});
  return y;
}

}  // namespace tandem
