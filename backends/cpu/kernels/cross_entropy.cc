// Cross-entropy with integer labels over the last axis: cross_entropy and
// its backward helper cross_entropy_grad. A label outside [0, V) is an
// InvalidArgument error naming the label and its position.
#include <cmath>
#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/cpu/kernels/float_math.h"
#include "backends/cpu/kernels/kernel_support.h"
#include "backends/cpu/kernels/parallel.h"

namespace tandem::cpu::internal {
namespace {

// exp(x - max) of a row into `e`, and their sum in index order (the sum
// is the row's one sequential chain; the exps vectorize).
inline float ExpRow(const float* __restrict x, int64_t n, float max, float* __restrict e) {
  for (int64_t i = 0; i < n; ++i) e[i] = ExpF32(x[i] - max);
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += e[i];
  return sum;
}

absl::Status CheckTypes(const ir::Node& node, Operands operands) {
  if (absl::Status s = ExpectDType(node, operands, 0, ir::DType::kF32); !s.ok()) return s;
  if (absl::Status s = ExpectDType(node, operands, 1, ir::DType::kI32); !s.ok()) return s;
  const ir::Shape& logits = operands[0]->shape();
  if (logits.empty()) return KernelTypeError(node, "logits need rank >= 1");
  const ir::Shape batch(logits.begin(), logits.end() - 1);
  if (absl::Status s = ExpectShape(node, operands, 1, batch); !s.ok()) return s;
  if (operands.size() > 2) {
    if (absl::Status s = ExpectDType(node, operands, 2, ir::DType::kF32); !s.ok()) return s;
    if (absl::Status s = ExpectShape(node, operands, 2, batch); !s.ok()) return s;
  }
  if (absl::Status s = ExpectResultDType(node, ir::DType::kF32); !s.ok()) return s;
  const ir::Shape& expected = node.op == ir::OpKind::kCrossEntropy ? batch : logits;
  if (node.type.shape != expected) {
    return KernelTypeError(node, absl::StrCat("result type ", ir::TypeToString(node.type), " should have shape ",
                                              ir::ShapeToString(expected)));
  }
  return absl::OkStatus();
}

absl::Status LabelError(const ir::Node& node, int32_t label, int64_t position, int64_t classes) {
  return absl::InvalidArgumentError(absl::StrCat(OpName(node.op), ": label ", label,
                                                 " at position ", position, " outside [0, ",
                                                 classes, ")"));
}

// One row's loss: log(sum(exp(x - max))) - (x[label] - max), `exps` its
// scratch.
TANDEM_KERNEL_CLONES
float LossRow(const float* __restrict row, int64_t n, int32_t label, float* __restrict exps) {
  const float max = RowMax(row, n);
  const float sum = ExpRow(row, n, max, exps);
  return std::log(sum) - (row[label] - max);
}

// One row's gradient: (exp(x - max) / sum - target) * scale, the target 0
// (which subtracts nothing) but at the label; the exps are kept in `grad`
// until they are overwritten.
TANDEM_KERNEL_CLONES
void GradRow(const float* __restrict row, int64_t n, int32_t label, float scale, float* __restrict grad) {
  const float sum = ExpRow(row, n, RowMax(row, n), grad);
  const float at_label = (grad[label] / sum - 1.0f) * scale;
  for (int64_t i = 0; i < n; ++i) grad[i] = (grad[i] / sum) * scale;
  grad[label] = at_label;
}

// The first label outside [0, classes), as an error; checked before any
// row is computed so that the error names the first, whoever computes it.
absl::Status CheckLabels(const ir::Node& node, const int32_t* labels, const RowView& rows) {
  for (int64_t r = 0; r < rows.count; ++r) {
    if (labels[r] < 0 || labels[r] >= rows.length) return LabelError(node, labels[r], r, rows.length);
  }
  return absl::OkStatus();
}

// loss = log(sum(exp(x - max))) - (x[label] - max). Rows in parallel.
absl::StatusOr<ir::HostTensor> CrossEntropy(const ir::Node& node, Operands operands) {
  if (absl::Status s = CheckTypes(node, operands); !s.ok()) return s;
  const RowView rows = RowsOf(operands[0]->shape());
  const float* logits = operands[0]->f32();
  const int32_t* labels = operands[1]->i32();
  if (absl::Status s = CheckLabels(node, labels, rows); !s.ok()) return s;
  absl::StatusOr<ir::HostTensor> allocated = AllocateResult(node);
  if (!allocated.ok()) return allocated.status();
  ir::HostTensor out = *std::move(allocated);
  float* loss = out.f32();
  ParallelFor(rows.count, RowGrain(rows.length), [&](int64_t first, int64_t last) {
    std::vector<float> exps(static_cast<size_t>(rows.length));
    for (int64_t r = first; r < last; ++r) {
      loss[r] = LossRow(logits + r * rows.length, rows.length, labels[r], exps.data());
    }
  });
  return out;
}

// dlogits = (softmax(logits) - onehot(label)) * dy. Rows in parallel.
absl::StatusOr<ir::HostTensor> CrossEntropyGrad(const ir::Node& node, Operands operands) {
  if (absl::Status s = CheckTypes(node, operands); !s.ok()) return s;
  const RowView rows = RowsOf(operands[0]->shape());
  const float* logits = operands[0]->f32();
  const int32_t* labels = operands[1]->i32();
  const float* dy = operands[2]->f32();
  if (absl::Status s = CheckLabels(node, labels, rows); !s.ok()) return s;
  absl::StatusOr<ir::HostTensor> allocated = AllocateOverwrittenResult(node);
  if (!allocated.ok()) return allocated.status();
  ir::HostTensor out = *std::move(allocated);
  float* result = out.f32();
  ParallelFor(rows.count, RowGrain(rows.length), [&](int64_t first, int64_t last) {
    for (int64_t r = first; r < last; ++r) {
      GradRow(logits + r * rows.length, rows.length, labels[r], dy[r], result + r * rows.length);
    }
  });
  return out;
}

}  // namespace

absl::StatusOr<ir::HostTensor> EvaluateCrossEntropy(const ir::Node& node, Operands operands) {
  switch (node.op) {
    case ir::OpKind::kCrossEntropy:
      return CrossEntropy(node, operands);
    case ir::OpKind::kCrossEntropyGrad:
      return CrossEntropyGrad(node, operands);
    default:
      KernelBug(absl::StrCat("EvaluateCrossEntropy: unexpected ", OpName(node.op)));
  }
}

}  // namespace tandem::cpu::internal
