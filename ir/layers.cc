#include "ir/layers.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "ir/dtype.h"

namespace tandem::layers {
namespace {

// [batch, seq, heads * width] -> [batch, heads, seq, width].
Tensor SplitHeads(const Tensor& x, int64_t batch, int64_t seq, int64_t heads, int64_t width,
                  const SourceLoc& loc) {
  return transpose(reshape(x, {batch, seq, heads, width}, loc), {0, 2, 1, 3}, loc);
}

}  // namespace

const char* AttentionImplName(AttentionImpl impl) {
  return impl == AttentionImpl::kFused ? "fused" : "composed";
}

std::optional<AttentionImpl> ParseAttentionImpl(absl::string_view name) {
  if (name == "fused") return AttentionImpl::kFused;
  if (name == "composed") return AttentionImpl::kComposed;
  return std::nullopt;
}

Tensor CausalAttention(const Tensor& q, const Tensor& k, const Tensor& v, double scale, AttentionImpl impl,
                       SourceLoc loc) {
  if (impl == AttentionImpl::kFused) return attention(q, k, v, scale, loc);
  Tensor keys = k, values = v;
  const int64_t heads = q.dim(1), kv_heads = k.dim(1);
  if (kv_heads > 0 && heads != kv_heads && heads % kv_heads == 0) {
    // [b, kv, seq, width] -> [b, kv, group, seq, width] -> [b, kv * group, seq, width].
    const int64_t b = k.dim(0), seq = k.dim(2), width = k.dim(3), group = heads / kv_heads;
    auto repeat = [&](const Tensor& x) {
      return reshape(broadcast_to(reshape(x, {b, kv_heads, 1, seq, width}, loc), {b, kv_heads, group, seq, width},
                                  loc),
                     {b, heads, seq, width}, loc);
    };
    keys = repeat(k);
    values = repeat(v);
  }
  Tensor scores = causal_mask(Located(matmul(q, keys, {.transpose_b = true}, loc), loc) * scale,
                              -std::numeric_limits<double>::infinity(), loc);
  return matmul(softmax(scores, loc), values, {}, loc);
}

KvCache DeclareKvCache(Tracer& t, KvCache::Mode mode, int64_t batch, int64_t window, SourceLoc loc) {
  KvCache cache{.mode = mode, .window = window};
  if (mode != KvCache::Mode::kDecode) return cache;
  cache.positions = t.Input(kPositionsInput, {ir::DType::kI32, {batch, 1}}, loc);
  cache.slot = t.Input(kCacheSlotInput, {ir::DType::kF32, {batch, 1, window, 1}}, loc);
  return cache;
}

Tensor CachedAttention(Tracer& t, const std::string& name, const Tensor& q, const Tensor& k, const Tensor& v,
                       double scale, AttentionImpl impl, const KvCache& cache, SourceLoc loc) {
  if (cache.mode == KvCache::Mode::kNone) return CausalAttention(q, k, v, scale, impl, loc);
  auto scope = t.Scope(name, loc);
  if (cache.mode == KvCache::Mode::kPrefill) {
    if (k.valid() && k.dim(2) != cache.window) {
      t.Fail(absl::StrCat("cached attention '", t.scope(), "': a prefill covers the window of ", cache.window,
                          " positions, got ", k.dim(2)),
             loc);
      return Tensor(&t.builder(), ir::kInvalidValue);
    }
    t.WriteCache("k", k, loc);
    t.WriteCache("v", v, loc);
    return CausalAttention(q, k, v, scale, impl, loc);
  }
  // Decoding: each sequence's new key and value go to its slot of the cache.
  auto extend = [&](const char* which, const Tensor& fresh) {
    ir::TensorType type = fresh.type();
    type.shape[2] = cache.window;
    Tensor old = t.ReadCache(which, type, loc);
    Tensor updated = where(cache.slot, fresh, old, loc);
    t.WriteCache(which, updated, loc);
    return updated;
  };
  Tensor keys = extend("k", k);
  Tensor values = extend("v", v);
  return attention_at(q, keys, values, cache.positions, scale, loc);
}

Tensor Linear(Tracer& t, const std::string& name, const Tensor& x, int64_t in, int64_t out,
              ir::Initializer init, SourceLoc loc) {
  auto scope = t.Scope(name, loc);
  Tensor w = convert(t.Parameter("w", {in, out}, init, loc), x.dtype(), loc);
  Tensor b = convert(t.Parameter("b", {out}, init::Zeros(), loc), x.dtype(), loc);
  return Located(matmul(x, w, {}, loc), loc) + b;
}

Tensor LayerNorm(Tracer& t, const std::string& name, const Tensor& x, int64_t dim, double eps,
                 SourceLoc loc) {
  auto scope = t.Scope(name, loc);
  Tensor gain = convert(t.Parameter("g", {dim}, init::Ones(), loc), x.dtype(), loc);
  Tensor bias = convert(t.Parameter("b", {dim}, init::Zeros(), loc), x.dtype(), loc);
  return layer_norm(x, gain, bias, eps, loc);
}

Tensor CausalSelfAttention(Tracer& t, const std::string& name, const Tensor& x, int64_t num_heads,
                           ir::Initializer init, AttentionImpl impl, const KvCache& cache, SourceLoc loc) {
  auto scope = t.Scope(name, loc);
  if (x.valid() && x.rank() != 3) {
    t.Fail(absl::StrCat("attention '", t.scope(), "': input must be [batch, seq, dim], got ",
                        ir::TypeToString(x.type())),
           loc);
    return Tensor(&t.builder(), ir::kInvalidValue);
  }
  const int64_t batch = x.dim(0), seq = x.dim(1), dim = x.dim(2);
  if (num_heads < 1 || dim % num_heads != 0) {
    t.Fail(absl::StrCat("attention '", t.scope(), "': ", num_heads, " heads do not divide dim ", dim),
           loc);
    return Tensor(&t.builder(), ir::kInvalidValue);
  }
  const int64_t width = dim / num_heads;
  Tensor qkv = Linear(t, "qkv", x, dim, 3 * dim, init, loc);
  Tensor q = SplitHeads(slice(qkv, -1, 0, dim, loc), batch, seq, num_heads, width, loc);
  Tensor k = SplitHeads(slice(qkv, -1, dim, 2 * dim, loc), batch, seq, num_heads, width, loc);
  Tensor v = SplitHeads(slice(qkv, -1, 2 * dim, 3 * dim, loc), batch, seq, num_heads, width, loc);
  const double scale = 1.0 / std::sqrt(static_cast<double>(width));
  Tensor heads = CachedAttention(t, "kv", q, k, v, scale, impl, cache, loc);
  Tensor merged = reshape(transpose(heads, {0, 2, 1, 3}, loc), {batch, seq, dim}, loc);
  return Linear(t, "proj", merged, dim, dim, init, loc);
}

Tensor GeluMlp(Tracer& t, const std::string& name, const Tensor& x, int64_t hidden,
               ir::Initializer init, SourceLoc loc) {
  auto scope = t.Scope(name, loc);
  const int64_t dim = x.dim(-1);
  Tensor h = gelu(Linear(t, "fc", x, dim, hidden, init, loc), loc);
  return Linear(t, "proj", h, hidden, dim, init, loc);
}

}  // namespace tandem::layers
