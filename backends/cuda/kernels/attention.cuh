// What the attention kernel files share (kernels/attention.cu, which
// dispatches between the families: attention_mma.cu, attention_tiles.cu,
// attention_lanes.cu and attention_rows.cu):
// the geometry of a launch, each family's launchers, the launch over units
// of work, a block's query rows, and the operands' storage (f32 or bf16,
// loaded and stored 4 elements at a time). Internal to the kernel files, as
// common.cuh is.
#ifndef TANDEM_BACKENDS_CUDA_KERNELS_ATTENTION_CUH_
#define TANDEM_BACKENDS_CUDA_KERNELS_ATTENTION_CUH_

#include "backends/cuda/kernels/common.cuh"

namespace tandem::cuda::kernels {

// The attention geometry: q [batch, heads, seq, width], k and v [batch,
// kv_heads, keys, width] (keys == seq unless the queries have positions);
// query head h reads key/value head h / group.
struct AttentionGeometry {
  int64_t heads, kv_heads, group, seq, width;
  float scale;
  int64_t keys;
  // The first element of the key/value head that query row `row` reads.
  __device__ int64_t KeyBase(int64_t row) const {
    const int64_t pair = row / seq;
    return ((pair / heads) * kv_heads + (pair % heads) / group) * keys * width;
  }
};

// Each family's launchers, templates on the operands' storage (T: float or
// __nv_bfloat16; q, k, v, dy and the results all of T), instantiated at the
// end of its file: the SIMT families of the common widths (tiles, lanes)
// for f32, whose bf16 runs on tensor cores (attention_mma.cu); the thread
// a row for both.
// attention_tiles.cu: small matrix products at head widths 32 and 64 (every
// pointer Aligned16); `pairs` = batch * heads.
template <typename T>
cudaError_t LaunchAttentionTiles(const T* q, const T* k, const T* v, const int32_t* positions, T* out,
                                 const AttentionGeometry& g, int64_t pairs, cudaStream_t stream);
template <typename T>
cudaError_t LaunchAttentionTilesGrad(const T* q, const T* k, const T* v, const T* dy, T* dq, T* dk, T* dv,
                                     float* stats, const AttentionGeometry& g, int64_t batch, cudaStream_t stream);
// attention_lanes.cu: a group of lanes a row at head width 128 (every
// pointer Aligned16); `pairs` = batch * heads.
template <typename T>
cudaError_t LaunchAttentionLanes(const T* q, const T* k, const T* v, const int32_t* positions, T* out,
                                 const AttentionGeometry& g, int64_t pairs, cudaStream_t stream);
template <typename T>
cudaError_t LaunchAttentionLanesGrad(const T* q, const T* k, const T* v, const T* dy, T* dq, T* dk, T* dv,
                                     float* stats, const AttentionGeometry& g, int64_t batch, cudaStream_t stream);
// attention_mma.cu: bf16 operands on tensor cores at head widths 32, 64
// and 128 (every pointer Aligned16), the results f32 or bf16 (Out);
// `pairs` = batch * heads.
template <typename Out>
cudaError_t LaunchAttentionMma(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                               const int32_t* positions, Out* out, const AttentionGeometry& g, int64_t pairs,
                               cudaStream_t stream);
template <typename Out>
cudaError_t LaunchAttentionMmaGrad(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                                   const __nv_bfloat16* dy, Out* dq, Out* dk, Out* dv, float* stats,
                                   const AttentionGeometry& g, int64_t batch, cudaStream_t stream);
#define TANDEM_ATTENTION_MMA_OF(Out)                                                                                \
  template cudaError_t LaunchAttentionMma<Out>(const __nv_bfloat16*, const __nv_bfloat16*, const __nv_bfloat16*,   \
                                               const int32_t*, Out*, const AttentionGeometry&, int64_t,             \
                                               cudaStream_t);                                                      \
  template cudaError_t LaunchAttentionMmaGrad<Out>(const __nv_bfloat16*, const __nv_bfloat16*,                     \
                                                   const __nv_bfloat16*, const __nv_bfloat16*, Out*, Out*, Out*,    \
                                                   float*, const AttentionGeometry&, int64_t, cudaStream_t);
// attention_rows.cu: a thread a row, at any width.
template <typename T>
cudaError_t LaunchAttentionRows(const T* q, const T* k, const T* v, const int32_t* positions, T* out,
                                const AttentionGeometry& g, int64_t batch, cudaStream_t stream);
template <typename T>
cudaError_t LaunchAttentionRowsGrad(const T* q, const T* k, const T* v, const T* dy, T* dq, T* dk, T* dv,
                                    float* stats, const AttentionGeometry& g, int64_t batch, cudaStream_t stream);

// A family's two launchers instantiated for storage T, at the end of its
// file: TANDEM_ATTENTION_FAMILY_OF(Tiles, float) and so on.
#define TANDEM_ATTENTION_FAMILY_OF(Family, T)                                                                        \
  template cudaError_t LaunchAttention##Family<T>(const T*, const T*, const T*, const int32_t*, T*,                 \
                                                  const AttentionGeometry&, int64_t, cudaStream_t);                 \
  template cudaError_t LaunchAttention##Family##Grad<T>(const T*, const T*, const T*, const T*, T*, T*, T*, float*, \
                                                        const AttentionGeometry&, int64_t, cudaStream_t);

namespace {

// Launches `kernel` on `threads`-thread blocks over `units` units of work
// (its blocks loop over them past the grid's bound).
template <typename Kernel, typename... Args>
cudaError_t LaunchUnits(int64_t units, int threads, cudaStream_t stream, Kernel kernel, Args... args) {
  if (units <= 0) return cudaSuccess;
  TANDEM_LAUNCH(kernel, static_cast<unsigned>(units < kMaxBlocks ? units : kMaxBlocks), threads, 0, stream)(args...);
  return cudaGetLastError();
}

// A block's unit of work: a pair ((batch, head), or (batch, key/value
// head)) and the first of its tile of rows. A pair's tiles differ in work
// (causality): a query tile's rows read keys up to their own, so the last
// rows read the most; a key tile is read by the rows from its own on, so
// the first keys are read the most. Units go out heaviest first across all
// pairs, rank by rank (every pair's heaviest tile, then every pair's next,
// ...): the grid's last blocks are all light, and its tail is short.
struct UnitRows {
  int64_t pair, first;
};
__device__ UnitRows QueryRowsOf(int64_t unit, int64_t units, int64_t tiles, int64_t rows_per_tile) {
  const int64_t pairs = units / tiles;
  return {unit % pairs, (tiles - 1 - unit / pairs) * rows_per_tile};
}
__device__ UnitRows KeyRowsOf(int64_t unit, int64_t units, int64_t tiles, int64_t rows_per_tile) {
  const int64_t pairs = units / tiles;
  return {unit % pairs, unit / pairs * rows_per_tile};
}

// ---- The operands' storage. Every kernel reads q, k, v and dy through
// these and writes its results through them: f32 as it is, or bf16 widened
// exactly as it is loaded and rounded once, to nearest even, as it is
// stored. Scores, weights, statistics and sums stay f32 in registers and
// shared memory, so a bf16 launch gives the bits of widening its operands,
// the f32 launch and narrowing its results, as the other kernels do
// (cuda_kernels.cuh, ElementsIn).

__device__ __forceinline__ float Widen(float x) { return x; }
__device__ __forceinline__ float Widen(__nv_bfloat16 x) { return __bfloat162float(x); }

__device__ __forceinline__ void StoreElement(float* to, float x) { *to = x; }
__device__ __forceinline__ void StoreElement(__nv_bfloat16* to, float x) { *to = __float2bfloat16_rn(x); }

// to[d] = from[d] widened, d < kPart (a multiple of 4), in Load4's units.
template <int kPart, typename T>
__device__ __forceinline__ void LoadPart(const T* from, float (&to)[kPart]) {
  TANDEM_UNROLL
  for (int d = 0; d < kPart / 4; ++d) {
    const float4 x = Load4(from + 4 * d);
    to[4 * d] = x.x;
    to[4 * d + 1] = x.y;
    to[4 * d + 2] = x.z;
    to[4 * d + 3] = x.w;
  }
}

// to[d] = from[d] * factor, or from[d] / factor where `divide`, stored
// through Store4.
template <int kPart, typename T>
__device__ __forceinline__ void StorePart(T* to, const float (&from)[kPart], float factor, bool divide) {
  TANDEM_UNROLL
  for (int d = 0; d < kPart / 4; ++d) {
    float4 x;
    x.x = divide ? from[4 * d] / factor : from[4 * d] * factor;
    x.y = divide ? from[4 * d + 1] / factor : from[4 * d + 1] * factor;
    x.z = divide ? from[4 * d + 2] / factor : from[4 * d + 2] * factor;
    x.w = divide ? from[4 * d + 3] / factor : from[4 * d + 3] * factor;
    Store4(to + 4 * d, x);
  }
}

}  // namespace
}  // namespace tandem::cuda::kernels

#endif  // TANDEM_BACKENDS_CUDA_KERNELS_ATTENTION_CUH_
