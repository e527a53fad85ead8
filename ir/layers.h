// Reusable model layers, written in the tensor API (ir/tensor.h).
//
// Each layer opens the name scope `name` on the tracer (Tracer::Scope) and
// declares its parameters inside it, so within t.Scope("h3"),
// Linear(t, "fc", ...) declares "h3.fc.w" and "h3.fc.b". A layer is a few
// recorded ops, the same ops a model would write by hand: it adds nothing
// to the IR that the ops themselves do not.
//
// Source locations: every parameter and op a layer records carries the
// location of the layer's caller (the defaulted `loc`), so a shape error
// inside a layer names the model's line, and `tandem ir dump` attributes a
// layer's ops to the line that calls it. A layer that calls another passes
// its own `loc` on.
//
// Precision: a layer computes in x's dtype. Its parameters are f32 (the
// master weights the optimizer updates) and are converted to x's dtype where
// they are used, so a bf16 x makes a mixed-precision layer whose parameter
// gradients come back f32.
//
// Initializers: `init` is the weight initializer. Its seed, when 0, is
// derived from the parameter's full name (Tracer::Parameter), so each
// weight gets its own values. Biases start at zero, layer-norm gains at one.
//
// Shapes below: x is [..., in] for Linear and LayerNorm and [batch, seq,
// dim] for the attention and MLP blocks; every layer returns x's shape with
// its last extent replaced by the layer's output width.
// Stateless functions; thread safety is the tracer's (none).
#ifndef TANDEM_IR_LAYERS_H_
#define TANDEM_IR_LAYERS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"

#include "ir/tensor.h"
#include "ir/tracer.h"

namespace tandem::layers {

// matmul(x, w) + b over the last axis: [..., in] -> [..., out].
// Parameters: "w" f32[in, out] from `init`; "b" f32[out], zeros.
Tensor Linear(Tracer& t, const std::string& name, const Tensor& x, int64_t in, int64_t out,
              ir::Initializer init, SourceLoc loc = SourceLoc::current());

// layer_norm(x, g, b, eps) over the last axis, whose extent is `dim`.
// Parameters: "g" f32[dim], ones; "b" f32[dim], zeros.
Tensor LayerNorm(Tracer& t, const std::string& name, const Tensor& x, int64_t dim,
                 double eps = 1e-5, SourceLoc loc = SourceLoc::current());

// How causal attention is computed: by the fused op (ir/op.h kAttention,
// the default: a query row at a time, no T x T scores kept for the
// backward), or composed of matmul, causal_mask and softmax (the graph
// before the fused op, kept for comparison: `--attention composed`).
enum class AttentionImpl : uint8_t { kFused, kComposed };
const char* AttentionImplName(AttentionImpl impl);  // "fused", "composed"
std::optional<AttentionImpl> ParseAttentionImpl(absl::string_view name);

// Causal attention of q [batch, heads, seq, width] over k and v [batch,
// kv_heads, seq, width], kv_heads dividing heads (each key/value head
// serves heads / kv_heads query heads in a row), the scores scaled by
// `scale`: [batch, heads, seq, width]. Composed, the key/value heads are
// repeated to every query head and the scores are computed in q's dtype.
Tensor CausalAttention(const Tensor& q, const Tensor& k, const Tensor& v, double scale, AttentionImpl impl,
                       SourceLoc loc = SourceLoc::current());

// Generation with a KV cache (controller/generation.h): how a language
// model's forward runs. Each attention keeps its keys and values for the
// microbatch's sequences in caches of the model's window (Tracer::ReadCache,
// WriteCache), [batch, kv_heads, window, width] each:
//  - kPrefill: the usual causal forward over a window of tokens, which also
//    writes every position's keys and values to the caches;
//  - kDecode: one token per sequence at its own position (input "positions",
//    i32 [batch, 1]), whose keys and values are written into the caches at
//    that position (input "cache_slot", f32 [batch, 1, window, 1]: 1 at the
//    position, else 0), and whose query attends to the cache up to it
//    (attention_at: the fused kernel's row, bit for bit the row the whole
//    causal forward computes at that position).
struct KvCache {
  enum class Mode : uint8_t { kNone, kPrefill, kDecode };
  Mode mode = Mode::kNone;
  int64_t window = 0;  // the positions a cache holds
  Tensor positions;    // kDecode: i32 [batch, 1]
  Tensor slot;         // kDecode: f32 [batch, 1, window, 1]
};
inline constexpr char kPositionsInput[] = "positions";
inline constexpr char kCacheSlotInput[] = "cache_slot";
// A KvCache of `mode` for `batch` sequences and a window of `window`
// positions; kDecode declares its two inputs.
KvCache DeclareKvCache(Tracer& t, KvCache::Mode mode, int64_t batch, int64_t window,
                       SourceLoc loc = SourceLoc::current());

// CausalAttention of q [batch, heads, seq, width] over k and v, keeping k
// and v in the caches "<name>.k" and "<name>.v" as `cache` says (kNone:
// CausalAttention itself). Decoding computes with the fused op whatever
// `impl` is.
Tensor CachedAttention(Tracer& t, const std::string& name, const Tensor& q, const Tensor& k, const Tensor& v,
                       double scale, AttentionImpl impl, const KvCache& cache, SourceLoc loc = SourceLoc::current());

// Causal multi-head self-attention over x: [batch, seq, dim] -> [batch,
// seq, dim], with head width dim / num_heads:
//   q, k, v = the three dim-wide slices of Linear "qkv" (dim -> 3 dim),
//             each reshaped to [batch, num_heads, seq, dim / num_heads];
//   heads   = softmax(causal_mask(q k^T / sqrt(dim / num_heads))) v,
//             computed as `impl` says (CausalAttention);
//   result  = Linear "proj" (dim -> dim) of the heads merged back to
//             [batch, seq, dim].
// Parameters: "qkv.w" f32[dim, 3 dim] from `init`, "qkv.b" f32[3 dim],
// "proj.w" f32[dim, dim] from `init`, "proj.b" f32[dim].
// An x that is not of rank 3, or a num_heads that is below 1 or does not
// divide dim, is a trace error naming the caller's line.
// With `cache` (generation), its keys and values are cached under the
// attention's scope (CachedAttention "kv").
Tensor CausalSelfAttention(Tracer& t, const std::string& name, const Tensor& x, int64_t num_heads,
                           ir::Initializer init, AttentionImpl impl = AttentionImpl::kFused,
                           const KvCache& cache = {}, SourceLoc loc = SourceLoc::current());

// The transformer's feed-forward block over x: [..., dim] -> [..., dim]:
// Linear "proj" (hidden -> dim) of gelu(Linear "fc" (dim -> hidden) of x).
// Parameters: "fc.w" f32[dim, hidden] and "proj.w" f32[hidden, dim] from
// `init`; "fc.b" f32[hidden] and "proj.b" f32[dim], zeros.
Tensor GeluMlp(Tracer& t, const std::string& name, const Tensor& x, int64_t hidden,
               ir::Initializer init, SourceLoc loc = SourceLoc::current());

}  // namespace tandem::layers

#endif  // TANDEM_IR_LAYERS_H_
