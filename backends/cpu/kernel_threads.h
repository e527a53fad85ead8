// How many threads the reference kernels use: a oneTBB arena that a caller
// runs graphs inside. The kernels split their work over the arena's threads
// by independent outputs only (backends/cpu/kernels/parallel.h), so the bits
// never depend on the count: a step on 1 thread and on N gives the same bits,
// and the reference interpreter and every actor agree whatever their counts.
//
// Kernels called outside any KernelThreads use oneTBB's default arena (all
// cores). OpenBLAS computes each GEMM tile on one thread: pin it with
// SetBlasThreads(1) in every process that runs kernels.
//
// Owned by whoever runs the graphs (an actor's compute thread, the
// reference trainer); Run is safe from any thread, one call at a time per
// caller thread.
#ifndef TANDEM_BACKENDS_CPU_KERNEL_THREADS_H_
#define TANDEM_BACKENDS_CPU_KERNEL_THREADS_H_

#include <utility>

#include "ir/tsan.h"
#include "tbb/task_arena.h"

namespace tandem::cpu {

// The most kernel threads a process may ask for (--threads of tandem and
// tandem-actor), checked before anything is started.
inline constexpr int kMaxKernelThreads = 4096;

class KernelThreads {
 public:
  // `threads` >= 1, or 0 for every core of this host.
  explicit KernelThreads(int threads);
  KernelThreads(const KernelThreads&) = delete;
  KernelThreads& operator=(const KernelThreads&) = delete;

  int threads() const { return threads_; }
  // Runs `work` with the kernels it calls on these threads; returns its
  // result.
  template <typename Work>
  auto Run(Work&& work) -> decltype(work()) {
    // The arena may run `work` on one of its own threads: for TSan
    // (ir/tsan.h), what came before happens before it, and it before what
    // follows.
    ir::internal::TsanRelease(this);
    struct AcquiredAfter {
      const KernelThreads* threads;
      ~AcquiredAfter() { ir::internal::TsanAcquire(threads); }
    } acquired_after{this};
    return arena_.execute([&]() -> decltype(work()) {
      ir::internal::TsanAcquire(this);
      struct ReleasedAfter {
        const KernelThreads* threads;
        ~ReleasedAfter() { ir::internal::TsanRelease(threads); }
      } released_after{this};
      return work();
    });
  }

 private:
  int threads_;
  tbb::task_arena arena_;
};

// The cores of this host (what oneTBB would use by default).
int HostCores();
// Threads for each of `actors` actors sharing this host's cores: the cores
// divided evenly, at least 1.
int SharedCoreThreads(int actors);

}  // namespace tandem::cpu

#endif  // TANDEM_BACKENDS_CPU_KERNEL_THREADS_H_
