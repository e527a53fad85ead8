#include "examples/models/gpt.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "examples/models/layer_stages.h"
#include "ir/layers.h"

namespace tandem::examples {

namespace {

struct GptPreset {
  const char* name;
  int64_t layers, dim, heads, sequence, vocab;
};
constexpr GptPreset kGptPresets[] = {
    {"gpt2-small", 12, 768, 12, 1024, 50257},
    {"gpt-1.3b", 24, 2048, 16, 2048, 50257},
};

}  // namespace

std::vector<std::string> GptPresetNames() {
  std::vector<std::string> names;
  for (const GptPreset& preset : kGptPresets) names.push_back(preset.name);
  return names;
}

absl::Status ApplyGptPreset(const std::string& name, GptConfig& config) {
  for (const GptPreset& preset : kGptPresets) {
    if (name != preset.name) continue;
    config.num_layers = preset.layers;
    config.model_dim = preset.dim;
    config.num_heads = preset.heads;
    config.sequence_length = preset.sequence;
    config.vocab_size = preset.vocab;
    config.tied_head = true;
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("no gpt preset '", name, "' (there are ", absl::StrJoin(GptPresetNames(), ", "), ")"));
}

absl::Status ValidateGptConfig(const GptConfig& c) {
  if (c.vocab_size < 1 || c.sequence_length < 1 || c.model_dim < 1 || c.num_heads < 1 || c.num_layers < 1 ||
      c.mlp_ratio < 1 || c.batch_size < 1 || c.num_stages < 1) {
    return absl::InvalidArgumentError("gpt: every size must be at least 1");
  }
  if (c.model_dim % c.num_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat("gpt: model_dim ", c.model_dim,
                                                   " is not divisible by num_heads ", c.num_heads));
  }
  if (!ir::IsComputedFloat(c.compute_dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("gpt: computes in f32 or bf16, not ", ir::DTypeName(c.compute_dtype)));
  }
  if (c.num_stages > c.num_layers) {
    return absl::InvalidArgumentError(absl::StrCat("gpt: ", c.num_layers, " layers cannot fill ", c.num_stages,
                                                   " stages (every stage holds at least one block); use at least ",
                                                   c.num_stages, " layers"));
  }
  return CheckLayerStages("gpt", c.block_stages, c.num_layers, c.num_stages);
}

int32_t GptBlockStage(const GptConfig& c, int64_t layer) {
  return LayerStage(c.block_stages, layer, c.num_layers, c.num_stages);
}

Tensor GptLogits(Tracer& t, const GptConfig& c, layers::KvCache::Mode mode) {
  const ir::DType i32 = ir::DType::kI32;
  const ir::Initializer weights = init::Normal(c.init_std);
  const bool decoding = mode == layers::KvCache::Mode::kDecode;
  Tensor tokens = t.Input("tokens", {i32, {c.batch_size, decoding ? 1 : c.sequence_length}});
  const layers::KvCache cache = layers::DeclareKvCache(t, mode, c.batch_size, c.sequence_length);
  Tensor wte = t.Parameter("wte", {c.vocab_size, c.model_dim}, weights);
  Tensor wpe = t.Parameter("wpe", {c.sequence_length, c.model_dim}, weights);
  // Decoding: each sequence's one token at its own position.
  Tensor x = convert(embedding(wte, tokens) + (decoding ? embedding(wpe, cache.positions) : wpe), c.compute_dtype);
  for (int64_t layer = 0; layer < c.num_layers; ++layer) {
    if (GptBlockStage(c, layer) > t.stage()) x = pipeline_yield(x);
    auto block = t.Scope(absl::StrCat("h", layer));
    x = x + layers::CausalSelfAttention(t, "attn", layers::LayerNorm(t, "ln1", x, c.model_dim), c.num_heads, weights,
                                        c.attention, cache);
    x = x + layers::GeluMlp(t, "mlp", layers::LayerNorm(t, "ln2", x, c.model_dim), c.mlp_ratio * c.model_dim, weights);
  }
  x = layers::LayerNorm(t, "lnf", x, c.model_dim);
  // The head is [vocab, dim], the embedding's layout, whether tied or not
  // (and Hugging Face's lm_head's).
  Tensor head = c.tied_head ? t.Parameter("wte") : t.Parameter("head.w", {c.vocab_size, c.model_dim}, weights);
  return convert(matmul(x, convert(head, c.compute_dtype), {.transpose_b = true}), ir::DType::kF32);
}

Tensor GptLoss(Tracer& t, const GptConfig& c) {
  Tensor logits = GptLogits(t, c);
  Tensor labels = t.Label("labels", {ir::DType::kI32, {c.batch_size, c.sequence_length}});
  return mean(cross_entropy(logits, labels));
}

ModelFunction GptModel(const GptConfig& config) {
  return [config](Tracer& tracer) { return GptLoss(tracer, config); };
}

}  // namespace tandem::examples
