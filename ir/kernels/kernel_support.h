// Internal to the reference kernels (ir/kernels/): the per-family entry
// points EvaluateNode dispatches to, and helpers they share. Not part of the
// public API of tandem::ir.
#ifndef TANDEM_IR_KERNELS_KERNEL_SUPPORT_H_
#define TANDEM_IR_KERNELS_KERNEL_SUPPORT_H_

#include <array>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "ir/dtype.h"
#include "ir/graph.h"
#include "ir/host_tensor.h"

namespace tandem::ir::internal {

using Operands = absl::Span<const HostTensor* const>;

// Family entry points. Each handles the ops named in its file's comment and
// may assume the operand count matches OpArity (EvaluateNode checks it).
absl::StatusOr<HostTensor> EvaluateElementwise(const Node& node, Operands operands);
absl::StatusOr<HostTensor> EvaluateReduction(const Node& node, Operands operands);
absl::StatusOr<HostTensor> EvaluateDataMovement(const Node& node, Operands operands);
absl::StatusOr<HostTensor> EvaluateMatMul(const Node& node, Operands operands);
absl::StatusOr<HostTensor> EvaluateSoftmaxFamily(const Node& node, Operands operands);
absl::StatusOr<HostTensor> EvaluateNormalization(const Node& node, Operands operands);
absl::StatusOr<HostTensor> EvaluateCrossEntropy(const Node& node, Operands operands);
absl::StatusOr<HostTensor> EvaluateEmbedding(const Node& node, Operands operands);
absl::StatusOr<HostTensor> EvaluateRotary(const Node& node, Operands operands);

// The node's zero-filled result tensor; ResourceExhausted "<op>: cannot
// allocate ..." when there is no memory for it.
absl::StatusOr<HostTensor> AllocateResult(const Node& node);

// bf16 <-> f32 for `node`'s kernel (ResourceExhausted naming the op when
// there is no memory): Widen is exact, Narrow rounds each element
// (FloatToBf16, ir/dtype.h). Both split the elements over the arena's
// threads.
absl::StatusOr<HostTensor> WidenBf16(const Node& node, const HostTensor& bf16);
absl::StatusOr<HostTensor> NarrowToBf16(const Node& node, const HostTensor& f32);

// An Internal error "<op>: <detail>" for operands that do not fit the node.
absl::Status KernelTypeError(const Node& node, absl::string_view detail);

// Internal error unless operand `index` has `dtype`.
absl::Status ExpectDType(const Node& node, Operands operands, int index, DType dtype);
// Internal error unless operand `index` has exactly `shape`.
absl::Status ExpectShape(const Node& node, Operands operands, int index, const Shape& shape);
// Internal error unless the result type is `dtype`.
absl::Status ExpectResultDType(const Node& node, DType dtype);

// A tensor viewed as rows along its last axis: `count` rows of `length`
// contiguous elements (a scalar is one row of one element).
struct RowView {
  int64_t count = 1;
  int64_t length = 1;
};
RowView RowsOf(const Shape& shape);

// The iteration of a NumPy broadcast from up to three inputs to an output,
// with extent-1 output axes dropped and adjacent axes merged wherever every
// input is either full or broadcast on both. The innermost merged axis has
// stride 1 or 0 in each input, so loops over it are contiguous or repeat one
// value. A scalar (or all-ones) output is one axis of extent 1.
inline constexpr int kMaxBroadcastInputs = 3;
struct BroadcastLayout {
  std::vector<int64_t> extents;  // merged output extents, outermost first
  // strides[i][axis]: element stride of input i along merged axis (0 when
  // broadcast).
  std::array<std::vector<int64_t>, kMaxBroadcastInputs> strides;
  int num_inputs = 0;

  int64_t inner_extent() const { return extents.back(); }
  int64_t inner_stride(int input) const { return strides[input].back(); }
};

// Fails (Internal, naming the node's op) when an input does not broadcast
// to `out`.
absl::StatusOr<BroadcastLayout> MakeBroadcastLayout(const Node& node, const Shape& out,
                                                    absl::Span<const Shape* const> inputs);

// Calls visit(out_offset, offsets) for each row of the innermost merged axis,
// in row-major order of the output; offsets[i] is the element offset of
// input i at the row's start. The output is contiguous: out_offset advances
// by inner_extent() per row.
template <typename Visit>
void ForEachBroadcastRow(const BroadcastLayout& layout, Visit&& visit) {
  const int rank = static_cast<int>(layout.extents.size());
  const int64_t inner = layout.inner_extent();
  int64_t rows = 1;
  for (int axis = 0; axis + 1 < rank; ++axis) rows *= layout.extents[axis];
  std::array<int64_t, kMaxBroadcastInputs> offsets{};
  std::vector<int64_t> index(rank, 0);
  int64_t out_offset = 0;
  for (int64_t row = 0; row < rows; ++row) {
    visit(out_offset, static_cast<const std::array<int64_t, kMaxBroadcastInputs>&>(offsets));
    out_offset += inner;
    for (int axis = rank - 2; axis >= 0; --axis) {
      for (int i = 0; i < layout.num_inputs; ++i) offsets[i] += layout.strides[i][axis];
      if (++index[axis] < layout.extents[axis]) break;
      for (int i = 0; i < layout.num_inputs; ++i) {
        offsets[i] -= layout.strides[i][axis] * layout.extents[axis];
      }
      index[axis] = 0;
    }
  }
}

// Prints "tandem: internal error: <message>" and aborts: for bugs only.
[[noreturn]] void KernelBug(absl::string_view message);

}  // namespace tandem::ir::internal

#endif  // TANDEM_IR_KERNELS_KERNEL_SUPPORT_H_
