// CUDA's execution model on the CPU: what a kernel source written for nvcc
// needs to compile with the host compiler and run on host threads, so that
// every kernel of the CUDA backend, and the backend's graph runner around
// them, is tested in CI on machines without a GPU. One source, two
// compilers: a kernel source includes this header (through cuda_kernels.cuh
// when TANDEM_CUDA_ON_CPU is defined) and launches with TANDEM_LAUNCH, which
// is `<<<...>>>` under nvcc.
//
// The model:
//  - A launch runs on the calling thread's behalf, to completion, before it
//    returns (the stream is ignored: every launch is synchronous). One
//    launch runs at a time in the process (launches from several threads
//    queue): `__shared__` variables are function-local statics, which
//    blocks then share one after another as CUDA's blocks own theirs.
//  - A block's threads are host threads, one per CUDA thread; the blocks of
//    the grid run one after another, in blockIdx order, on the same
//    threads. `threadIdx`, `blockIdx`, `blockDim` and `gridDim` are
//    thread_local.
//  - `__syncthreads()` is a barrier of the block. A barrier that some of the
//    block's threads never reach (they returned, or wait at a different
//    point) is a divergent barrier: it hangs or corrupts on a GPU, and here
//    it aborts the process with a message naming the kernel, block and
//    threads, instead of hanging.
//  - Warp shuffles (`__shfl_sync`, `__shfl_down_sync`, `__shfl_up_sync`,
//    `__shfl_xor_sync`) exchange values through per-warp slots between two
//    warp barriers; the mask must name every thread of the warp (a partial
//    mask aborts). Warps are 32 threads; the last warp of a block whose size
//    is not a multiple of 32 is shorter, as on the GPU.
//  - Atomics (`atomicAdd`, `atomicMax`, `atomicMin`, `atomicExch`,
//    `atomicCAS`) go through std::atomic_ref.
//  - The barriers are mutexes and condition variables, so ThreadSanitizer
//    sees the order they give: a kernel that reads another thread's shared
//    memory without a `__syncthreads` between is reported as the race it is.
//  - Math is the host's libm (not libdevice): results agree with the GPU's
//    within a few ulp, bit for bit only where the source fixes the rounding
//    (__fadd_rn, __fmul_rn, fold orders). bf16 conversions are cuda_bf16.h's
//    own host code.
//  - The runtime's types and declarations are the toolkit's headers, which
//    the host compiler reads: building this needs the CUDA toolkit's
//    headers, not nvcc or a GPU. Its functions (streams, events, memory,
//    copies) run on host memory, synchronously (cuda_runtime_on_cpu.cc).
// Not modelled: speed, inline PTX, tensor cores, cp.async/TMA, CUB and
// cooperative groups (library calls stay outside kernels, behind the
// backend's function table), dynamic shared memory (a launch asking for
// some is refused with cudaErrorInvalidValue), more than 1024 threads a
// block (refused, as on the GPU).
#ifndef TANDEM_BACKENDS_CUDA_CUDA_ON_CPU_H_
#define TANDEM_BACKENDS_CUDA_CUDA_ON_CPU_H_

#ifdef __CUDACC__
#error "backends/cuda/cuda_on_cpu.h is for the host compiler; nvcc has CUDA itself"
#endif

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>

// The CUDA runtime's types and declarations come from the toolkit's
// headers, which the host compiler reads (its functions are implemented on
// host memory in cuda_runtime_on_cpu.cc); what only nvcc knows is below.
// The toolkit's execution-space macros expand to nothing for the host
// compiler; __shared__ must be storage the block's threads share.
#undef __shared__
#define __shared__ static
#undef __global__
#define __global__
#undef __forceinline__
#define __forceinline__ inline

inline thread_local uint3 threadIdx;
inline thread_local uint3 blockIdx;
inline thread_local dim3 blockDim;
inline thread_local dim3 gridDim;
inline constexpr int warpSize = 32;

using std::isinf;
using std::isnan;

namespace tandem::cuda_on_cpu {

// Runs `body` as the kernel `name` over `grid` x `block` (see the header
// comment); returns cudaErrorInvalidConfiguration for an empty grid or
// block or more than 1024 threads a block, and cudaErrorInvalidValue for
// dynamic shared memory.
cudaError_t RunGrid(const char* name, dim3 grid, dim3 block, size_t shared_bytes, const std::function<void()>& body);

// Host work only: while set, a launch checks its configuration and returns
// without running the kernel, and the CPU cuBLAS table's GEMMs return at
// once, so that a caller's own host work per call can be timed
// (tandem-bench-runner-on-cpu). Results are garbage meanwhile.
void SetKernelsSkipped(bool skipped);
bool KernelsSkipped();

// The GEMMs the CPU cuBLAS table (cublas_library_on_cpu.cc) has run in this
// process, by their operands' type: what a test reads to see which
// operands the graph runner hands cuBLAS.
struct GemmCalls {
  int64_t f32_operands = 0;
  int64_t bf16_operands = 0;
};
GemmCalls GemmCallsSoFar();

// The calling (emulated CUDA) thread's block barrier and warp exchanges.
void SyncThreads();
uint32_t WarpExchange(uint32_t mask, uint32_t value, int source_lane, bool in_range);
[[noreturn]] void Abort(const char* what);
// The lane of the calling thread in its warp, and how many lanes its warp has.
int LaneId();
int WarpLanes();

// The calling thread's last error (cudaGetLastError takes it,
// cudaPeekAtLastError reads it), set by launches and runtime calls.
cudaError_t TakeLastError();
cudaError_t PeekLastError();
void SetLastError(cudaError_t error);

template <typename T>
uint32_t Bits(T value) {
  static_assert(sizeof(T) == 4, "warp shuffles of 4-byte values");
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  return bits;
}
template <typename T>
T FromBits(uint32_t bits) {
  T value;
  std::memcpy(&value, &bits, 4);
  return value;
}

}  // namespace tandem::cuda_on_cpu

#define TANDEM_LAUNCH(kernel, grid, block, shared_bytes, stream)                                              \
  [&](auto... tandem_launch_args) {                                                                           \
    (void)(stream);                                                                                            \
    ::tandem::cuda_on_cpu::SetLastError(::tandem::cuda_on_cpu::RunGrid(                                        \
        #kernel, dim3(grid), dim3(block), (shared_bytes), [&] { kernel(tandem_launch_args...); }));            \
  }

inline void __syncthreads() { tandem::cuda_on_cpu::SyncThreads(); }

template <typename T>
T __shfl_sync(unsigned mask, T value, int source_lane, int width = warpSize) {
  if (width != warpSize) tandem::cuda_on_cpu::Abort("__shfl_sync with a width other than 32");
  const int lanes = tandem::cuda_on_cpu::WarpLanes();
  return tandem::cuda_on_cpu::FromBits<T>(
      tandem::cuda_on_cpu::WarpExchange(mask, tandem::cuda_on_cpu::Bits(value), source_lane % lanes, true));
}
template <typename T>
T __shfl_down_sync(unsigned mask, T value, unsigned delta, int width = warpSize) {
  if (width != warpSize) tandem::cuda_on_cpu::Abort("__shfl_down_sync with a width other than 32");
  const int source = tandem::cuda_on_cpu::LaneId() + static_cast<int>(delta);
  return tandem::cuda_on_cpu::FromBits<T>(tandem::cuda_on_cpu::WarpExchange(
      mask, tandem::cuda_on_cpu::Bits(value), source, source < tandem::cuda_on_cpu::WarpLanes()));
}
template <typename T>
T __shfl_up_sync(unsigned mask, T value, unsigned delta, int width = warpSize) {
  if (width != warpSize) tandem::cuda_on_cpu::Abort("__shfl_up_sync with a width other than 32");
  const int source = tandem::cuda_on_cpu::LaneId() - static_cast<int>(delta);
  return tandem::cuda_on_cpu::FromBits<T>(
      tandem::cuda_on_cpu::WarpExchange(mask, tandem::cuda_on_cpu::Bits(value), source, source >= 0));
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T value, int lane_mask, int width = warpSize) {
  if (width != warpSize) tandem::cuda_on_cpu::Abort("__shfl_xor_sync with a width other than 32");
  const int source = tandem::cuda_on_cpu::LaneId() ^ lane_mask;
  return tandem::cuda_on_cpu::FromBits<T>(tandem::cuda_on_cpu::WarpExchange(
      mask, tandem::cuda_on_cpu::Bits(value), source, source < tandem::cuda_on_cpu::WarpLanes()));
}

template <typename T>
T atomicAdd(T* address, T value) {
  return std::atomic_ref<T>(*address).fetch_add(value);
}
template <typename T>
T atomicExch(T* address, T value) {
  return std::atomic_ref<T>(*address).exchange(value);
}
template <typename T>
T atomicCAS(T* address, T expected, T desired) {
  std::atomic_ref<T>(*address).compare_exchange_strong(expected, desired);
  return expected;
}
namespace tandem::cuda_on_cpu {
// Stores `value` while it is `better` than the stored value;
// returns the old value, as atomicMax and atomicMin do.
template <typename T, typename Better>
T AtomicKeepBest(T* address, T value, Better better) {
  std::atomic_ref<T> ref(*address);
  T old = ref.load();
  while (better(value, old) && !ref.compare_exchange_weak(old, value)) {
  }
  return old;
}
}  // namespace tandem::cuda_on_cpu
template <typename T>
T atomicMax(T* address, T value) {
  return tandem::cuda_on_cpu::AtomicKeepBest(address, value, [](T a, T b) { return b < a; });
}
template <typename T>
T atomicMin(T* address, T value) {
  return tandem::cuda_on_cpu::AtomicKeepBest(address, value, [](T a, T b) { return a < b; });
}

// Arithmetic with the rounding written out: on the host, with
// -ffp-contract=off, a + b and a * b are already rounded so.
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fmul_rn(float a, float b) { return a * b; }

#endif  // TANDEM_BACKENDS_CUDA_CUDA_ON_CPU_H_
