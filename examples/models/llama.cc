#include "examples/models/llama.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "examples/models/layer_stages.h"

namespace tandem::examples {
namespace {

constexpr ir::DType kI32 = ir::DType::kI32;

// x @ weight^T for a weight [out, in], PyTorch's nn.Linear without bias.
Tensor Linear(Tracer& t, const std::string& name, const Tensor& x, int64_t in, int64_t out,
              const ir::Initializer& init) {
  Tensor weight = t.Parameter(absl::StrCat(name, ".weight"), {out, in}, init);
  return matmul(x, convert(weight, x.dtype()), {.transpose_b = true});
}

// x * rsqrt(mean(x^2) + eps) * weight over the last axis (Zhang & Sennrich,
// 2019), as Hugging Face's LlamaRMSNorm computes it: the normalization in
// f32, whatever x's dtype, then the gain in x's dtype.
Tensor RmsNorm(Tracer& t, const std::string& name, const Tensor& x, const LlamaConfig& c) {
  Tensor weight = t.Parameter(absl::StrCat(name, ".weight"), {c.model_dim}, init::Ones());
  Tensor x32 = convert(x, ir::DType::kF32);
  Tensor inverse_rms = rsqrt(reduce_mean(x32 * x32, {-1}, /*keep_dims=*/true) + c.norm_eps);
  return convert(x32 * inverse_rms, x.dtype()) * convert(weight, x.dtype());
}

// [batch, seq, heads * width] -> [batch, heads, seq, width].
Tensor SplitHeads(const Tensor& x, const LlamaConfig& c, int64_t heads, int64_t width) {
  return transpose(reshape(x, {c.batch_size, x.dim(1), heads, width}), {0, 2, 1, 3});
}

// The rotary embedding of x [batch, heads, seq, width]: at the positions
// along seq, or, decoding, at each sequence's position.
Tensor Rotate(const Tensor& x, const LlamaConfig& c, const layers::KvCache& cache) {
  if (cache.mode != layers::KvCache::Mode::kDecode) return rotary(x, c.rope_theta);
  const int64_t heads = x.dim(1);
  Tensor positions = broadcast_to(reshape(cache.positions, {c.batch_size, 1, 1}), {c.batch_size, heads, 1});
  return rotary_at(x, positions, c.rope_theta);
}

Tensor Attention(Tracer& t, const Tensor& x, const LlamaConfig& c, const ir::Initializer& init,
                 const layers::KvCache& cache) {
  auto scope = t.Scope("self_attn");
  const int64_t width = c.model_dim / c.num_heads;
  const int64_t kv_dim = c.num_kv_heads * width;
  const int64_t seq = x.dim(1);
  Tensor q = Rotate(SplitHeads(Linear(t, "q_proj", x, c.model_dim, c.model_dim, init), c, c.num_heads, width), c,
                    cache);
  Tensor k = Rotate(SplitHeads(Linear(t, "k_proj", x, c.model_dim, kv_dim, init), c, c.num_kv_heads, width), c,
                    cache);
  Tensor v = SplitHeads(Linear(t, "v_proj", x, c.model_dim, kv_dim, init), c, c.num_kv_heads, width);
  const double scale = 1.0 / std::sqrt(static_cast<double>(width));
  // Composed, in x's dtype, as Hugging Face's eager attention scales and
  // masks (its softmax takes f32 and rounds to x's dtype, which is what
  // softmax on bf16 computes); fused, through f32 with one rounding.
  Tensor heads = layers::CachedAttention(t, "kv", q, k, v, scale, c.attention, cache);
  Tensor merged = reshape(transpose(heads, {0, 2, 1, 3}), {c.batch_size, seq, c.model_dim});
  return Linear(t, "o_proj", merged, c.model_dim, c.model_dim, init);
}

// down(silu(gate(x)) * up(x)) (Shazeer, 2020).
Tensor SwiGlu(Tracer& t, const Tensor& x, const LlamaConfig& c, const ir::Initializer& init) {
  auto scope = t.Scope("mlp");
  const int64_t hidden = LlamaMlpWidth(c);
  Tensor gate = silu(Linear(t, "gate_proj", x, c.model_dim, hidden, init));
  Tensor up = Linear(t, "up_proj", x, c.model_dim, hidden, init);
  return Linear(t, "down_proj", gate * up, hidden, c.model_dim, init);
}

}  // namespace

absl::Status ValidateLlamaConfig(const LlamaConfig& c) {
  if (c.vocab_size < 1 || c.sequence_length < 1 || c.model_dim < 1 || c.num_heads < 1 || c.num_kv_heads < 1 ||
      c.num_layers < 1 || c.mlp_hidden < 0 || c.batch_size < 1 || c.num_stages < 1) {
    return absl::InvalidArgumentError("llama: every size must be at least 1");
  }
  if (c.model_dim % c.num_heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("llama: model_dim ", c.model_dim, " is not divisible by num_heads ", c.num_heads));
  }
  if (c.num_heads % c.num_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat("llama: ", c.num_kv_heads, " kv heads do not divide ",
                                                   c.num_heads, " heads (each kv head serves a group of heads)"));
  }
  if ((c.model_dim / c.num_heads) % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("llama: a head's width ", c.model_dim / c.num_heads,
                                                   " (model_dim / num_heads) must be even for rotary pairs"));
  }
  if (!(c.rope_theta > 1.0) || !std::isfinite(c.rope_theta)) {
    return absl::InvalidArgumentError(absl::StrCat("llama: rope theta ", c.rope_theta, " must be a finite number above 1"));
  }
  if (!(c.norm_eps > 0.0) || !std::isfinite(c.norm_eps)) {
    return absl::InvalidArgumentError(absl::StrCat("llama: norm eps ", c.norm_eps, " must be a finite number above 0"));
  }
  if (!ir::IsComputedFloat(c.compute_dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("llama: computes in f32 or bf16, not ", ir::DTypeName(c.compute_dtype)));
  }
  if (c.num_stages > c.num_layers) {
    return absl::InvalidArgumentError(absl::StrCat("llama: ", c.num_layers, " layers cannot fill ", c.num_stages,
                                                   " stages (every stage holds at least one block); use at least ",
                                                   c.num_stages, " layers"));
  }
  return CheckLayerStages("llama", c.block_stages, c.num_layers, c.num_stages);
}

int64_t LlamaMlpWidth(const LlamaConfig& c) {
  if (c.mlp_hidden > 0) return c.mlp_hidden;
  constexpr int64_t kMultipleOf = 32;
  const int64_t two_thirds = 2 * (4 * c.model_dim) / 3;
  return (two_thirds + kMultipleOf - 1) / kMultipleOf * kMultipleOf;
}

int32_t LlamaBlockStage(const LlamaConfig& c, int64_t layer) {
  return LayerStage(c.block_stages, layer, c.num_layers, c.num_stages);
}

Tensor LlamaLogits(Tracer& t, const LlamaConfig& c, layers::KvCache::Mode mode) {
  const ir::Initializer weights = init::Normal(c.init_std);
  const bool decoding = mode == layers::KvCache::Mode::kDecode;
  Tensor tokens = t.Input("tokens", {kI32, {c.batch_size, decoding ? 1 : c.sequence_length}});
  const layers::KvCache cache = layers::DeclareKvCache(t, mode, c.batch_size, c.sequence_length);
  Tensor x;
  {
    auto model = t.Scope("model");
    x = convert(embedding(t.Parameter("embed_tokens.weight", {c.vocab_size, c.model_dim}, weights), tokens),
                c.compute_dtype);
    for (int64_t layer = 0; layer < c.num_layers; ++layer) {
      if (LlamaBlockStage(c, layer) > t.stage()) x = pipeline_yield(x);
      auto block = t.Scope(absl::StrCat("layers.", layer));
      x = x + Attention(t, RmsNorm(t, "input_layernorm", x, c), c, weights, cache);
      x = x + SwiGlu(t, RmsNorm(t, "post_attention_layernorm", x, c), c, weights);
    }
    x = RmsNorm(t, "norm", x, c);
  }
  Tensor head = c.tied_head ? t.Parameter("model.embed_tokens.weight")
                            : t.Parameter("lm_head.weight", {c.vocab_size, c.model_dim}, weights);
  return convert(matmul(x, convert(head, c.compute_dtype), {.transpose_b = true}), ir::DType::kF32);
}

Tensor LlamaLoss(Tracer& t, const LlamaConfig& c) {
  Tensor logits = LlamaLogits(t, c);
  Tensor labels = t.Label("labels", {kI32, {c.batch_size, c.sequence_length}});
  return mean(cross_entropy(logits, labels));
}

ModelFunction LlamaModel(const LlamaConfig& config) {
  return [config](Tracer& tracer) { return LlamaLoss(tracer, config); };
}

}  // namespace tandem::examples
