#include "examples/models/gpt.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace tandem::examples {
namespace {

using ir::DType;

Tensor Linear(Tracer& t, const std::string& name, const Tensor& x, int64_t in, int64_t out, double std) {
  Tensor w = t.Parameter(name + ".w", {in, out}, init::Normal(std));
  Tensor b = t.Parameter(name + ".b", {out}, init::Zeros());
  return matmul(x, w) + b;
}

Tensor LayerNorm(Tracer& t, const std::string& name, const Tensor& x, int64_t dim) {
  Tensor gamma = t.Parameter(name + ".g", {dim}, init::Ones());
  Tensor beta = t.Parameter(name + ".b", {dim}, init::Zeros());
  return layer_norm(x, gamma, beta);
}

// [B, T, D] -> [B, H, T, D/H]
Tensor SplitHeads(const Tensor& x, const GptConfig& c) {
  int64_t head_dim = c.model_dim / c.num_heads;
  return transpose(reshape(x, {c.batch_size, c.sequence_length, c.num_heads, head_dim}), {0, 2, 1, 3});
}

Tensor Attention(Tracer& t, const std::string& name, const Tensor& x, const GptConfig& c) {
  const int64_t d = c.model_dim;
  Tensor qkv = Linear(t, name + ".qkv", x, d, 3 * d, c.init_std);
  Tensor q = SplitHeads(slice(qkv, -1, 0, d), c);
  Tensor k = SplitHeads(slice(qkv, -1, d, 2 * d), c);
  Tensor v = SplitHeads(slice(qkv, -1, 2 * d, 3 * d), c);
  double scale = 1.0 / std::sqrt(static_cast<double>(d / c.num_heads));
  Tensor scores = causal_mask(matmul(q, k, {.transpose_b = true}) * scale);
  Tensor heads = matmul(softmax(scores), v);  // [B, H, T, D/H]
  Tensor merged = reshape(transpose(heads, {0, 2, 1, 3}), {c.batch_size, c.sequence_length, d});
  return Linear(t, name + ".proj", merged, d, d, c.init_std);
}

Tensor Mlp(Tracer& t, const std::string& name, const Tensor& x, const GptConfig& c) {
  int64_t hidden = c.mlp_ratio * c.model_dim;
  Tensor h = gelu(Linear(t, name + ".fc", x, c.model_dim, hidden, c.init_std));
  return Linear(t, name + ".proj", h, hidden, c.model_dim, c.init_std);
}

}  // namespace

absl::Status ValidateGptConfig(const GptConfig& c) {
  if (c.vocab_size < 1 || c.sequence_length < 1 || c.model_dim < 1 || c.num_heads < 1 || c.num_layers < 1 ||
      c.mlp_ratio < 1 || c.batch_size < 1 || c.num_stages < 1) {
    return absl::InvalidArgumentError("gpt: every size must be at least 1");
  }
  if (c.model_dim % c.num_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat("gpt: model_dim ", c.model_dim,
                                                   " is not divisible by num_heads ", c.num_heads));
  }
  if (c.num_stages > c.num_layers) {
    return absl::InvalidArgumentError(absl::StrCat("gpt: ", c.num_stages, " stages need at least as many layers, got ",
                                                   c.num_layers, " (every stage holds at least one block)"));
  }
  return absl::OkStatus();
}

int32_t GptBlockStage(const GptConfig& c, int64_t layer) {
  return static_cast<int32_t>(layer * c.num_stages / c.num_layers);
}

Tensor GptLoss(Tracer& t, const GptConfig& c) {
  const DType i32 = DType::kI32;
  Tensor tokens = t.Input("tokens", {i32, {c.batch_size, c.sequence_length}});
  Tensor wte = t.Parameter("wte", {c.vocab_size, c.model_dim}, init::Normal(c.init_std));
  Tensor wpe = t.Parameter("wpe", {c.sequence_length, c.model_dim}, init::Normal(c.init_std));
  Tensor x = embedding(wte, tokens) + wpe;
  for (int64_t layer = 0; layer < c.num_layers; ++layer) {
    if (GptBlockStage(c, layer) > t.stage()) x = pipeline_yield(x);
    std::string name = absl::StrCat("h", layer);
    x = x + Attention(t, name + ".attn", LayerNorm(t, name + ".ln1", x, c.model_dim), c);
    x = x + Mlp(t, name + ".mlp", LayerNorm(t, name + ".ln2", x, c.model_dim), c);
  }
  x = LayerNorm(t, "lnf", x, c.model_dim);
  Tensor logits = c.tied_head
                      ? matmul(x, t.Parameter("wte"), {.transpose_b = true})
                      : matmul(x, t.Parameter("head.w", {c.model_dim, c.vocab_size}, init::Normal(c.init_std)));
  Tensor labels = t.Label("labels", {i32, {c.batch_size, c.sequence_length}});
  return mean(cross_entropy(logits, labels));
}

ModelFunction GptModel(const GptConfig& config) {
  return [config](Tracer& tracer) { return GptLoss(tracer, config); };
}

}  // namespace tandem::examples
