// Normalization kernels over the last axis: normalize, layer_norm and the
// backward helper normalize_grad.
//
// Every row goes through NormalizeRow, so normalize, layer_norm and the xhat
// that normalize_grad recomputes agree bit for bit. layer_norm rounds
// xhat * gamma and then + beta separately, exactly as normalize followed by
// the elementwise mul and add kernels would.
#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "backends/cpu/kernels/kernel_support.h"
#include "backends/cpu/kernels/parallel.h"

namespace tandem::cpu::internal {
namespace {

// Writes xhat = (x - mean) * rstd and returns rstd = 1 / sqrt(var + eps),
// with var the biased variance. Sums run in index order in f32.
float NormalizeRow(const float* __restrict x, int64_t n, float eps, float* __restrict xhat) {
  const float count = static_cast<float>(n);
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += x[i];
  const float mean = sum / count;
  float squares = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float centered = x[i] - mean;
    squares += centered * centered;
  }
  const float variance = squares / count;
  const float rstd = 1.0f / std::sqrt(variance + eps);
  for (int64_t i = 0; i < n; ++i) xhat[i] = (x[i] - mean) * rstd;
  return rstd;
}

absl::Status ExpectF32(const ir::Node& node, Operands operands) {
  for (size_t i = 0; i < operands.size(); ++i) {
    if (absl::Status s = ExpectDType(node, operands, static_cast<int>(i), ir::DType::kF32); !s.ok()) {
      return s;
    }
  }
  if (absl::Status s = ExpectResultDType(node, ir::DType::kF32); !s.ok()) return s;
  return ExpectShape(node, operands, 0, node.type.shape);
}

absl::StatusOr<ir::HostTensor> Normalize(const ir::Node& node, Operands operands) {
  if (absl::Status s = ExpectF32(node, operands); !s.ok()) return s;
  const float eps = static_cast<float>(node.attributes.GetDouble("eps"));
  absl::StatusOr<ir::HostTensor> allocated = AllocateResult(node);
  if (!allocated.ok()) return allocated.status();
  ir::HostTensor out = *std::move(allocated);
  const RowView rows = RowsOf(node.type.shape);
  const float* x = operands[0]->f32();
  float* result = out.f32();
  ParallelFor(rows.count, RowGrain(rows.length), [&](int64_t first, int64_t last) {
    for (int64_t r = first; r < last; ++r) {
      NormalizeRow(x + r * rows.length, rows.length, eps, result + r * rows.length);
    }
  });
  return out;
}

absl::StatusOr<ir::HostTensor> LayerNorm(const ir::Node& node, Operands operands) {
  if (absl::Status s = ExpectF32(node, operands); !s.ok()) return s;
  const RowView rows = RowsOf(node.type.shape);
  const ir::Shape affine_shape = {rows.length};
  if (node.type.shape.empty()) return KernelTypeError(node, "needs rank >= 1");
  for (int i = 1; i < 3; ++i) {
    if (absl::Status s = ExpectShape(node, operands, i, affine_shape); !s.ok()) return s;
  }
  const float eps = static_cast<float>(node.attributes.GetDouble("eps"));
  absl::StatusOr<ir::HostTensor> allocated = AllocateResult(node);
  if (!allocated.ok()) return allocated.status();
  ir::HostTensor out = *std::move(allocated);
  const float* x = operands[0]->f32();
  const float* __restrict gamma = operands[1]->f32();
  const float* __restrict beta = operands[2]->f32();
  float* result = out.f32();
  ParallelFor(rows.count, RowGrain(rows.length), [&](int64_t first, int64_t last) {
    for (int64_t r = first; r < last; ++r) {
      float* __restrict row = result + r * rows.length;
      NormalizeRow(x + r * rows.length, rows.length, eps, row);
      for (int64_t i = 0; i < rows.length; ++i) {
        const float scaled = row[i] * gamma[i];
        row[i] = scaled + beta[i];
      }
    }
  });
  return out;
}

// dx = rstd * ((dy - mean(dy)) - xhat * mean(dy * xhat)).
absl::StatusOr<ir::HostTensor> NormalizeGrad(const ir::Node& node, Operands operands) {
  if (absl::Status s = ExpectF32(node, operands); !s.ok()) return s;
  if (absl::Status s = ExpectShape(node, operands, 1, node.type.shape); !s.ok()) return s;
  const float eps = static_cast<float>(node.attributes.GetDouble("eps"));
  absl::StatusOr<ir::HostTensor> allocated = AllocateResult(node);
  if (!allocated.ok()) return allocated.status();
  ir::HostTensor out = *std::move(allocated);
  const RowView rows = RowsOf(node.type.shape);
  const float count = static_cast<float>(rows.length);
  const float* x = operands[0]->f32();
  const float* dy = operands[1]->f32();
  float* result = out.f32();
  ParallelFor(rows.count, RowGrain(rows.length), [&](int64_t first, int64_t last) {
    for (int64_t r = first; r < last; ++r) {
      const int64_t offset = r * rows.length;
      // The output row holds xhat until it is overwritten with dx.
      float* __restrict row = result + offset;
      const float* __restrict dy_row = dy + offset;
      const float rstd = NormalizeRow(x + offset, rows.length, eps, row);
      float dy_sum = 0.0f;
      float dy_xhat_sum = 0.0f;
      for (int64_t i = 0; i < rows.length; ++i) {
        dy_sum += dy_row[i];
        dy_xhat_sum += dy_row[i] * row[i];
      }
      const float dy_mean = dy_sum / count;
      const float dy_xhat_mean = dy_xhat_sum / count;
      for (int64_t i = 0; i < rows.length; ++i) {
        row[i] = rstd * ((dy_row[i] - dy_mean) - row[i] * dy_xhat_mean);
      }
    }
  });
  return out;
}

}  // namespace

absl::StatusOr<ir::HostTensor> EvaluateNormalization(const ir::Node& node, Operands operands) {
  switch (node.op) {
    case ir::OpKind::kNormalize:
      return Normalize(node, operands);
    case ir::OpKind::kLayerNorm:
      return LayerNorm(node, operands);
    case ir::OpKind::kNormalizeGrad:
      return NormalizeGrad(node, operands);
    default:
      KernelBug(absl::StrCat("EvaluateNormalization: unexpected ", OpName(node.op)));
  }
}

}  // namespace tandem::cpu::internal
