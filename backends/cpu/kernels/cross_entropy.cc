// Cross-entropy with integer labels over the last axis: cross_entropy and
// its backward helper cross_entropy_grad. A label outside [0, V) is an
// InvalidArgument error naming the label and its position.
#include <cmath>
#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"
#include "backends/cpu/kernels/float_math.h"
#include "backends/cpu/kernels/kernel_support.h"

namespace tandem::cpu::internal {
namespace {

// The max of a row and the sum of exp(x - max) over it, in index order.
struct RowExpSum {
  float max;
  float sum;
};
RowExpSum ExpSum(const float* __restrict x, int64_t n) {
  float max = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) max = x[i] > max ? x[i] : max;
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += ExpF32(x[i] - max);
  return {max, sum};
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

// loss = log(sum(exp(x - max))) - (x[label] - max).
absl::StatusOr<ir::HostTensor> CrossEntropy(const ir::Node& node, Operands operands) {
  if (absl::Status s = CheckTypes(node, operands); !s.ok()) return s;
  const RowView rows = RowsOf(operands[0]->shape());
  const float* logits = operands[0]->f32();
  const int32_t* labels = operands[1]->i32();
  absl::StatusOr<ir::HostTensor> allocated = AllocateResult(node);
  if (!allocated.ok()) return allocated.status();
  ir::HostTensor out = *std::move(allocated);
  float* loss = out.f32();
  for (int64_t r = 0; r < rows.count; ++r) {
    const int32_t label = labels[r];
    if (label < 0 || label >= rows.length) return LabelError(node, label, r, rows.length);
    const float* row = logits + r * rows.length;
    const RowExpSum stats = ExpSum(row, rows.length);
    loss[r] = std::log(stats.sum) - (row[label] - stats.max);
  }
  return out;
}

// dlogits = (softmax(logits) - onehot(label)) * dy.
absl::StatusOr<ir::HostTensor> CrossEntropyGrad(const ir::Node& node, Operands operands) {
  if (absl::Status s = CheckTypes(node, operands); !s.ok()) return s;
  const RowView rows = RowsOf(operands[0]->shape());
  const float* logits = operands[0]->f32();
  const int32_t* labels = operands[1]->i32();
  const float* dy = operands[2]->f32();
  absl::StatusOr<ir::HostTensor> allocated = AllocateResult(node);
  if (!allocated.ok()) return allocated.status();
  ir::HostTensor out = *std::move(allocated);
  float* result = out.f32();
  for (int64_t r = 0; r < rows.count; ++r) {
    const int32_t label = labels[r];
    if (label < 0 || label >= rows.length) return LabelError(node, label, r, rows.length);
    const float* __restrict row = logits + r * rows.length;
    float* __restrict grad = result + r * rows.length;
    const RowExpSum stats = ExpSum(row, rows.length);
    const float scale = dy[r];
    for (int64_t i = 0; i < rows.length; ++i) {
      const float probability = ExpF32(row[i] - stats.max) / stats.sum;
      const float target = i == label ? 1.0f : 0.0f;
      grad[i] = (probability - target) * scale;
    }
  }
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
