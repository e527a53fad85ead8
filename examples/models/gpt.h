// A small GPT-style decoder, written in Tandem's tensor API: token and
// position embeddings, pre-norm decoder blocks (causal multi-head attention
// and a GELU MLP, each with a residual), a final layer norm, a tied or untied
// LM head and the mean cross-entropy over all positions.
//
// The blocks are spread over `num_stages` pipeline stages (evenly, or as
// `block_stages` says: examples/models/layer_stages.h), with a
// pipeline_yield between stages; the embeddings go with the first stage and
// the head and loss with the last.
#ifndef TANDEM_EXAMPLES_MODELS_GPT_H_
#define TANDEM_EXAMPLES_MODELS_GPT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "ir/layers.h"
#include "ir/trace.h"

namespace tandem::examples {

struct GptConfig {
  int64_t vocab_size = 65;
  int64_t sequence_length = 32;
  int64_t model_dim = 64;
  int64_t num_heads = 4;
  int64_t num_layers = 4;
  int64_t mlp_ratio = 4;    // MLP hidden width = mlp_ratio * model_dim
  int64_t batch_size = 8;   // sequences per microbatch
  int32_t num_stages = 1;
  bool tied_head = false;   // reuse the token embedding as the LM head
  std::vector<int32_t> block_stages;  // the stage of each block; empty: an even split
  double init_std = 0.02;
  // What the activations compute in: f32, or bf16 for mixed precision (the
  // parameters stay f32 and are converted where used, so their gradients
  // and the optimizer are f32; the logits and the loss are f32).
  ir::DType compute_dtype = ir::DType::kF32;
  // The fused attention op, or the composed graph (layers::CausalAttention).
  layers::AttentionImpl attention = layers::AttentionImpl::kFused;
};

// Well-known shapes, by name: "gpt2-small" (GPT-2's 124M: 12 layers,
// d=768, 12 heads, seq 1024, vocab 50257, tied head) and "gpt-1.3b"
// (GPT-3 XL's: 24 layers, d=2048, 16 heads, seq 2048, vocab 50257, tied
// head). Sets those fields of `config`; InvalidArgument naming the presets
// for any other name.
absl::Status ApplyGptPreset(const std::string& name, GptConfig& config);
// The names ApplyGptPreset knows, in order.
std::vector<std::string> GptPresetNames();

// InvalidArgument when the sizes do not fit (heads must divide model_dim,
// every stage needs at least one block, a block_stages that is not an
// assignment of the blocks to the stages, ...).
absl::Status ValidateGptConfig(const GptConfig& config);

// Inputs: "tokens" and "labels", i32 [batch_size, sequence_length].
// Returns the scalar loss. Check the config with ValidateGptConfig first.
Tensor GptLoss(Tracer& tracer, const GptConfig& config);
ModelFunction GptModel(const GptConfig& config);
// The forward pass to the logits [batch_size, sequence_length, vocab_size],
// without labels or loss: what generation runs. Same parameters as GptLoss.
// With a KV cache mode (layers::KvCache), the prefill or decode forward of
// generation: decoding reads tokens [batch_size, 1] and the cache's inputs,
// and gives logits [batch_size, 1, vocab_size].
Tensor GptLogits(Tracer& tracer, const GptConfig& config,
                 layers::KvCache::Mode mode = layers::KvCache::Mode::kNone);

// The stage that holds block `layer`.
int32_t GptBlockStage(const GptConfig& config, int64_t layer);

}  // namespace tandem::examples

#endif  // TANDEM_EXAMPLES_MODELS_GPT_H_
