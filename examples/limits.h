// The largest example job `tandem train`, `tandem ir` and the benchmarks
// build. Every size is checked before the model is traced, so a mistyped
// flag is a clear error instead of minutes of tracing.
//
// The bounds leave room for models far larger than these examples train
// on a CPU (GPT-3 175B's shapes compile). Whether a model fits the memory
// of what would hold it is asked there, before anything is allocated: the
// launchers for their actors, and every process that holds the whole model
// for itself (controller/memory_fit.h), not a bound here.
// Constants; thread-safe.
#ifndef TANDEM_EXAMPLES_LIMITS_H_
#define TANDEM_EXAMPLES_LIMITS_H_

#include <cstdint>

namespace tandem::examples {

// Decoder blocks (gpt) or hidden layers (mlp). Tracing and printing a
// 1,024-layer GPT (`tandem ir dump`) takes 1.7 s and 660 MB here.
inline constexpr int64_t kMaxLayers = 1024;
// gpt d_model, mlp hidden width.
inline constexpr int64_t kMaxDim = 65536;
// gpt attention heads.
inline constexpr int64_t kMaxHeads = 1024;
// gpt sequence length.
inline constexpr int64_t kMaxSequence = 65536;
// gpt vocabulary (the LM head's width): a GPT-2-sized head is 50,257.
inline constexpr int64_t kMaxVocab = int64_t{1} << 20;
// Sequences or examples per microbatch.
inline constexpr int64_t kMaxBatch = 65536;
// Microbatches per step (the schedules' own bound).
inline constexpr int64_t kMaxMicrobatches = 65536;
// Text a character corpus reads (--data): 256 MiB, held as 1 GiB of ids.
inline constexpr int64_t kMaxCorpusBytes = int64_t{256} << 20;
// Tokens one `tandem generate` may add: each costs a forward pass.
inline constexpr int64_t kMaxGeneratedTokens = 1 << 16;

}  // namespace tandem::examples

#endif  // TANDEM_EXAMPLES_LIMITS_H_
