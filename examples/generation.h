// Generation from a trained language model on the reference interpreter
// without a KV cache: a token at a time, each by a whole forward pass of
// the model's window (every token costs one forward of `sequence_length`
// positions), then greedy or seeded top-k sampling from the last position's
// logits. What cached generation (controller/generation.h, which picks
// with TokenPicker) is checked against.
#ifndef TANDEM_EXAMPLES_GENERATION_H_
#define TANDEM_EXAMPLES_GENERATION_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "ir/graph.h"
#include "ir/host_tensor.h"
#include "ir/train_step.h"

namespace tandem::examples {

struct SamplingOptions {
  int64_t tokens = 64;       // to generate
  double temperature = 0.0;  // 0: greedy (the most likely id, the lowest on ties)
  int64_t top_k = 0;         // with a temperature: sample among the k most likely; 0: all
  uint64_t seed = 1;         // of the sampling: the same seed gives the same text
};

// Extends `prompt` (at least one id) by options.tokens ids. `forward` maps
// input "tokens" (i32 [1, window]) and the parameters in `parameters` to
// its one output, the logits f32 [1, window, vocab]. The context is the
// last `window` ids, left-aligned and padded with id 0 behind the last:
// causal attention keeps the padding out of the logits read. Returns the
// new ids only. InvalidArgument for options out of range or a forward of
// another shape; the interpreter's errors.
absl::StatusOr<std::vector<int32_t>> Generate(const ir::Graph& forward, const ir::TensorMap& parameters,
                                              const std::vector<int32_t>& prompt, const SamplingOptions& options);

// InvalidArgument for options out of range (what Generate refuses).
absl::Status CheckSamplingOptions(const SamplingOptions& options);

// How `options` pick sequence `sequence`'s `draw`-th new id from one
// position's logits (controller::TokenPicker): sequence 0 picks as Generate
// does, and each sequence draws from a stream of its own.
std::function<int32_t(const float* logits, int64_t vocab, int64_t sequence, int64_t draw)> TokenPicker(
    const SamplingOptions& options);

}  // namespace tandem::examples

#endif  // TANDEM_EXAMPLES_GENERATION_H_
