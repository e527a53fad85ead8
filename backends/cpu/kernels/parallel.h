// Internal to the reference kernels: how a kernel spreads its work over the
// threads of the oneTBB arena it is called in (backends/cpu/kernel_threads.h),
// with bits that do not depend on how many there are.
//
// The rule: a piece computes whole outputs (elements, rows, GEMM tiles), and
// how an output is computed never depends on where the pieces are cut. No
// sum is split between pieces, so 1 thread and N threads give the same
// bits: the pieces' boundaries, chosen by the scheduler, only decide who
// computes an output, never how.
#ifndef TANDEM_BACKENDS_CPU_KERNELS_PARALLEL_H_
#define TANDEM_BACKENDS_CPU_KERNELS_PARALLEL_H_

#include <cstdint>

#include "ir/tsan.h"
#include "tbb/blocked_range.h"
#include "tbb/parallel_for.h"

namespace tandem::cpu::internal {

// Elements of an elementwise kernel below which one thread does them all.
inline constexpr int64_t kElementGrain = int64_t{1} << 15;

// Calls body(begin, end) over pieces of [0, count), each at least `grain`
// long (all of it when count <= grain), on the enclosing arena's threads.
template <typename Body>
void ParallelFor(int64_t count, int64_t grain, const Body& body) {
  if (count <= 0) return;
  if (count <= grain) {
    body(int64_t{0}, count);
    return;
  }
#ifdef TANDEM_TSAN
  // The TSan build runs the pieces on the calling thread (ir/tsan.h).
  body(int64_t{0}, count);
#else
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, count, grain),
                    [&body](const tbb::blocked_range<int64_t>& range) { body(range.begin(), range.end()); });
#endif
}

// The grain of a row-wise kernel: rows enough for about kElementGrain
// elements per piece.
inline int64_t RowGrain(int64_t row_length) {
  return row_length <= 0 ? kElementGrain : (kElementGrain + row_length - 1) / row_length;
}

}  // namespace tandem::cpu::internal

#endif  // TANDEM_BACKENDS_CPU_KERNELS_PARALLEL_H_
