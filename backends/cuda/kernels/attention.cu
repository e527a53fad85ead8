// Causal attention and its gradient (cuda_kernels.cuh): which family of
// kernels takes a launch. bf16 at head widths 32, 64 and 128 runs on tensor
// cores (attention_mma.cu: bf16 products, f32 accumulation, the weights
// rounded to bf16 as FlashAttention-2 rounds them). Otherwise fp32 SIMT:
// small matrix products at head widths 32 and 64 (attention_tiles.cu), a
// group of lanes a row at 128 (attention_lanes.cu), all on 16-byte-aligned
// operands, else a thread a row (attention_rows.cu), on f32 or on bf16
// widened as it is loaded (attention.cuh). All in FlashAttention-2's
// manner, with no atomics: the bits repeat.

#include <type_traits>

#include "backends/cuda/kernels/attention.cuh"

namespace tandem::cuda::kernels {
namespace {

// Operands of storage T, results of Out: T's own, or (bf16 operands on
// tensor cores only) f32.
template <typename T, typename Out>
cudaError_t AttendIn(const void* q, const void* k, const void* v, const int32_t* positions, void* out,
                     const AttentionGeometry& g, int64_t batch, cudaStream_t stream) {
  const auto* qs = static_cast<const T*>(q);
  const auto* ks = static_cast<const T*>(k);
  const auto* vs = static_cast<const T*>(v);
  auto* outs = static_cast<Out*>(out);
  const bool aligned = Aligned16(q) && Aligned16(k) && Aligned16(v) && Aligned16(out);
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    if (aligned && AttentionOnTensorCores(g.width)) {
      return LaunchAttentionMma(qs, ks, vs, positions, outs, g, batch * g.heads, stream);
    }
  }
  if constexpr (!std::is_same_v<Out, T>) {
    return cudaErrorInvalidValue;
  } else {
    if constexpr (std::is_same_v<T, float>) {
      if (aligned && (g.width == 32 || g.width == 64)) {
        return LaunchAttentionTiles(qs, ks, vs, positions, outs, g, batch * g.heads, stream);
      }
      if (aligned && g.width == 128) {
        return LaunchAttentionLanes(qs, ks, vs, positions, outs, g, batch * g.heads, stream);
      }
    }
    return LaunchAttentionRows(qs, ks, vs, positions, outs, g, batch, stream);
  }
}

template <typename T, typename Out>
cudaError_t AttendGradIn(const void* q, const void* k, const void* v, const void* dy, void* dq, void* dk, void* dv,
                         float* stats, const AttentionGeometry& g, int64_t batch, cudaStream_t stream) {
  const auto* qs = static_cast<const T*>(q);
  const auto* ks = static_cast<const T*>(k);
  const auto* vs = static_cast<const T*>(v);
  const auto* dys = static_cast<const T*>(dy);
  auto* dqs = static_cast<Out*>(dq);
  auto* dks = static_cast<Out*>(dk);
  auto* dvs = static_cast<Out*>(dv);
  const bool aligned = Aligned16(q) && Aligned16(k) && Aligned16(v) && Aligned16(dy) && Aligned16(dq) &&
                       Aligned16(dk) && Aligned16(dv);
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    if (aligned && AttentionOnTensorCores(g.width)) {
      return LaunchAttentionMmaGrad(qs, ks, vs, dys, dqs, dks, dvs, stats, g, batch, stream);
    }
  }
  if constexpr (!std::is_same_v<Out, T>) {
    return cudaErrorInvalidValue;
  } else {
    if constexpr (std::is_same_v<T, float>) {
      if (aligned && (g.width == 32 || g.width == 64)) {
        return LaunchAttentionTilesGrad(qs, ks, vs, dys, dqs, dks, dvs, stats, g, batch, stream);
      }
      if (aligned && g.width == 128) {
        return LaunchAttentionLanesGrad(qs, ks, vs, dys, dqs, dks, dvs, stats, g, batch, stream);
      }
    }
    return LaunchAttentionRowsGrad(qs, ks, vs, dys, dqs, dks, dvs, stats, g, batch, stream);
  }
}

}  // namespace

bool AttentionOnTensorCores(int64_t width) { return width == 32 || width == 64 || width == 128; }

cudaError_t LaunchAttention(ElementsIn q, ElementsIn k, ElementsIn v, const int32_t* positions, ElementsOut out,
                            int64_t batch, int64_t heads, int64_t kv_heads, int64_t seq, int64_t keys, int64_t width,
                            float scale, cudaStream_t stream) {
  // f32 operands give f32; bf16 operands give bf16, or f32 on tensor cores.
  if (k.bf16 != q.bf16 || v.bf16 != q.bf16 || (out.bf16 && !q.bf16)) return cudaErrorInvalidValue;
  const AttentionGeometry geometry{heads, kv_heads, heads / kv_heads, seq, width, scale, keys};
  if (batch * heads * seq <= 0) return cudaSuccess;
  using Bf16 = __nv_bfloat16;
  if (!q.bf16) return AttendIn<float, float>(q.data, k.data, v.data, positions, out.data, geometry, batch, stream);
  return out.bf16 ? AttendIn<Bf16, Bf16>(q.data, k.data, v.data, positions, out.data, geometry, batch, stream)
                  : AttendIn<Bf16, float>(q.data, k.data, v.data, positions, out.data, geometry, batch, stream);
}

size_t AttentionGradScratchBytes(int64_t query_rows) {
  return static_cast<size_t>(query_rows) * 3 * sizeof(float);
}

cudaError_t LaunchAttentionGrad(ElementsIn q, ElementsIn k, ElementsIn v, ElementsIn dy, ElementsOut dq,
                                ElementsOut dk, ElementsOut dv, int64_t batch, int64_t heads, int64_t kv_heads,
                                int64_t seq, int64_t width, float scale, void* scratch, cudaStream_t stream) {
  // Dtypes as the forward's, dq, dk and dv of one.
  for (const bool bf16 : {k.bf16, v.bf16, dy.bf16}) {
    if (bf16 != q.bf16) return cudaErrorInvalidValue;
  }
  if (dk.bf16 != dq.bf16 || dv.bf16 != dq.bf16 || (dq.bf16 && !q.bf16)) return cudaErrorInvalidValue;
  // The gradient has no positions: as many keys as queries.
  const AttentionGeometry geometry{heads, kv_heads, heads / kv_heads, seq, width, scale, seq};
  float* stats = static_cast<float*>(scratch);
  if (batch * heads * seq <= 0) return cudaSuccess;
  using Bf16 = __nv_bfloat16;
  if (!q.bf16) {
    return AttendGradIn<float, float>(q.data, k.data, v.data, dy.data, dq.data, dk.data, dv.data, stats, geometry,
                                      batch, stream);
  }
  return dq.bf16 ? AttendGradIn<Bf16, Bf16>(q.data, k.data, v.data, dy.data, dq.data, dk.data, dv.data, stats,
                                            geometry, batch, stream)
                 : AttendGradIn<Bf16, float>(q.data, k.data, v.data, dy.data, dq.data, dk.data, dv.data, stats,
                                             geometry, batch, stream);
}

}  // namespace tandem::cuda::kernels
