// Reduction kernels: reduce_sum, reduce_mean, reduce_max over `axes`.
//
// The input is walked once in row-major order and each element is folded
// into its output element. For any one output element that visits its
// reduced elements in row-major order of the reduced axes, so a sum is the
// plain index-order loop sum = ((0 + x0) + x1) + ... in f32, whichever axes
// are reduced, and a leading-axes sum (a bias gradient) still runs as a
// contiguous, vectorizable row update.
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "backends/cpu/kernels/kernel_support.h"

namespace tandem::cpu::internal {
namespace {

enum class Combine { kSum, kMax };

// The reduced result shape, or an Internal error for bad axes.
absl::StatusOr<ir::Shape> ReducedShape(const ir::Node& node, const ir::Shape& in, const std::vector<int64_t>& axes,
                                       bool keep_dims) {
  ir::Shape out;
  size_t next = 0;
  for (int64_t axis = 0; axis < static_cast<int64_t>(in.size()); ++axis) {
    const bool reduced = next < axes.size() && axes[next] == axis;
    if (reduced) ++next;
    if (!reduced) {
      out.push_back(in[axis]);
    } else if (keep_dims) {
      out.push_back(1);
    }
  }
  if (next != axes.size()) {
    return KernelTypeError(node, absl::StrCat("axes [", absl::StrJoin(axes, ","),
                                              "] are not sorted, unique and within rank ",
                                              in.size()));
  }
  return out;
}

// Folds x into out following `layout`: extents over the (merged) input,
// strides[0] the output's strides (0 along reduced axes).
template <Combine kCombine>
void Fold(const BroadcastLayout& layout, bool inner_reduced, const float* x, float* out) {
  const int64_t inner = layout.inner_extent();
  ForEachBroadcastRow(layout, [&](int64_t in_offset, const auto& offsets) {
    const float* __restrict row = x + in_offset;
    float* __restrict target = out + offsets[0];
    if (inner_reduced) {
      float acc = *target;
      for (int64_t i = 0; i < inner; ++i) {
        if constexpr (kCombine == Combine::kSum) {
          acc += row[i];
        } else {
          acc = (row[i] > acc || std::isnan(row[i])) ? row[i] : acc;
        }
      }
      *target = acc;
    } else {
      for (int64_t i = 0; i < inner; ++i) {
        if constexpr (kCombine == Combine::kSum) {
          target[i] += row[i];
        } else {
          target[i] = (row[i] > target[i] || std::isnan(row[i])) ? row[i] : target[i];
        }
      }
    }
  });
}

absl::StatusOr<ir::HostTensor> Reduce(const ir::Node& node, Operands operands) {
  if (absl::Status s = ExpectDType(node, operands, 0, ir::DType::kF32); !s.ok()) return s;
  if (absl::Status s = ExpectResultDType(node, ir::DType::kF32); !s.ok()) return s;
  const ir::HostTensor& x = *operands[0];
  const ir::Shape& in_shape = x.shape();
  const std::vector<int64_t>& axes = node.attributes.GetInts("axes");
  const bool keep_dims = node.attributes.GetIntOr("keep_dims", 0) != 0;
  absl::StatusOr<ir::Shape> expected = ReducedShape(node, in_shape, axes, keep_dims);
  if (!expected.ok()) return expected.status();
  if (*expected != node.type.shape) {
    return KernelTypeError(
        node, absl::StrCat("result shape ", ir::ShapeToString(node.type.shape), " does not match reducing ",
                           ir::ShapeToString(in_shape), " over [", absl::StrJoin(axes, ","), "]"));
  }

  // Merge adjacent input axes that are both reduced or both kept; drop
  // extent-1 axes.
  std::vector<int64_t> extents;
  std::vector<bool> reduced_flags;
  int64_t reduced_count = 1;
  size_t next = 0;
  for (int64_t axis = 0; axis < static_cast<int64_t>(in_shape.size()); ++axis) {
    const bool reduced = next < axes.size() && axes[next] == axis;
    if (reduced) {
      ++next;
      reduced_count *= in_shape[axis];
    }
    if (in_shape[axis] == 1) continue;
    if (!extents.empty() && reduced_flags.back() == reduced) {
      extents.back() *= in_shape[axis];
    } else {
      extents.push_back(in_shape[axis]);
      reduced_flags.push_back(reduced);
    }
  }
  if (extents.empty()) {
    extents.push_back(1);
    reduced_flags.push_back(false);
  }

  absl::StatusOr<ir::HostTensor> allocated = AllocateResult(node);
  if (!allocated.ok()) return allocated.status();
  ir::HostTensor out = *std::move(allocated);
  float* result = out.f32();
  const int64_t out_count = out.num_elements();
  const bool is_max = node.op == ir::OpKind::kReduceMax;
  if (is_max) {
    for (int64_t i = 0; i < out_count; ++i) result[i] = -std::numeric_limits<float>::infinity();
  }
  if (x.num_elements() > 0) {
    BroadcastLayout layout;
    layout.extents = extents;
    layout.num_inputs = 1;
    std::vector<int64_t>& strides = layout.strides[0];
    strides.assign(extents.size(), 0);
    int64_t running = 1;
    for (int axis = static_cast<int>(extents.size()) - 1; axis >= 0; --axis) {
      if (!reduced_flags[axis]) {
        strides[axis] = running;
        running *= extents[axis];
      }
    }
    const bool inner_reduced = reduced_flags.back();
    if (is_max) {
      Fold<Combine::kMax>(layout, inner_reduced, x.f32(), result);
    } else {
      Fold<Combine::kSum>(layout, inner_reduced, x.f32(), result);
    }
  }
  if (node.op == ir::OpKind::kReduceMean) {
    const float count = static_cast<float>(reduced_count);
    for (int64_t i = 0; i < out_count; ++i) result[i] = result[i] / count;
  }
  return out;
}

}  // namespace

absl::StatusOr<ir::HostTensor> EvaluateReduction(const ir::Node& node, Operands operands) {
  switch (node.op) {
    case ir::OpKind::kReduceSum:
    case ir::OpKind::kReduceMean:
    case ir::OpKind::kReduceMax:
      return Reduce(node, operands);
    default:
      KernelBug(absl::StrCat("EvaluateReduction: ", OpName(node.op), " is not a reduction"));
  }
}

}  // namespace tandem::cpu::internal
