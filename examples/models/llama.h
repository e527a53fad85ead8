// A LLaMA-style decoder, written in Tandem's tensor API: a token embedding,
// pre-norm blocks of grouped-query causal self-attention with rotary
// position embeddings and a SwiGLU MLP (each with a residual), RMSNorm
// everywhere, no biases, a final RMSNorm, a tied or untied LM head and the
// mean cross-entropy over all positions.
//
// Parameters carry Hugging Face's LLaMA names and layouts
// ("model.layers.0.self_attn.q_proj.weight", linear weights [out, in],
// rotary in the half-split layout), so that a checkpoint exports to
// safetensors by name alone and PyTorch code for LLaMA reads it as is.
//
// The blocks are spread over `num_stages` pipeline stages (evenly, or as
// `block_stages` says: examples/models/layer_stages.h), with a
// pipeline_yield between stages; the embedding goes with the first stage
// and the final norm, head and loss with the last.
#ifndef TANDEM_EXAMPLES_MODELS_LLAMA_H_
#define TANDEM_EXAMPLES_MODELS_LLAMA_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "ir/layers.h"
#include "ir/trace.h"

namespace tandem::examples {

struct LlamaConfig {
  int64_t vocab_size = 65;
  int64_t sequence_length = 32;
  int64_t model_dim = 64;
  int64_t num_heads = 4;
  int64_t num_kv_heads = 2;  // grouped-query attention: heads share key/value heads in groups
  int64_t num_layers = 4;
  // The SwiGLU hidden width; 0: LLaMA's rule, 2/3 of 4 * model_dim rounded
  // up to a multiple of 32 (LlamaMlpWidth).
  int64_t mlp_hidden = 0;
  int64_t batch_size = 8;  // sequences per microbatch
  int32_t num_stages = 1;
  bool tied_head = false;  // reuse the token embedding as the LM head
  std::vector<int32_t> block_stages;  // the stage of each block; empty: an even split
  double init_std = 0.02;
  double rope_theta = 10000.0;
  double norm_eps = 1e-5;
  // What the activations compute in: f32, or bf16 for mixed precision (the
  // parameters stay f32 and are converted where used, so their gradients
  // and the optimizer are f32; the logits and the loss are f32).
  ir::DType compute_dtype = ir::DType::kF32;
  // The fused attention op, or the composed graph (layers::CausalAttention).
  layers::AttentionImpl attention = layers::AttentionImpl::kFused;
};

// InvalidArgument when the sizes do not fit: heads must divide model_dim,
// kv heads must divide heads, a head's width must be even (rotary pairs),
// every stage needs a block, block_stages must assign the blocks to the
// stages, theta must be above 1 and eps above 0.
absl::Status ValidateLlamaConfig(const LlamaConfig& config);

// The SwiGLU hidden width `config` gives (see mlp_hidden).
int64_t LlamaMlpWidth(const LlamaConfig& config);

// Inputs: "tokens" and "labels", i32 [batch_size, sequence_length].
// Returns the scalar loss. Check the config with ValidateLlamaConfig first.
Tensor LlamaLoss(Tracer& tracer, const LlamaConfig& config);
ModelFunction LlamaModel(const LlamaConfig& config);

// The forward pass to the logits [batch_size, sequence_length, vocab_size],
// without labels or loss: what generation runs. Same parameters as
// LlamaLoss.
// With a KV cache mode (layers::KvCache), the prefill or decode forward of
// generation: decoding reads tokens [batch_size, 1] and the cache's inputs,
// and gives logits [batch_size, 1, vocab_size].
Tensor LlamaLogits(Tracer& tracer, const LlamaConfig& config,
                   layers::KvCache::Mode mode = layers::KvCache::Mode::kNone);

// The stage that holds block `layer`.
int32_t LlamaBlockStage(const LlamaConfig& config, int64_t layer);

}  // namespace tandem::examples

#endif  // TANDEM_EXAMPLES_MODELS_LLAMA_H_
