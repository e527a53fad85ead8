// Data movement kernels: pipeline_yield, reshape, transpose, broadcast, slice,
// concat. They move elements without looking at them, so they serve every dtype.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "backends/cpu/kernels/kernel_support.h"

namespace tandem::cpu::internal {
namespace {

// Square tile of the blocked 2-D transpose, in elements.
constexpr int64_t kTransposeTile = 16;

absl::Status ExpectSameDType(const ir::Node& node, Operands operands) {
  for (size_t i = 0; i < operands.size(); ++i) {
    if (absl::Status s = ExpectDType(node, operands, static_cast<int>(i), node.type.dtype); !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ir::HostTensor> PipelineYield(const ir::Node& node, Operands operands) {
  if (operands[0]->type() != node.type) {
    return KernelTypeError(node, absl::StrCat("operand type ", ir::TypeToString(operands[0]->type()),
                                              " differs from the result type ", ir::TypeToString(node.type)));
  }
  return *operands[0];
}

absl::StatusOr<ir::HostTensor> Reshape(const ir::Node& node, Operands operands) {
  if (absl::Status s = ExpectSameDType(node, operands); !s.ok()) return s;
  if (operands[0]->num_elements() != node.type.num_elements()) {
    return KernelTypeError(node, absl::StrCat("cannot reshape ", ir::TypeToString(operands[0]->type()), " to ",
                                              ir::TypeToString(node.type)));
  }
  return operands[0]->Reshaped(node.type.shape);
}

// out[r, c] = in[c, r] for an in matrix of rows x cols, tile by tile.
template <typename T>
void TransposeMatrix(const T* __restrict in, int64_t rows, int64_t cols, T* __restrict out) {
  for (int64_t r0 = 0; r0 < rows; r0 += kTransposeTile) {
    const int64_t r1 = std::min(rows, r0 + kTransposeTile);
    for (int64_t c0 = 0; c0 < cols; c0 += kTransposeTile) {
      const int64_t c1 = std::min(cols, c0 + kTransposeTile);
      for (int64_t c = c0; c < c1; ++c) {
        for (int64_t r = r0; r < r1; ++r) out[c * rows + r] = in[r * cols + c];
      }
    }
  }
}

// Transposes with merged axes: in_extents (input order) and perm over them,
// with no extent-1 axes and no two axes adjacent in both orders.
template <typename T>
void TransposeMerged(const T* in, const std::vector<int64_t>& in_extents,
                     const std::vector<int64_t>& perm, T* out) {
  const int rank = static_cast<int>(in_extents.size());
  std::vector<int64_t> in_strides(rank, 1);
  for (int axis = rank - 2; axis >= 0; --axis) {
    in_strides[axis] = in_strides[axis + 1] * in_extents[axis + 1];
  }
  bool leading_identity = true;
  for (int axis = 0; axis + 2 < rank; ++axis) leading_identity &= perm[axis] == axis;
  if (leading_identity && perm[rank - 1] == rank - 2 && perm[rank - 2] == rank - 1) {
    // Swapping the last two axes: one blocked matrix transpose per batch entry.
    const int64_t rows = in_extents[rank - 2];
    const int64_t cols = in_extents[rank - 1];
    int64_t batch = 1;
    for (int axis = 0; axis + 2 < rank; ++axis) batch *= in_extents[axis];
    for (int64_t b = 0; b < batch; ++b) {
      TransposeMatrix(in + b * rows * cols, rows, cols, out + b * rows * cols);
    }
    return;
  }
  BroadcastLayout layout;
  layout.num_inputs = 1;
  for (int axis = 0; axis < rank; ++axis) {
    layout.extents.push_back(in_extents[perm[axis]]);
    layout.strides[0].push_back(in_strides[perm[axis]]);
  }
  const int64_t stride = layout.inner_stride(0);
  ParallelForEachBroadcastRow(layout, [&](int64_t out_offset, const auto& offsets, int64_t n) {
    const T* __restrict src = in + offsets[0];
    T* __restrict dst = out + out_offset;
    if (stride == 1) {
      // The last axis stays last (e.g. the attention permutation [0,2,1,3]).
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(T));
    } else {
      for (int64_t i = 0; i < n; ++i) dst[i] = src[i * stride];
    }
  });
}

absl::StatusOr<ir::HostTensor> Transpose(const ir::Node& node, Operands operands) {
  if (absl::Status s = ExpectSameDType(node, operands); !s.ok()) return s;
  const ir::HostTensor& x = *operands[0];
  const ir::Shape& in_shape = x.shape();
  const std::vector<int64_t>& perm = node.attributes.GetInts("permutation");
  const int64_t rank = static_cast<int64_t>(in_shape.size());
  std::vector<bool> seen(rank, false);
  bool valid = static_cast<int64_t>(perm.size()) == rank;
  for (size_t i = 0; valid && i < perm.size(); ++i) {
    valid = perm[i] >= 0 && perm[i] < rank && !seen[perm[i]];
    if (valid) seen[perm[i]] = true;
  }
  ir::Shape expected;
  if (valid) {
    for (int64_t axis : perm) expected.push_back(in_shape[axis]);
  }
  if (!valid || expected != node.type.shape) {
    return KernelTypeError(node, absl::StrCat("permutation [", absl::StrJoin(perm, ","), "] does not take ",
                                              ir::ShapeToString(in_shape), " to ", ir::ShapeToString(node.type.shape)));
  }
  absl::StatusOr<ir::HostTensor> allocated = AllocateResult(node);
  if (!allocated.ok()) return allocated.status();
  ir::HostTensor out = *std::move(allocated);
  if (out.num_elements() == 0) return out;

  // Drop extent-1 axes, then merge runs of input axes that stay adjacent.
  std::vector<int64_t> kept_perm;  // output order, input axis numbers
  for (int64_t axis : perm) {
    if (in_shape[axis] != 1) kept_perm.push_back(axis);
  }
  std::vector<std::vector<int64_t>> groups;  // output order, each a run of input axes
  for (int64_t axis : kept_perm) {
    if (!groups.empty() && groups.back().back() + 1 == axis) {
      groups.back().push_back(axis);
    } else {
      groups.push_back({axis});
    }
  }
  if (groups.size() <= 1) {
    std::memcpy(out.data(), x.data(), static_cast<size_t>(out.num_bytes()));
    return out;
  }
  // Number the groups in input order.
  std::vector<int64_t> order(groups.size());
  for (size_t g = 0; g < groups.size(); ++g) order[g] = static_cast<int64_t>(g);
  std::sort(order.begin(), order.end(),
            [&](int64_t a, int64_t b) { return groups[a].front() < groups[b].front(); });
  std::vector<int64_t> in_extents(groups.size());
  std::vector<int64_t> merged_perm(groups.size());
  for (size_t position = 0; position < order.size(); ++position) {
    int64_t extent = 1;
    for (int64_t axis : groups[order[position]]) extent *= in_shape[axis];
    in_extents[position] = extent;
    merged_perm[order[position]] = static_cast<int64_t>(position);
  }
  switch (DTypeSize(x.dtype())) {
    case 4:
      TransposeMerged(reinterpret_cast<const uint32_t*>(x.data()), in_extents, merged_perm,
                      reinterpret_cast<uint32_t*>(out.data()));
      break;
    case 2:
      TransposeMerged(reinterpret_cast<const uint16_t*>(x.data()), in_extents, merged_perm,
                      reinterpret_cast<uint16_t*>(out.data()));
      break;
    default:
      return KernelTypeError(node, "unsupported element size");
  }
  return out;
}

absl::StatusOr<ir::HostTensor> Broadcast(const ir::Node& node, Operands operands) {
  if (absl::Status s = ExpectSameDType(node, operands); !s.ok()) return s;
  const ir::HostTensor& x = *operands[0];
  if (node.attributes.GetInts("shape") != node.type.shape) {
    return KernelTypeError(node, absl::StrCat("attribute shape [",
                                              absl::StrJoin(node.attributes.GetInts("shape"), ","),
                                              "] differs from the result type ",
                                              ir::TypeToString(node.type)));
  }
  const ir::Shape* shapes[] = {&x.shape()};
  absl::StatusOr<BroadcastLayout> layout = MakeBroadcastLayout(node, node.type.shape, shapes);
  if (!layout.ok()) return layout.status();
  absl::StatusOr<ir::HostTensor> allocated = AllocateResult(node);
  if (!allocated.ok()) return allocated.status();
  ir::HostTensor out = *std::move(allocated);
  if (out.num_elements() == 0) return out;
  const size_t element = static_cast<size_t>(DTypeSize(x.dtype()));
  const bool contiguous = layout->inner_stride(0) == 1;
  const std::byte* src = x.data();
  std::byte* dst = out.data();
  ParallelForEachBroadcastRow(*layout, [&](int64_t out_offset, const auto& offsets, int64_t n) {
    std::byte* row = dst + out_offset * element;
    const std::byte* from = src + offsets[0] * element;
    if (contiguous) {
      std::memcpy(row, from, static_cast<size_t>(n) * element);
    } else {
      for (int64_t i = 0; i < n; ++i) std::memcpy(row + i * element, from, element);
    }
  });
  return out;
}

// Extents before, along and after `axis`.
struct AxisSplit {
  int64_t outer = 1;
  int64_t inner = 1;
};
AxisSplit SplitAt(const ir::Shape& shape, int64_t axis) {
  AxisSplit split;
  for (int64_t a = 0; a < axis; ++a) split.outer *= shape[a];
  for (int64_t a = axis + 1; a < static_cast<int64_t>(shape.size()); ++a) split.inner *= shape[a];
  return split;
}

absl::StatusOr<ir::HostTensor> Slice(const ir::Node& node, Operands operands) {
  if (absl::Status s = ExpectSameDType(node, operands); !s.ok()) return s;
  const ir::HostTensor& x = *operands[0];
  const int64_t axis = node.attributes.GetInt("axis");
  const int64_t start = node.attributes.GetInt("start");
  const int64_t limit = node.attributes.GetInt("limit");
  ir::Shape expected;
  const bool valid = axis >= 0 && axis < x.type().rank() && start >= 0 && start <= limit &&
                     limit <= x.shape()[axis];
  if (valid) {
    expected = x.shape();
    expected[axis] = limit - start;
  }
  if (!valid || expected != node.type.shape) {
    return KernelTypeError(
        node, absl::StrCat("axis ", axis, " [", start, ", ", limit, ") does not take ", ir::ShapeToString(x.shape()),
                           " to ", ir::ShapeToString(node.type.shape)));
  }
  absl::StatusOr<ir::HostTensor> allocated = AllocateResult(node);
  if (!allocated.ok()) return allocated.status();
  ir::HostTensor out = *std::move(allocated);
  const AxisSplit split = SplitAt(x.shape(), axis);
  const size_t element = static_cast<size_t>(DTypeSize(x.dtype()));
  const int64_t in_row = x.shape()[axis] * split.inner;
  const int64_t out_row = (limit - start) * split.inner;
  for (int64_t o = 0; o < split.outer; ++o) {
    std::memcpy(out.data() + o * out_row * element,
                x.data() + (o * in_row + start * split.inner) * element,
                static_cast<size_t>(out_row) * element);
  }
  return out;
}

absl::StatusOr<ir::HostTensor> Concat(const ir::Node& node, Operands operands) {
  if (absl::Status s = ExpectSameDType(node, operands); !s.ok()) return s;
  const int64_t axis = node.attributes.GetInt("axis");
  const ir::Shape& out_shape = node.type.shape;
  if (axis < 0 || axis >= static_cast<int64_t>(out_shape.size())) {
    return KernelTypeError(node, absl::StrCat("axis ", axis, " out of range"));
  }
  int64_t total = 0;
  for (size_t i = 0; i < operands.size(); ++i) {
    ir::Shape expected = out_shape;
    const ir::Shape& shape = operands[i]->shape();
    if (shape.size() == out_shape.size()) expected[axis] = shape[axis];
    if (absl::Status s = ExpectShape(node, operands, static_cast<int>(i), expected); !s.ok()) {
      return s;
    }
    total += shape[axis];
  }
  if (total != out_shape[axis]) {
    return KernelTypeError(node, absl::StrCat("operands add up to ", total, " along axis ", axis,
                                              ", not ", out_shape[axis]));
  }
  absl::StatusOr<ir::HostTensor> allocated = AllocateResult(node);
  if (!allocated.ok()) return allocated.status();
  ir::HostTensor out = *std::move(allocated);
  const AxisSplit split = SplitAt(out_shape, axis);
  const size_t element = static_cast<size_t>(DTypeSize(node.type.dtype));
  const int64_t out_row = out_shape[axis] * split.inner;
  for (int64_t o = 0; o < split.outer; ++o) {
    int64_t position = o * out_row;
    for (const ir::HostTensor* operand : operands) {
      const int64_t row = operand->shape()[axis] * split.inner;
      std::memcpy(out.data() + position * element, operand->data() + o * row * element,
                  static_cast<size_t>(row) * element);
      position += row;
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<ir::HostTensor> EvaluateDataMovement(const ir::Node& node, Operands operands) {
  switch (node.op) {
    case ir::OpKind::kPipelineYield:
      return PipelineYield(node, operands);
    case ir::OpKind::kReshape:
      return Reshape(node, operands);
    case ir::OpKind::kTranspose:
      return Transpose(node, operands);
    case ir::OpKind::kBroadcast:
      return Broadcast(node, operands);
    case ir::OpKind::kSlice:
      return Slice(node, operands);
    case ir::OpKind::kConcat:
      return Concat(node, operands);
    default:
      KernelBug(absl::StrCat("EvaluateDataMovement: ", OpName(node.op), " does not move data"));
  }
}

}  // namespace tandem::cpu::internal
