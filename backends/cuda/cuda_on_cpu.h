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
//    `__syncwarp()` is a barrier of the warp (the full mask only).
//  - Tensor-core matrix products (`nvcuda::wmma`, mma.h) at the shape the
//    kernels use: 16 x 16 x 16 fragments of bf16 operands and f32
//    accumulators. A fragment's element layout is the implementation's on
//    the GPU too: kernels touch its elements uniformly, or through a
//    fragment of the same type loaded from known values. Here lane L holds
//    elements 8L..8L+7 of the tile in row-major order; `mma_sync` is a warp
//    collective whose lanes' operands meet through the warp's slots, each
//    lane then summing its own elements, k = 0..15 by fused multiply-adds in
//    order onto the accumulator. The GPU's order and rounding inside a
//    product are its own: the two agree to f32's rounding of 16 terms, not
//    bit for bit. Loads and stores abort on what the GPU requires and does
//    not check: a 32-byte aligned pointer, a stride of whole 16 bytes.
//  - The PTX-level products kernels/warp_mma.cuh wraps: mma.sync m16n8k16
//    (bf16 operands, f32 accumulators) and ldmatrix x4 (plain and
//    transposed), warp collectives in the PTX ISA's register layouts, so a
//    kernel that reads a product's registers as the next one's operand
//    computes here what it computes on the GPU. The product sums k = 0..15
//    by fused multiply-adds in order (to f32's rounding of the GPU's, as
//    wmma's); an ldmatrix row address not 16-byte aligned aborts. cp.async
//    copies complete at once.
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
// Not modelled: speed, inline PTX (past warp_mma.cuh's), other tensor-core
// shapes and types, TMA, CUB and
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
#include <type_traits>

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

// The GEMMs the CPU cuBLAS and cuBLASLt tables (cublas_library_on_cpu.cc)
// have run in this process, by their operands' type, and of those the
// cuBLASLt matmuls with a bias epilogue: what a test reads to see which
// operands the graph runner hands cuBLAS, and which GEMMs added a bias.
struct GemmCalls {
  int64_t f32_operands = 0;
  int64_t bf16_operands = 0;
  int64_t bias_epilogues = 0;
  // The cuBLASLt heuristic's answers asked for a bias epilogue, and the
  // matmuls with one the table declined at launch (BiasEpilogueAnswer).
  int64_t bias_epilogue_heuristics = 0;
  int64_t bias_epilogues_declined_at_launch = 0;
};
GemmCalls GemmCallsSoFar();
// How the CPU cuBLASLt table answers a GEMM with a bias epilogue: it takes
// every shape it computes (kTaken, the default), or declines them the two
// ways cuBLASLt declines a shape, its heuristic finding no algorithm or its
// matmul returning CUBLAS_STATUS_NOT_SUPPORTED, so that a test runs the
// graph runner's fallback to a matmul and an add.
enum class BiasEpilogueAnswer { kTaken, kNoAlgorithm, kNotSupportedAtLaunch };
void SetBiasEpilogueAnswer(BiasEpilogueAnswer answer);
// The warp-wide tensor-core products (wmma::mma_sync) run in this process,
// one per warp's call: what a test reads to see that a kernel took them.
int64_t TensorCoreProductsSoFar();
void CountTensorCoreProduct();

// The calling (emulated CUDA) thread's block barrier and warp exchanges.
void SyncThreads();
uint32_t WarpExchange(uint32_t mask, uint32_t value, int source_lane, bool in_range);
// Every lane of the calling thread's warp (a whole one: 32 lanes) gives its
// kWarpGatherWords words and receives all lanes' words: all[lane][i].
inline constexpr int kWarpGatherWords = 8;
void WarpGather(const uint32_t (&mine)[kWarpGatherWords], uint32_t (&all)[32][kWarpGatherWords]);
// The warp collectives behind kernels/warp_mma.cuh (see the header
// comment): d += a b over the calling warp's m16n8k16 operands, and an
// ldmatrix x4 from this lane's row address.
void WarpMmaM16N8K16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
void WarpLoadMatrices(uint32_t (&r)[4], const void* row, bool transposed);
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
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  tandem::cuda_on_cpu::WarpExchange(mask, 0, tandem::cuda_on_cpu::LaneId(), true);
}

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

// ---- nvcuda::wmma at 16 x 16 x 16 (see the header comment).
namespace nvcuda::wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
class fragment {
  static_assert(M == 16 && N == 16 && K == 16, "cuda_on_cpu models wmma's 16 x 16 x 16 fragments only");

 public:
  static constexpr int num_elements = 8;  // 256 elements over 32 lanes
  T x[num_elements];
};

namespace detail {

// Aborts unless `p` and `ldm` are what a wmma load or store requires.
inline void CheckMatrix(const void* p, unsigned ldm, size_t element_size) {
  if (reinterpret_cast<uintptr_t>(p) % 32 != 0) tandem::cuda_on_cpu::Abort("a wmma matrix not 32-byte aligned");
  if (ldm * element_size % 16 != 0) tandem::cuda_on_cpu::Abort("a wmma stride not a multiple of 16 bytes");
}
// Where element `index` of a fragment (row-major over the 16 x 16 tile) is
// in memory of stride `ldm`.
inline size_t Offset(int index, unsigned ldm, bool row_major_memory) {
  const size_t row = static_cast<size_t>(index / 16), column = static_cast<size_t>(index % 16);
  return row_major_memory ? row * ldm + column : row + column * ldm;
}
inline int FirstElement() { return 8 * tandem::cuda_on_cpu::LaneId(); }
inline uint32_t PackTwo(__nv_bfloat16 low, __nv_bfloat16 high) {
  return uint32_t{static_cast<__nv_bfloat16_raw>(low).x} | (uint32_t{static_cast<__nv_bfloat16_raw>(high).x} << 16);
}
inline float WidenHalf(uint32_t word, int half) {
  __nv_bfloat16_raw raw;
  raw.x = static_cast<unsigned short>(half == 0 ? word & 0xffffu : word >> 16);
  return __bfloat162float(__nv_bfloat16(raw));
}

}  // namespace detail

template <typename Use, typename T, typename Layout>
void fill_fragment(fragment<Use, 16, 16, 16, T, Layout>& f, T value) {
  for (T& element : f.x) element = value;
}

template <typename Use, typename Layout>
void load_matrix_sync(fragment<Use, 16, 16, 16, __nv_bfloat16, Layout>& f, const __nv_bfloat16* p, unsigned ldm) {
  detail::CheckMatrix(p, ldm, sizeof(__nv_bfloat16));
  for (int e = 0; e < 8; ++e) {
    f.x[e] = p[detail::Offset(detail::FirstElement() + e, ldm, std::is_same_v<Layout, row_major>)];
  }
}
inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float>& f, const float* p, unsigned ldm,
                             layout_t layout) {
  detail::CheckMatrix(p, ldm, sizeof(float));
  for (int e = 0; e < 8; ++e) f.x[e] = p[detail::Offset(detail::FirstElement() + e, ldm, layout == mem_row_major)];
}
inline void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 16, float>& f, unsigned ldm,
                              layout_t layout) {
  detail::CheckMatrix(p, ldm, sizeof(float));
  for (int e = 0; e < 8; ++e) p[detail::Offset(detail::FirstElement() + e, ldm, layout == mem_row_major)] = f.x[e];
}

// d = a b + c over the warp: a [16 x 16] (rows i, depth k), b [16 x 16]
// (depth k, columns j).
template <typename LayoutA, typename LayoutB>
void mma_sync(fragment<accumulator, 16, 16, 16, float>& d,
              const fragment<matrix_a, 16, 16, 16, __nv_bfloat16, LayoutA>& a,
              const fragment<matrix_b, 16, 16, 16, __nv_bfloat16, LayoutB>& b,
              const fragment<accumulator, 16, 16, 16, float>& c) {
  uint32_t mine[tandem::cuda_on_cpu::kWarpGatherWords];
  for (int w = 0; w < 4; ++w) {
    mine[w] = detail::PackTwo(a.x[2 * w], a.x[2 * w + 1]);
    mine[4 + w] = detail::PackTwo(b.x[2 * w], b.x[2 * w + 1]);
  }
  uint32_t all[32][tandem::cuda_on_cpu::kWarpGatherWords];
  tandem::cuda_on_cpu::WarpGather(mine, all);
  if (tandem::cuda_on_cpu::LaneId() == 0) tandem::cuda_on_cpu::CountTensorCoreProduct();
  // Element e of a tile is in lane e / 8, word (e % 8) / 2, half e % 2.
  const auto element = [&all](int e, int first_word) {
    return detail::WidenHalf(all[e / 8][first_word + (e % 8) / 2], e % 2);
  };
  float result[8];
  for (int e = 0; e < 8; ++e) {
    const int index = detail::FirstElement() + e, i = index / 16, j = index % 16;
    float sum = c.x[e];
    for (int k = 0; k < 16; ++k) sum = std::fma(element(16 * i + k, 0), element(16 * k + j, 4), sum);
    result[e] = sum;
  }
  for (int e = 0; e < 8; ++e) d.x[e] = result[e];
}

}  // namespace nvcuda::wmma

#endif  // TANDEM_BACKENDS_CUDA_CUDA_ON_CPU_H_
