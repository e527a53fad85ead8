// Generation from a language model with KV caches, one token per sequence
// per step, on the reference interpreter or through a pipeline of actors.
//
// The model is traced twice over the same parameters and microbatches
// (ir/layers.h KvCache), each attention keeping its keys and values in
// caches of the model's window, one per microbatch, on the actor of its
// stage (ir/train_step.h StateRole::kCache):
//  - prefill: "tokens" i32 [b, window] -> logits f32 [b, window, vocab];
//    the causal forward of each sequence's context, left-aligned and
//    padded with id 0, which writes every position's keys and values;
//  - decode: "tokens" i32 [b, 1] at "positions" i32 [b, 1] (with
//    "cache_slot" f32 [b, 1, window, 1], 1 at the position) -> logits f32
//    [b, 1, vocab]; writes the token's keys and values at its position and
//    attends to the cache up to it.
// A step runs every microbatch of b sequences, so several of them keep a
// pipeline's stages busy: while the last stage decodes microbatch 0, the
// first already decodes microbatch 1. A step decodes when every sequence's
// cache holds its whole context before its newest token and that token's
// position is inside the window; otherwise it prefills each sequence's last
// `window` tokens (the first step, and once a sequence outgrows the window,
// every step: the uncached generation slides its window by a token a step,
// which moves every position, so nothing cached stays valid).
//
// A decode step's logits are bit for bit those of the prefill of the same
// context at that position (the fused attention's row does not depend on
// how many queries or keys there are, and every other op is row-wise), so
// cached generation gives the uncached generation's tokens, however the
// steps were cut; a pipeline gives the reference's.
#ifndef TANDEM_CONTROLLER_GENERATION_H_
#define TANDEM_CONTROLLER_GENERATION_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "controller/compiler.h"
#include "controller/launcher.h"
#include "controller/pipeline.h"
#include "ir/host_tensor.h"
#include "ir/state_source.h"
#include "ir/train_step.h"
#include "schedules/schedule.h"

namespace tandem::controller {

// A language model's prefill and decode steps (TraceForwardStep of its
// forward in each KvCache mode, with the same microbatches).
struct GenerationSteps {
  ir::TrainStep prefill;
  ir::TrainStep decode;
};

// The sizes both steps agree on.
struct GenerationShape {
  int32_t microbatches = 0;
  int64_t batch = 0;   // sequences per microbatch
  int64_t window = 0;  // positions a cache holds
  int64_t vocab = 0;
  int64_t sequences() const { return microbatches * batch; }
};

// The shapes of `steps` as the header describes them, or InvalidArgument
// saying what differs.
absl::StatusOr<GenerationShape> CheckGenerationSteps(const GenerationSteps& steps);

// The next id of sequence `sequence` from one position's logits (`vocab`
// floats), for its `draw`-th new token (0 first).
using TokenPicker = std::function<int32_t(const float* logits, int64_t vocab, int64_t sequence, int64_t draw)>;

struct GenerationReport {
  std::vector<std::vector<int32_t>> tokens;  // per prompt: its new ids
  int64_t prefill_steps = 0;
  int64_t decode_steps = 0;
  // Tokens the steps computed for the prompts (padding and the sequences
  // that only fill a microbatch not counted): each prefilled context's,
  // one per sequence per decode step.
  int64_t prefill_tokens = 0;
  int64_t decode_tokens = 0;
  double prefill_seconds = 0;
  double decode_seconds = 0;
};

class Generator {
 public:
  virtual ~Generator() = default;

  // The reference: the whole model in this process (the interpreter), the
  // caches in a map. `parameters`: every parameter of the steps.
  static absl::StatusOr<std::unique_ptr<Generator>> OnReference(GenerationSteps steps, ir::TensorMap parameters);
  // Through a pipeline: `schedule` runs the steps' forwards (a forward-only
  // schedule, ForwardOnly), `parameters` says where each actor gets its
  // parameters (a checkpoint's files, held tensors); the caches start as
  // zeros on their actors. The launcher must switch programs
  // (Launcher::UsePrograms).
  static absl::StatusOr<std::unique_ptr<Generator>> OnPipeline(GenerationSteps steps,
                                                               const schedules::Schedule& schedule,
                                                               const ir::StateSources& parameters,
                                                               std::unique_ptr<Launcher> launcher,
                                                               const CompileOptions& options = {});

  const GenerationShape& shape() const { return shape_; }

  // Extends each of `prompts` (at most shape().sequences(), each at least
  // one id, each id in [0, vocab)) by `tokens` ids chosen by `pick`;
  // sequences past the prompts fill the last microbatches with id 0 and are
  // dropped. InvalidArgument for prompts that do not fit; the steps' errors
  // (an actor's, named) otherwise.
  absl::StatusOr<GenerationReport> Generate(const std::vector<std::vector<int32_t>>& prompts, int64_t tokens,
                                            const TokenPicker& pick);

 protected:
  explicit Generator(GenerationShape shape) : shape_(shape) {}
  // Runs the prefill or the decode step on every microbatch's inputs;
  // returns each microbatch's logits.
  virtual absl::StatusOr<std::vector<ir::HostTensor>> RunStep(bool decode,
                                                              const std::vector<ir::TensorMap>& microbatches) = 0;

 private:
  GenerationShape shape_;
};

}  // namespace tandem::controller

#endif  // TANDEM_CONTROLLER_GENERATION_H_
