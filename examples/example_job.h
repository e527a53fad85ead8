// The example jobs behind `tandem train`, the benchmarks and the Python
// stub: a traced example model with its optimizer, and where its batches
// come from.
#ifndef TANDEM_EXAMPLES_EXAMPLE_JOB_H_
#define TANDEM_EXAMPLES_EXAMPLE_JOB_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "examples/data/corpus.h"
#include "examples/models/gpt.h"
#include "examples/models/llama.h"
#include "ir/host_tensor.h"
#include "ir/layers.h"
#include "ir/trace.h"
#include "ir/train_step.h"

namespace tandem::examples {

// That what `step` would allocate can be counted: every state tensor's and
// every value's bytes, and the state's total, fit in an int64.
// InvalidArgument naming `sizes` (e.g. "mlp: 4 layers, dim 64") otherwise.
// Whether it fits a machine is asked where it would be allocated, before it
// is (the launchers' static peaks, controller::CheckWholeModelFits for one
// process holding the whole model): compiling, simulating and planning
// work at any size.
absl::Status CheckFootprint(const ir::TrainStep& step, absl::string_view sizes);

// What to build. Unset sizes take the model's defaults (GptConfig,
// MlpConfig), whatever the stage count: the stages split the layers
// evenly, and a model with fewer layers than stages is InvalidArgument.
struct ExampleJobOptions {
  std::string model = "gpt";  // gpt, llama, mlp or two-tower
  // gpt: a preset's shapes (ApplyGptPreset, examples/models/gpt.h); the
  // sizes set below override it. Empty: none.
  std::string preset;
  int32_t stages = 1;
  int32_t microbatches = 4;       // per replica
  int32_t replicas = 1;           // data-parallel replicas; a step's batch is replicas x microbatches
  std::optional<int64_t> layers;  // decoder blocks (gpt, llama), hidden layers (mlp) or the head's layers (two-tower)
  std::optional<int64_t> dim;     // gpt and llama d_model, mlp and two-tower hidden width
  // two-tower: the layers of the left and right towers; empty: the defaults.
  std::vector<int64_t> towers;
  std::optional<int64_t> heads;   // gpt, llama
  // llama: key/value heads, dividing heads (grouped-query attention);
  // default half the heads when even, else all of them.
  std::optional<int64_t> kv_heads;
  // llama: the SwiGLU's hidden width (default LLaMA's rule, LlamaMlpWidth),
  // the rotary base and RMSNorm's epsilon (default LlamaConfig's): what a
  // Hugging Face config.json sets (examples/hugging_face.h).
  std::optional<int64_t> mlp_hidden;
  std::optional<double> rope_theta;
  std::optional<double> norm_eps;
  std::optional<int64_t> seq;     // gpt, llama sequence length
  std::optional<int64_t> batch;   // sequences or examples per microbatch
  std::optional<int64_t> vocab;   // gpt, llama: the LM head's width, at least the corpus's characters
  // The stage of each layer (examples/models/layer_stages.h); empty: an
  // even split of the layers over `stages`.
  std::vector<int32_t> layer_stages;
  bool tied = false;              // gpt, llama: the token embedding is also the LM head
  // gpt, llama: what the activations compute in, f32 or bf16 (mixed
  // precision: GptConfig::compute_dtype).
  ir::DType precision = ir::DType::kF32;
  // gpt and llama: how causal attention is computed (GptConfig::attention):
  // the fused op, or composed of matmul, causal_mask and softmax.
  layers::AttentionImpl attention = layers::AttentionImpl::kFused;
  std::string optimizer = "adam";  // adam or sgd (momentum 0.9)
  std::optional<double> lr;        // default 3e-3 for gpt and llama, 1e-2 for mlp and two-tower
  // The learning rate's warmup and decay (ir/optimizers.h); a decay with
  // decay_steps 0 is refused (tandem train sets it to its --steps).
  LearningRateSchedule schedule;
  std::optional<double> min_lr;    // where a decay ends; default lr / 10
  // adam: AdamW's decoupled weight decay. Norm gains and biases never
  // decay; the embeddings only with decay_embeddings.
  double weight_decay = 0.0;
  bool decay_embeddings = false;
  // Clip the gradients to this global norm across all stages and replicas
  // (TraceOptions::clip_grad_norm); 0: no clipping.
  double clip_grad_norm = 0.0;
  // A step whose gradients hold a NaN or an infinity leaves the weights as
  // they were (TraceOptions::skip_nonfinite_updates) instead of updating
  // them with it.
  bool skip_nonfinite_updates = false;
  uint64_t seed = 1;               // parameter initialization and data sampling
  // gpt, llama: with a tokenizer (a SentencePiece .model), `data` is a
  // token file (examples/data/token_file.h) of its ids, and the head is as
  // wide as its vocabulary.
  std::optional<std::string> tokenizer;
  std::optional<std::string> data;  // gpt, llama: a text file or directory (default: /usr/share/common-licenses)
  // Asynchronous pipelines (pipedream, 2bw): how the loop updates.
  WeightUpdates updates;
};

// A traced example model and where its batches come from. Owns everything
// it needs; not thread-safe.
// A language model's forward to its logits in a KV cache mode.
using CachedModelFunction = std::function<Tensor(Tracer&, layers::KvCache::Mode)>;

struct ExampleJob {
  std::string description;  // e.g. "gpt: 2 layers, d=64, ..., data: /usr/share/common-licenses"
  ir::TrainStep step;
  // What one step consumes, for throughput: e.g. 8192 "tokens".
  int64_t items_per_step = 0;
  std::string item_name;
  // Sequences (gpt) or examples (mlp) per microbatch.
  int64_t microbatch_size = 0;
  // Language models (gpt, llama): tokens per sequence; 0 for the others.
  int64_t sequence_length = 0;
  // The microbatches of training step `index` (0-based) from the train
  // split; an error when the data cannot be read (a token file truncated
  // under the run, an id past the vocabulary), naming where.
  std::function<absl::StatusOr<std::vector<ir::TensorMap>>(uint64_t index)> train_batch;
  // A held-out batch set for the validation loss.
  std::function<absl::StatusOr<std::vector<ir::TensorMap>>(uint64_t index)> validation_batch;
  // The model traced without backward or update (TraceForwardStep), with
  // the step's stages and microbatches: each microbatch's output is its
  // loss, its state the step's parameters. What evaluation runs through a
  // pipeline (Session::Evaluate). Traced when called.
  std::function<absl::StatusOr<ir::TrainStep>()> forward_step;
  // Language models (gpt, llama): the corpus (its text to ids and back),
  // and the model's forward to its logits, input "tokens" i32 [batch, seq],
  // the same parameters: what `tandem generate` runs. Null for the others.
  std::shared_ptr<const Corpus> corpus;
  ModelFunction logits;
  // The same forward with a KV cache (layers::KvCache): generation's
  // prefill and decode (TraceGenerationSteps). Null for the others.
  CachedModelFunction cached_logits;
  // The language model's sizes, the one of its kind that is set (what
  // `tandem export --format hf` writes as Hugging Face's config); both unset
  // for the other models.
  std::optional<GptConfig> gpt;
  std::optional<LlamaConfig> llama;
};

// InvalidArgument for an unknown model or optimizer, a learning rate that
// is not a finite number above 0, or sizes that do not fit (naming them):
// each size past its bound in examples/limits.h is refused before tracing,
// and a traced model whose state or largest value would pass its bound
// before anything is allocated.
absl::StatusOr<ExampleJob> MakeExampleJob(const ExampleJobOptions& options);

// A stage for each layer (ExampleJobOptions::layer_stages) that splits the
// model's layers over `stages` so that the most expensive stage costs as
// little as it can, by the op table's static cost (ir::NodeCost flops of
// the forward and backward of one microbatch): the first stage's share
// includes the embeddings, the last's the head and the loss, so a model
// with a wide head puts fewer layers on its last stage than an even split
// does. Each stage gets at least one layer. For gpt and llama; the errors
// of MakeExampleJob, and InvalidArgument for another model or fewer layers
// than stages.
absl::StatusOr<std::vector<int32_t>> CostBalancedLayerStages(const ExampleJobOptions& options, int32_t stages);

// A two-tower's layers, both towers' and the head's, as `options` (and the
// defaults for what they leave unset) make it.
int64_t TwoTowerLayerCount(const ExampleJobOptions& options);

}  // namespace tandem::examples

#endif  // TANDEM_EXAMPLES_EXAMPLE_JOB_H_
