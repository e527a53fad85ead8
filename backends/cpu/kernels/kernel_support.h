// Internal to the reference kernels (backends/cpu/kernels/): the per-family
// entry points EvaluateNode dispatches to, and helpers they share. Not part
// of the CPU backend's API (backends/cpu/kernels.h).
#ifndef TANDEM_BACKENDS_CPU_KERNELS_KERNEL_SUPPORT_H_
#define TANDEM_BACKENDS_CPU_KERNELS_KERNEL_SUPPORT_H_

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "backends/cpu/kernels/parallel.h"
#include "ir/dtype.h"
#include "ir/graph.h"
#include "ir/host_tensor.h"

// The kernel loops that compute rather than move (exp, tanh, divisions
// per element) are built once per vector width and the widest the CPU
// has is chosen when the program loads (GCC's target_clones, an ifunc):
// AVX-512, AVX2 or the baseline SSE2; `flatten` inlines the loops they
// call, so that those are built at each width too. Every width runs the same IEEE
// operations per element in the same order (the kernels are built with
// -ffp-contract=off, so no width contracts a multiply and an add into an
// FMA), so every host computes the same bits at its own speed.
// Not under the sanitizers: an ifunc's resolver runs while the program is
// relocated, before their runtimes start, and crashes in their hooks.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(__SANITIZE_THREAD__) && \
    !defined(__SANITIZE_ADDRESS__)
#define TANDEM_KERNEL_CLONES __attribute__((flatten, target_clones("avx512f", "avx2", "default")))
#else
#define TANDEM_KERNEL_CLONES
#endif

namespace tandem::cpu::internal {

using Operands = absl::Span<const ir::HostTensor* const>;

// Family entry points. Each handles the ops named in its file's comment and
// may assume the operand count matches OpArity (EvaluateNode checks it).
absl::StatusOr<ir::HostTensor> EvaluateElementwise(const ir::Node& node, Operands operands);
// The elementwise maps, which a run of them (ir/elementwise_runs.h) can
// evaluate a piece at a time (interpreter.cc): the unary and binary families.
bool IsFusibleElementwise(ir::OpKind op);
// Elements [0, n) of `op` (IsFusibleElementwise) into `out`, operand k read
// at in[k] with stride strides[k] (1, or 0 for one value broadcast): the
// same per-element function as EvaluateElementwise, so the same bits.
void ElementwiseRange(ir::OpKind op, const float* const* in, const int64_t* strides, float* out, int64_t n);
absl::StatusOr<ir::HostTensor> EvaluateReduction(const ir::Node& node, Operands operands);
absl::StatusOr<ir::HostTensor> EvaluateDataMovement(const ir::Node& node, Operands operands);
absl::StatusOr<ir::HostTensor> EvaluateMatMul(const ir::Node& node, Operands operands);
absl::StatusOr<ir::HostTensor> EvaluateSoftmaxFamily(const ir::Node& node, Operands operands);
absl::StatusOr<ir::HostTensor> EvaluateNormalization(const ir::Node& node, Operands operands);
absl::StatusOr<ir::HostTensor> EvaluateCrossEntropy(const ir::Node& node, Operands operands);
absl::StatusOr<ir::HostTensor> EvaluateEmbedding(const ir::Node& node, Operands operands);
absl::StatusOr<ir::HostTensor> EvaluateRotary(const ir::Node& node, Operands operands);
absl::StatusOr<ir::HostTensor> EvaluateAttention(const ir::Node& node, Operands operands);

// The node's zero-filled result tensor; ResourceExhausted "<op>: cannot
// allocate ..." when there is no memory for it.
absl::StatusOr<ir::HostTensor> AllocateResult(const ir::Node& node);
// The same, not zeroed (ir::HostTensor::AllocateUninitialized): for a
// kernel that writes every element of its result.
absl::StatusOr<ir::HostTensor> AllocateOverwrittenResult(const ir::Node& node);

// bf16 <-> f32 for `node`'s kernel (ResourceExhausted naming the op when
// there is no memory): Widen is exact, Narrow rounds each element
// (FloatToBf16, ir/dtype.h). Both split the elements over the arena's
// threads.
absl::StatusOr<ir::HostTensor> WidenBf16(const ir::Node& node, const ir::HostTensor& bf16);
absl::StatusOr<ir::HostTensor> NarrowToBf16(const ir::Node& node, const ir::HostTensor& f32);

// An Internal error "<op>: <detail>" for operands that do not fit the node.
absl::Status KernelTypeError(const ir::Node& node, absl::string_view detail);

// Internal error unless operand `index` has `dtype`.
absl::Status ExpectDType(const ir::Node& node, Operands operands, int index, ir::DType dtype);
// Internal error unless operand `index` has exactly `shape`.
absl::Status ExpectShape(const ir::Node& node, Operands operands, int index, const ir::Shape& shape);
// Internal error unless the result type is `dtype`.
absl::Status ExpectResultDType(const ir::Node& node, ir::DType dtype);

// A tensor viewed as rows along its last axis: `count` rows of `length`
// contiguous elements (a scalar is one row of one element).
struct RowView {
  int64_t count = 1;
  int64_t length = 1;
};
RowView RowsOf(const ir::Shape& shape);

// The largest of x[0..n), -inf when n is 0; NaNs are passed over. It is
// the index-order fold `x > max ? x : max` with the same result (a max does
// not depend on the order it is taken in, NaNs skipped either way; only the
// sign of a zero maximum could, which no caller's result depends on), taken
// in 8 lanes so that it vectorizes.
inline float RowMax(const float* __restrict x, int64_t n) {
  constexpr int kLanes = 8;
  float lanes[kLanes];
  for (float& lane : lanes) lane = -std::numeric_limits<float>::infinity();
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) lanes[l] = x[i + l] > lanes[l] ? x[i + l] : lanes[l];
  }
  float max = -std::numeric_limits<float>::infinity();
  for (float lane : lanes) max = lane > max ? lane : max;
  for (; i < n; ++i) max = x[i] > max ? x[i] : max;
  return max;
}

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
absl::StatusOr<BroadcastLayout> MakeBroadcastLayout(const ir::Node& node, const ir::Shape& out,
                                                    absl::Span<const ir::Shape* const> inputs);

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

// ForEachBroadcastRow's rows on the threads of the enclosing arena
// (parallel.h), in pieces of about kElementGrain output elements: runs of
// whole rows when rows are short, parts of a row when they are long (a
// scalar broadcast over a large tensor is one row). Calls
// visit(out_offset, offsets, n) for n contiguous output elements from
// out_offset whose inputs start at offsets[i] and advance by
// inner_stride(i) per element. Only for kernels whose every output element
// depends on its inputs alone (no fold across outputs): the cuts then
// decide who computes an element, never how.
template <typename Visit>
void ParallelForEachBroadcastRow(const BroadcastLayout& layout, const Visit& visit) {
  const int rank = static_cast<int>(layout.extents.size());
  const int64_t inner = layout.inner_extent();
  int64_t rows = 1;
  for (int axis = 0; axis + 1 < rank; ++axis) rows *= layout.extents[axis];
  if (rows == 0 || inner == 0) return;
  // The inputs' offsets at the start of `row`, and the index to step from.
  auto start_of = [&](int64_t row, std::vector<int64_t>& index) {
    std::array<int64_t, kMaxBroadcastInputs> offsets{};
    for (int axis = rank - 2; axis >= 0; --axis) {
      index[axis] = row % layout.extents[axis];
      row /= layout.extents[axis];
      for (int i = 0; i < layout.num_inputs; ++i) offsets[i] += index[axis] * layout.strides[i][axis];
    }
    return offsets;
  };
  if (inner >= 2 * kElementGrain) {
    const int64_t parts = inner / kElementGrain;
    const int64_t part_length = (inner + parts - 1) / parts;
    ParallelFor(rows * parts, 1, [&](int64_t first, int64_t last) {
      std::vector<int64_t> index(rank, 0);
      for (int64_t unit = first; unit < last; ++unit) {
        const int64_t row = unit / parts, begin = unit % parts * part_length;
        if (begin >= inner) continue;
        std::array<int64_t, kMaxBroadcastInputs> offsets = start_of(row, index);
        for (int i = 0; i < layout.num_inputs; ++i) offsets[i] += begin * layout.inner_stride(i);
        visit(row * inner + begin, static_cast<const std::array<int64_t, kMaxBroadcastInputs>&>(offsets),
              std::min(part_length, inner - begin));
      }
    });
    return;
  }
  ParallelFor(rows, (kElementGrain + inner - 1) / inner, [&](int64_t first, int64_t last) {
    std::vector<int64_t> index(rank, 0);
    std::array<int64_t, kMaxBroadcastInputs> offsets = start_of(first, index);
    for (int64_t row = first; row < last; ++row) {
      visit(row * inner, static_cast<const std::array<int64_t, kMaxBroadcastInputs>&>(offsets), inner);
      for (int axis = rank - 2; axis >= 0; --axis) {
        for (int i = 0; i < layout.num_inputs; ++i) offsets[i] += layout.strides[i][axis];
        if (++index[axis] < layout.extents[axis]) break;
        for (int i = 0; i < layout.num_inputs; ++i) offsets[i] -= layout.strides[i][axis] * layout.extents[axis];
        index[axis] = 0;
      }
    }
  });
}

// Prints "tandem: internal error: <message>" and aborts: for bugs only.
[[noreturn]] void KernelBug(absl::string_view message);

}  // namespace tandem::cpu::internal

#endif  // TANDEM_BACKENDS_CPU_KERNELS_KERNEL_SUPPORT_H_
