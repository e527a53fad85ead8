// The softmax family over the last axis: softmax, log_softmax, their
// backward helpers softmax_grad and log_softmax_grad, and causal_mask, the
// attention mask applied before a softmax. Rows are processed one at a time;
// row sums run in index order in f32.
#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "backends/cpu/kernels/float_math.h"
#include "backends/cpu/kernels/kernel_support.h"
#include "backends/cpu/kernels/parallel.h"

namespace tandem::cpu::internal {
namespace {

absl::Status ExpectF32Rows(const ir::Node& node, Operands operands) {
  for (size_t i = 0; i < operands.size(); ++i) {
    if (absl::Status s = ExpectDType(node, operands, static_cast<int>(i), ir::DType::kF32); !s.ok()) {
      return s;
    }
    if (absl::Status s = ExpectShape(node, operands, static_cast<int>(i), node.type.shape);
        !s.ok()) {
      return s;
    }
  }
  return ExpectResultDType(node, ir::DType::kF32);
}

// y = exp(x - max) / sum(exp(x - max)).
TANDEM_KERNEL_CLONES
void SoftmaxRow(const float* __restrict x, int64_t n, float* __restrict y) {
  const float max = RowMax(x, n);
  for (int64_t i = 0; i < n; ++i) y[i] = ExpF32(x[i] - max);
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += y[i];
  for (int64_t i = 0; i < n; ++i) y[i] = y[i] / sum;
}

// y = (x - max) - log(sum(exp(x - max))).
TANDEM_KERNEL_CLONES
void LogSoftmaxRow(const float* __restrict x, int64_t n, float* __restrict y) {
  const float max = RowMax(x, n);
  // y holds exp(x - max) until it is overwritten with the result.
  for (int64_t i = 0; i < n; ++i) y[i] = ExpF32(x[i] - max);
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += y[i];
  const float log_sum = std::log(sum);
  for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - max) - log_sum;
}

// dx = y * (dy - sum(dy * y)).
TANDEM_KERNEL_CLONES
void SoftmaxGradRow(const float* __restrict y, const float* __restrict dy, int64_t n,
                    float* __restrict dx) {
  float dot = 0.0f;
  for (int64_t i = 0; i < n; ++i) dot += dy[i] * y[i];
  for (int64_t i = 0; i < n; ++i) dx[i] = y[i] * (dy[i] - dot);
}

// dx = dy - exp(y) * sum(dy).
TANDEM_KERNEL_CLONES
void LogSoftmaxGradRow(const float* __restrict y, const float* __restrict dy, int64_t n,
                       float* __restrict dx) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += dy[i];
  for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] - ExpF32(y[i]) * sum;
}

absl::StatusOr<ir::HostTensor> RowWise(const ir::Node& node, Operands operands) {
  if (absl::Status s = ExpectF32Rows(node, operands); !s.ok()) return s;
  absl::StatusOr<ir::HostTensor> allocated = AllocateResult(node);
  if (!allocated.ok()) return allocated.status();
  ir::HostTensor out = *std::move(allocated);
  const RowView rows = RowsOf(node.type.shape);
  const float* x = operands[0]->f32();
  const float* dy = operands.size() > 1 ? operands[1]->f32() : nullptr;
  float* result = out.f32();
  ParallelFor(rows.count, RowGrain(rows.length), [&](int64_t first, int64_t last) {
    for (int64_t r = first; r < last; ++r) {
      const int64_t offset = r * rows.length;
      switch (node.op) {
        case ir::OpKind::kSoftmax:
          SoftmaxRow(x + offset, rows.length, result + offset);
          break;
        case ir::OpKind::kLogSoftmax:
          LogSoftmaxRow(x + offset, rows.length, result + offset);
          break;
        case ir::OpKind::kSoftmaxGrad:
          SoftmaxGradRow(x + offset, dy + offset, rows.length, result + offset);
          break;
        case ir::OpKind::kLogSoftmaxGrad:
          LogSoftmaxGradRow(x + offset, dy + offset, rows.length, result + offset);
          break;
        default:
          KernelBug(absl::StrCat("softmax family: unexpected ", OpName(node.op)));
      }
    }
  });
  return out;
}

// out[..., r, c] = x[..., r, c] where c <= r, else fill.
absl::StatusOr<ir::HostTensor> CausalMask(const ir::Node& node, Operands operands) {
  if (absl::Status s = ExpectF32Rows(node, operands); !s.ok()) return s;
  const ir::Shape& shape = node.type.shape;
  if (shape.size() < 2) return KernelTypeError(node, "needs rank >= 2");
  const float fill = static_cast<float>(node.attributes.GetDouble("fill"));
  const int64_t rows = shape[shape.size() - 2];
  const int64_t cols = shape[shape.size() - 1];
  const int64_t matrices = rows * cols == 0 ? 0 : ir::NumElements(shape) / (rows * cols);
  absl::StatusOr<ir::HostTensor> allocated = AllocateResult(node);
  if (!allocated.ok()) return allocated.status();
  ir::HostTensor out = *std::move(allocated);
  const float* x = operands[0]->f32();
  float* result = out.f32();
  for (int64_t b = 0; b < matrices; ++b) {
    for (int64_t r = 0; r < rows; ++r) {
      const float* __restrict in_row = x + (b * rows + r) * cols;
      float* __restrict out_row = result + (b * rows + r) * cols;
      const int64_t kept = r + 1 < cols ? r + 1 : cols;
      for (int64_t c = 0; c < kept; ++c) out_row[c] = in_row[c];
      for (int64_t c = kept; c < cols; ++c) out_row[c] = fill;
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<ir::HostTensor> EvaluateSoftmaxFamily(const ir::Node& node, Operands operands) {
  switch (node.op) {
    case ir::OpKind::kSoftmax:
    case ir::OpKind::kLogSoftmax:
    case ir::OpKind::kSoftmaxGrad:
    case ir::OpKind::kLogSoftmaxGrad:
      return RowWise(node, operands);
    case ir::OpKind::kCausalMask:
      return CausalMask(node, operands);
    default:
      KernelBug(absl::StrCat("EvaluateSoftmaxFamily: unexpected ", OpName(node.op)));
  }
}

}  // namespace tandem::cpu::internal
