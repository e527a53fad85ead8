// ThreadSanitizer and oneTBB, for the TSan build (tools/ci/thread_suite.sh).
//
// oneTBB hands work between its threads through its own atomics, in a
// library Debian does not build with TSan, so TSan cannot see those
// hand-offs and reports TBB's own task objects as raced. So in the TSan
// build a kernel's pieces run on its calling thread (ParallelFor,
// backends/cpu/kernels/parallel.h): what TSan checks is Tandem's threads
// (actors, transports, launchers, replica groups), and the kernels' pieces are
// checked by the tests that give 1 and N kernel threads the same bits. A
// KernelThreads arena may still run a whole graph on one of its threads:
// TsanRelease and TsanAcquire give that hand-off its edges; they are no-ops
// in every other build.
#ifndef TANDEM_IR_TSAN_H_
#define TANDEM_IR_TSAN_H_

#if defined(__SANITIZE_THREAD__)
#define TANDEM_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TANDEM_TSAN 1
#endif
#endif

#ifdef TANDEM_TSAN
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#endif

namespace tandem::ir::internal {

// What this thread did so far happens before what follows a later
// TsanAcquire(sync) on any thread.
inline void TsanRelease([[maybe_unused]] const void* sync) {
#ifdef TANDEM_TSAN
  __tsan_release(const_cast<void*>(sync));
#endif
}
inline void TsanAcquire([[maybe_unused]] const void* sync) {
#ifdef TANDEM_TSAN
  __tsan_acquire(const_cast<void*>(sync));
#endif
}

}  // namespace tandem::ir::internal

#endif  // TANDEM_IR_TSAN_H_
