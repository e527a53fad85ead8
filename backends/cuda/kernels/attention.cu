// Causal attention and its gradient (cuda_kernels.cuh): which family of
// kernels takes a launch: small matrix products at head widths 32 and 64
// (attention_tiles.cu), a group of lanes a row at 128 (attention_lanes.cu),
// both on 16-byte-aligned operands, else a thread a row (attention_rows.cu).
// All are fp32 SIMT in FlashAttention-2's manner, with no atomics: the bits
// repeat.

#include "backends/cuda/kernels/attention.cuh"

namespace tandem::cuda::kernels {

cudaError_t LaunchAttention(const float* q, const float* k, const float* v, const int32_t* positions, float* out,
                            int64_t batch, int64_t heads, int64_t kv_heads, int64_t seq, int64_t keys, int64_t width,
                            float scale, cudaStream_t stream) {
  const AttentionGeometry geometry{heads, kv_heads, heads / kv_heads, seq, width, scale, keys};
  if (batch * heads * seq <= 0) return cudaSuccess;
  const bool aligned = Aligned16(q) && Aligned16(k) && Aligned16(v) && Aligned16(out);
  if (aligned && (width == 32 || width == 64)) {
    return LaunchAttentionTiles(q, k, v, positions, out, geometry, batch * heads, stream);
  }
  if (aligned && width == 128) return LaunchAttentionLanes(q, k, v, positions, out, geometry, batch * heads, stream);
  return LaunchAttentionRows(q, k, v, positions, out, geometry, batch, stream);
}

size_t AttentionGradScratchBytes(int64_t query_rows) {
  return static_cast<size_t>(query_rows) * 3 * sizeof(float);
}

cudaError_t LaunchAttentionGrad(const float* q, const float* k, const float* v, const float* dy, float* dq, float* dk,
                                float* dv, int64_t batch, int64_t heads, int64_t kv_heads, int64_t seq, int64_t width,
                                float scale, void* scratch, cudaStream_t stream) {
  // The gradient has no positions: as many keys as queries.
  const AttentionGeometry geometry{heads, kv_heads, heads / kv_heads, seq, width, scale, seq};
  float* stats = static_cast<float*>(scratch);
  if (batch * heads * seq <= 0) return cudaSuccess;
  const bool aligned = Aligned16(q) && Aligned16(k) && Aligned16(v) && Aligned16(dy) && Aligned16(dq) &&
                       Aligned16(dk) && Aligned16(dv);
  if (aligned && (width == 32 || width == 64)) {
    return LaunchAttentionTilesGrad(q, k, v, dy, dq, dk, dv, stats, geometry, batch, stream);
  }
  if (aligned && width == 128) return LaunchAttentionLanesGrad(q, k, v, dy, dq, dk, dv, stats, geometry, batch, stream);
  return LaunchAttentionRowsGrad(q, k, v, dy, dq, dk, dv, stats, geometry, batch, stream);
}

}  // namespace tandem::cuda::kernels
