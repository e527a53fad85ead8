// What the attention kernel files share (kernels/attention.cu, which
// dispatches between the families: attention_tiles.cu, attention_lanes.cu
// and attention_rows.cu):
// the geometry of a launch, each family's launchers, the launch over units
// of work, a block's query rows, and 16-byte parts of a row. Internal to
// the kernel files, as common.cuh is.
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

// attention_tiles.cu: small matrix products at head widths 32 and 64 (every
// pointer Aligned16); `pairs` = batch * heads.
cudaError_t LaunchAttentionTiles(const float* q, const float* k, const float* v, const int32_t* positions, float* out,
                                 const AttentionGeometry& g, int64_t pairs, cudaStream_t stream);
cudaError_t LaunchAttentionTilesGrad(const float* q, const float* k, const float* v, const float* dy, float* dq,
                                     float* dk, float* dv, float* stats, const AttentionGeometry& g, int64_t batch,
                                     cudaStream_t stream);
// attention_lanes.cu: a group of lanes a row at head width 128 (every
// pointer Aligned16); `pairs` = batch * heads.
cudaError_t LaunchAttentionLanes(const float* q, const float* k, const float* v, const int32_t* positions, float* out,
                                 const AttentionGeometry& g, int64_t pairs, cudaStream_t stream);
cudaError_t LaunchAttentionLanesGrad(const float* q, const float* k, const float* v, const float* dy, float* dq,
                                     float* dk, float* dv, float* stats, const AttentionGeometry& g, int64_t batch,
                                     cudaStream_t stream);
// attention_rows.cu: a thread a row, at any width.
cudaError_t LaunchAttentionRows(const float* q, const float* k, const float* v, const int32_t* positions, float* out,
                                const AttentionGeometry& g, int64_t batch, cudaStream_t stream);
cudaError_t LaunchAttentionRowsGrad(const float* q, const float* k, const float* v, const float* dy, float* dq,
                                    float* dk, float* dv, float* stats, const AttentionGeometry& g, int64_t batch,
                                    cudaStream_t stream);

namespace {

// Launches `kernel` on `threads`-thread blocks over `units` units of work
// (its blocks loop over them past the grid's bound).
template <typename Kernel, typename... Args>
cudaError_t LaunchUnits(int64_t units, int threads, cudaStream_t stream, Kernel kernel, Args... args) {
  if (units <= 0) return cudaSuccess;
  TANDEM_LAUNCH(kernel, static_cast<unsigned>(units < kMaxBlocks ? units : kMaxBlocks), threads, 0, stream)(args...);
  return cudaGetLastError();
}

// A block's unit of query rows: its (batch, head) pair and first row. The
// last rows of a pair read the most keys: their units go first.
struct QueryRows {
  int64_t pair, first;
};
__device__ QueryRows QueryRowsOf(int64_t unit, int64_t tiles, int64_t rows_per_tile) {
  return {unit / tiles, (tiles - 1 - unit % tiles) * rows_per_tile};
}

template <int kPart>
__device__ __forceinline__ void LoadPart(const float* from, float (&to)[kPart]) {
  const float4* from4 = reinterpret_cast<const float4*>(from);
  TANDEM_UNROLL
  for (int d = 0; d < kPart / 4; ++d) {
    const float4 x = from4[d];
    to[4 * d] = x.x;
    to[4 * d + 1] = x.y;
    to[4 * d + 2] = x.z;
    to[4 * d + 3] = x.w;
  }
}

// to[d] = from[d] * factor, or from[d] / factor where `divide`.
template <int kPart>
__device__ __forceinline__ void StorePart(float* to, const float (&from)[kPart], float factor, bool divide) {
  float4* to4 = reinterpret_cast<float4*>(to);
  TANDEM_UNROLL
  for (int d = 0; d < kPart / 4; ++d) {
    float4 x;
    x.x = divide ? from[4 * d] / factor : from[4 * d] * factor;
    x.y = divide ? from[4 * d + 1] / factor : from[4 * d + 1] * factor;
    x.z = divide ? from[4 * d + 2] / factor : from[4 * d + 2] * factor;
    x.w = divide ? from[4 * d + 3] / factor : from[4 * d + 3] * factor;
    to4[d] = x;
  }
}

}  // namespace
}  // namespace tandem::cuda::kernels

#endif  // TANDEM_BACKENDS_CUDA_KERNELS_ATTENTION_CUH_
