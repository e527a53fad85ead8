#include "examples/example_job.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <set>

#include "absl/strings/str_cat.h"
#include "examples/data/char_corpus.h"
#include "examples/data/synthetic.h"
#include "examples/data/token_file.h"
#include "examples/data/tokenizer.h"
#include "examples/limits.h"
#include "examples/models/gpt.h"
#include "examples/models/llama.h"
#include "examples/models/mlp.h"
#include "examples/models/two_tower.h"
#include "ir/limits.h"
#include "ir/op_def.h"
#include "ir/trace.h"

namespace tandem::examples {
namespace {

// The job's optimizer at its learning rate and schedule; `embeddings` are
// the parameters weight decay leaves alone unless decay_embeddings.
absl::StatusOr<std::unique_ptr<Optimizer>> MakeOptimizer(const ExampleJobOptions& options, double default_lr,
                                                         const std::set<std::string>& embeddings) {
  const double lr = options.lr.value_or(default_lr);
  if (!std::isfinite(lr) || lr <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("lr ", lr, " is not a learning rate: it must be a finite number above 0"));
  }
  LearningRateSchedule schedule = options.schedule;
  if (schedule.decay != LearningRateSchedule::Decay::kConstant) {
    if (schedule.decay_steps <= schedule.warmup_steps) {
      return absl::InvalidArgumentError(absl::StrCat("a decaying learning rate needs decay steps (", schedule.decay_steps,
                                                     ") above the warmup steps (", schedule.warmup_steps, ")"));
    }
    schedule.min_lr = options.min_lr.value_or(lr / 10);
  } else if (options.min_lr.has_value()) {
    return absl::InvalidArgumentError("min lr applies to a decaying learning rate (linear or cosine)");
  }
  if (options.optimizer == "adam") {
    AdamOptions adam{.learning_rate = lr, .schedule = schedule, .weight_decay = options.weight_decay};
    if (!options.decay_embeddings) adam.no_decay = embeddings;
    return std::make_unique<Adam>(std::move(adam));
  }
  if (options.weight_decay != 0.0) {
    return absl::InvalidArgumentError(absl::StrCat("weight decay is AdamW's; the optimizer is ", options.optimizer));
  }
  if (options.optimizer == "sgd") {
    return std::make_unique<Sgd>(SgdOptions{.learning_rate = lr, .momentum = 0.9, .schedule = schedule});
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown optimizer '", options.optimizer, "' (expected adam or sgd)"));
}

// Every size the options give, against its bound, before anything is
// traced or allocated.
absl::Status CheckSizes(const ExampleJobOptions& options) {
  if (options.stages < 1 || options.microbatches < 1) {
    return absl::InvalidArgumentError("an example job needs at least 1 stage and 1 microbatch");
  }
  if (options.replicas < 1 || options.replicas > ir::kMaxReplicas) {
    return absl::InvalidArgumentError(absl::StrCat("data-parallel replicas ", options.replicas, " is outside [1, ",
                                                   ir::kMaxReplicas, "]"));
  }
  if (int64_t{options.microbatches} * options.replicas > kMaxMicrobatches) {
    return absl::InvalidArgumentError(absl::StrCat("microbatches ", options.microbatches,
                                                   options.replicas == 1
                                                       ? ""
                                                       : absl::StrCat(" x ", options.replicas, " replicas"),
                                                   " is more than the ", kMaxMicrobatches,
                                                   " an example job may have"));
  }
  if (options.stages > kMaxLayers) {
    return absl::InvalidArgumentError(absl::StrCat("stages ", options.stages, " is more than the ", kMaxLayers,
                                                   " an example model may have (one layer each at least)"));
  }
  struct Size {
    const char* name;
    const std::optional<int64_t>& value;
    int64_t bound;
  };
  const Size sizes[] = {{"layers", options.layers, kMaxLayers},
                        {"dim", options.dim, kMaxDim},
                        {"heads", options.heads, kMaxHeads},
                        {"kv heads", options.kv_heads, kMaxHeads},
                        {"mlp hidden width", options.mlp_hidden, kMaxDim},
                        {"seq", options.seq, kMaxSequence},
                        {"batch", options.batch, kMaxBatch},
                        {"vocab", options.vocab, kMaxVocab}};
  if (!options.towers.empty() && options.towers.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat("towers lists ", options.towers.size(),
                                                   " depths; two-tower has two towers (e.g. --towers 4,3)"));
  }
  for (int64_t depth : options.towers) {
    if (depth < 1 || depth > kMaxLayers) {
      return absl::InvalidArgumentError(absl::StrCat("a tower of ", depth, " layers is outside [1, ", kMaxLayers, "]"));
    }
  }
  for (const Size& size : sizes) {
    if (!size.value.has_value()) continue;
    if (*size.value < 1) {
      return absl::InvalidArgumentError(absl::StrCat(size.name, " ", *size.value, " must be at least 1"));
    }
    if (*size.value > size.bound) {
      return absl::InvalidArgumentError(absl::StrCat(size.name, " ", *size.value, " is more than the ", size.bound,
                                                     " an example model may have"));
    }
  }
  return absl::OkStatus();
}

template <typename T>
void Override(const std::optional<int64_t>& value, T& field) {
  if (value.has_value()) field = static_cast<T>(*value);
}

// The two-tower `options` describe: the defaults for what they leave unset.
TwoTowerConfig TwoTowerConfigOf(const ExampleJobOptions& options) {
  TwoTowerConfig config;
  config.num_stages = options.stages;
  if (options.towers.size() == 2) {
    config.left_layers = options.towers[0];
    config.right_layers = options.towers[1];
  }
  config.layer_stages = options.layer_stages;
  Override(options.layers, config.head_layers);
  Override(options.dim, config.hidden_dim);
  Override(options.batch, config.batch_size);
  return config;
}

}  // namespace

absl::Status CheckFootprint(const ir::TrainStep& step, absl::string_view sizes) {
  int64_t state_bytes = 0;
  for (const ir::StateSpec& spec : step.state) {
    absl::StatusOr<int64_t> bytes = ir::CheckedNumBytes(spec.type);
    if (!bytes.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("state '", spec.name, "': ", bytes.status().message()));
    }
    if (state_bytes > std::numeric_limits<int64_t>::max() - *bytes) {
      return absl::InvalidArgumentError(absl::StrCat("the model's parameters and optimizer state need more than ",
                                                     std::numeric_limits<int64_t>::max(), " bytes (", sizes,
                                                     "): choose smaller sizes"));
    }
    state_bytes += *bytes;
  }
  for (const ir::Graph* graph : {&step.microbatch, &step.update}) {
    for (ir::ValueId id = 0; id < graph->size(); ++id) {
      const ir::Node& node = graph->node(id);
      absl::StatusOr<int64_t> bytes = ir::CheckedNumBytes(node.type);
      if (!bytes.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("value %", id, " (", ir::OpName(node.op),
                                                       ") of the traced step: ", bytes.status().message(), " (",
                                                       sizes, "): choose smaller sizes"));
      }
    }
  }
  return absl::OkStatus();
}

int64_t TwoTowerLayerCount(const ExampleJobOptions& options) {
  const TwoTowerConfig config = TwoTowerConfigOf(options);
  return config.left_layers + config.right_layers + config.head_layers;
}

namespace {

// What every example job shares: the options that trace it.
struct JobBasis {
  TraceOptions trace;
  uint64_t data_seed = 1;
  int32_t num_microbatches = 1;  // a step's: every replica's, replica after replica
  std::string replicas;          // " (M on each of D replicas)", or empty
};

JobBasis BasisOf(const ExampleJobOptions& options) {
  JobBasis basis;
  basis.trace.num_microbatches = options.microbatches;
  basis.trace.num_replicas = options.replicas;
  basis.trace.seed = options.seed;
  basis.trace.updates = options.updates;
  basis.trace.clip_grad_norm = options.clip_grad_norm;
  basis.trace.skip_nonfinite_updates = options.skip_nonfinite_updates;
  basis.data_seed = options.seed;
  basis.num_microbatches = options.microbatches * options.replicas;
  if (options.replicas != 1) {
    basis.replicas = absl::StrCat(" (", options.microbatches, " on each of ", options.replicas, " replicas)");
  }
  return basis;
}

// Traces `model` with its optimizer and checks its footprint (`sizes` names
// the sizes in errors).
absl::StatusOr<ir::TrainStep> TraceJobStep(const ExampleJobOptions& options, const JobBasis& basis,
                                           const std::string& name, const ModelFunction& model, double default_lr,
                                           const std::string& sizes, const std::set<std::string>& embeddings = {}) {
  absl::StatusOr<std::unique_ptr<Optimizer>> optimizer = MakeOptimizer(options, default_lr, embeddings);
  if (!optimizer.ok()) return optimizer.status();
  absl::StatusOr<ir::TrainStep> step = TraceTrainStep(name, model, **optimizer, basis.trace);
  if (!step.ok()) return step.status();
  if (absl::Status s = CheckFootprint(*step, sizes); !s.ok()) return s;
  return step;
}

// ExampleJob::forward_step for `model`, traced as TraceJobStep traces it.
std::function<absl::StatusOr<ir::TrainStep>()> ForwardStepOf(const std::string& name, ModelFunction model,
                                                             const JobBasis& basis) {
  return [name, model = std::move(model), trace = basis.trace]() { return TraceForwardStep(name, model, trace); };
}

// Batches of `batch` sequences of `seq` tokens from the corpus, per
// microbatch, for a language model's "tokens" and "labels".
void TakeCorpusBatches(std::shared_ptr<const Corpus> corpus, int64_t batch, int64_t seq, const JobBasis& basis,
                       ExampleJob& job) {
  job.items_per_step = batch * seq * basis.num_microbatches;
  job.sequence_length = seq;
  job.item_name = "tokens";
  job.microbatch_size = batch;
  job.corpus = corpus;
  auto batches = [corpus, batch, seq, count = basis.num_microbatches, seed = basis.data_seed](
                     Corpus::Split split, uint64_t index) -> absl::StatusOr<std::vector<ir::TensorMap>> {
    std::vector<ir::TensorMap> microbatches;
    for (int32_t m = 0; m < count; ++m) {
      absl::StatusOr<ir::TensorMap> microbatch = corpus->Batch(split, batch, seq, seed, index * count + m);
      if (!microbatch.ok()) return microbatch.status();
      microbatches.push_back(*std::move(microbatch));
    }
    return microbatches;
  };
  job.train_batch = [batches](uint64_t index) { return batches(Corpus::Split::kTrain, index); };
  job.validation_batch = [batches](uint64_t index) { return batches(Corpus::Split::kValidation, index); };
}

// Batches from a generator of examples by index; validation draws from an
// index range training never reaches.
void TakeSyntheticBatches(std::function<ir::TensorMap(uint64_t)> example_batch, int64_t batch, const JobBasis& basis,
                          ExampleJob& job) {
  job.items_per_step = batch * basis.num_microbatches;
  job.item_name = "examples";
  job.microbatch_size = batch;
  auto batches = [example_batch = std::move(example_batch),
                  count = basis.num_microbatches](uint64_t base) -> absl::StatusOr<std::vector<ir::TensorMap>> {
    std::vector<ir::TensorMap> microbatches;
    for (int32_t m = 0; m < count; ++m) microbatches.push_back(example_batch(base + m));
    return microbatches;
  };
  const uint64_t count = static_cast<uint64_t>(basis.num_microbatches);
  job.train_batch = [batches, count](uint64_t index) { return batches(index * count); };
  job.validation_batch = [batches, count](uint64_t index) { return batches((uint64_t{1} << 40) + index * count); };
}

// The corpus a language model trains on, and the vocabulary its head needs:
// the corpus's (its characters, or its tokenizer's pieces), or more when
// --vocab asks (ids past the corpus's never occur).
absl::StatusOr<std::shared_ptr<const Corpus>> LoadCorpus(const ExampleJobOptions& options, int64_t& vocab) {
  std::shared_ptr<const Corpus> corpus;
  if (options.tokenizer.has_value()) {
    if (!options.data.has_value()) {
      return absl::InvalidArgumentError("a tokenizer needs --data: a token file of its ids (`tandem tokenize`)");
    }
    absl::StatusOr<Tokenizer> tokenizer = Tokenizer::Load(*options.tokenizer);
    if (!tokenizer.ok()) return tokenizer.status();
    absl::StatusOr<std::unique_ptr<TokenFile>> file = TokenFile::Open(*options.data, *std::move(tokenizer));
    if (!file.ok()) return file.status();
    corpus = *std::move(file);
  } else {
    absl::StatusOr<CharCorpus> text = CharCorpus::LoadDefault(options.data);
    if (!text.ok()) return text.status();
    corpus = std::make_shared<const CharCorpus>(*std::move(text));
  }
  vocab = std::max(vocab, corpus->vocab_size());
  if (options.vocab.has_value()) {
    if (*options.vocab < corpus->vocab_size()) {
      return absl::InvalidArgumentError(absl::StrCat("vocab ", *options.vocab, " is smaller than the ",
                                                     corpus->vocab_size(), " ids of ", corpus->description()));
    }
    vocab = *options.vocab;
  }
  return corpus;
}

// The sizes of a language model (GptConfig, LlamaConfig) that the options
// give, over its defaults.
template <typename Config>
void TakeLanguageModelSizes(const ExampleJobOptions& options, Config& config) {
  config.num_stages = options.stages;
  config.block_stages = options.layer_stages;
  config.tied_head = config.tied_head || options.tied;
  config.compute_dtype = options.precision;
  config.attention = options.attention;
  Override(options.layers, config.num_layers);
  Override(options.dim, config.model_dim);
  Override(options.heads, config.num_heads);
  Override(options.seq, config.sequence_length);
  Override(options.batch, config.batch_size);
}

// "gpt: 4 layers, dim 64, seq 32, batch 8": a language model's sizes in errors.
template <typename Config>
std::string LanguageModelSizes(absl::string_view model, const Config& config) {
  return absl::StrCat(model, ": ", config.num_layers, " layers, dim ", config.model_dim, ", seq ",
                      config.sequence_length, ", batch ", config.batch_size);
}

// The job of a traced language model: its corpus's batches and its logits.
template <typename Config>
ExampleJob LanguageModelJob(ir::TrainStep step, std::string description, std::shared_ptr<const Corpus> corpus,
                            const Config& config, const JobBasis& basis, CachedModelFunction logits) {
  ExampleJob job;
  job.step = std::move(step);
  job.description = absl::StrCat(description, ", vocab ", config.vocab_size, ", batch ", config.batch_size, " x ",
                                 basis.num_microbatches, " microbatches", basis.replicas, ", ", config.num_stages,
                                 " stages",
                                 config.compute_dtype == ir::DType::kF32
                                     ? ""
                                     : absl::StrCat(", ", ir::DTypeName(config.compute_dtype), " mixed precision"),
                                 config.attention == layers::AttentionImpl::kFused ? "" : ", composed attention",
                                 "; data: ", corpus->description());
  TakeCorpusBatches(std::move(corpus), config.batch_size, config.sequence_length, basis, job);
  job.logits = [logits](Tracer& t) { return logits(t, layers::KvCache::Mode::kNone); };
  job.cached_logits = std::move(logits);
  return job;
}

absl::StatusOr<ExampleJob> MakeGptJob(const ExampleJobOptions& options, const JobBasis& basis) {
  GptConfig config;
  config.vocab_size = 0;
  if (!options.preset.empty()) {
    if (absl::Status s = ApplyGptPreset(options.preset, config); !s.ok()) return s;
  }
  absl::StatusOr<std::shared_ptr<const Corpus>> corpus = LoadCorpus(options, config.vocab_size);
  if (!corpus.ok()) return corpus.status();
  TakeLanguageModelSizes(options, config);
  if (absl::Status s = ValidateGptConfig(config); !s.ok()) return s;
  absl::StatusOr<ir::TrainStep> step = TraceJobStep(options, basis, "gpt", GptModel(config), 3e-3,
                                                    LanguageModelSizes("gpt", config), {"wte", "wpe"});
  if (!step.ok()) return step.status();
  ExampleJob job =
      LanguageModelJob(*std::move(step),
                       absl::StrCat("gpt: ", config.num_layers, " layers, d=", config.model_dim, ", ",
                                    config.num_heads, " heads, seq ", config.sequence_length),
                       *std::move(corpus), config, basis, [config](Tracer& t, layers::KvCache::Mode mode) { return GptLogits(t, config, mode); });
  job.gpt = config;
  job.forward_step = ForwardStepOf("gpt", GptModel(config), basis);
  return job;
}

absl::StatusOr<ExampleJob> MakeLlamaJob(const ExampleJobOptions& options, const JobBasis& basis) {
  LlamaConfig config;
  config.vocab_size = 0;
  absl::StatusOr<std::shared_ptr<const Corpus>> corpus = LoadCorpus(options, config.vocab_size);
  if (!corpus.ok()) return corpus.status();
  TakeLanguageModelSizes(options, config);
  // Without --kv-heads: half the heads share each kv head where they can.
  config.num_kv_heads = config.num_heads % 2 == 0 ? config.num_heads / 2 : config.num_heads;
  Override(options.kv_heads, config.num_kv_heads);
  Override(options.mlp_hidden, config.mlp_hidden);
  config.rope_theta = options.rope_theta.value_or(config.rope_theta);
  config.norm_eps = options.norm_eps.value_or(config.norm_eps);
  if (absl::Status s = ValidateLlamaConfig(config); !s.ok()) return s;
  absl::StatusOr<ir::TrainStep> step = TraceJobStep(options, basis, "llama", LlamaModel(config), 3e-3,
                                                    LanguageModelSizes("llama", config), {"model.embed_tokens.weight"});
  if (!step.ok()) return step.status();
  ExampleJob job =
      LanguageModelJob(*std::move(step),
                       absl::StrCat("llama: ", config.num_layers, " layers, d=", config.model_dim, ", ",
                                    config.num_heads, " heads (", config.num_kv_heads, " kv), mlp ",
                                    LlamaMlpWidth(config), ", seq ", config.sequence_length),
                       *std::move(corpus), config, basis, [config](Tracer& t, layers::KvCache::Mode mode) { return LlamaLogits(t, config, mode); });
  job.llama = config;
  job.forward_step = ForwardStepOf("llama", LlamaModel(config), basis);
  return job;
}

absl::StatusOr<ExampleJob> MakeMlpJob(const ExampleJobOptions& options, const JobBasis& basis) {
  MlpConfig config;
  config.num_stages = options.stages;
  config.layer_stages = options.layer_stages;
  Override(options.layers, config.num_layers);
  Override(options.dim, config.hidden_dim);
  Override(options.batch, config.batch_size);
  if (absl::Status s = ValidateMlpConfig(config); !s.ok()) return s;
  absl::StatusOr<ir::TrainStep> step =
      TraceJobStep(options, basis, "mlp", MlpModel(config), 1e-2,
                   absl::StrCat("mlp: ", config.num_layers, " layers, dim ", config.hidden_dim, ", batch ",
                                config.batch_size));
  if (!step.ok()) return step.status();
  ExampleJob job;
  job.step = *std::move(step);
  job.description = absl::StrCat("mlp: ", config.num_layers, " hidden layers of ", config.hidden_dim, ", batch ",
                                 config.batch_size, " x ", basis.num_microbatches, " microbatches", basis.replicas,
                                 ", ", config.num_stages, " stages; data: synthetic teacher-labelled classes");
  TakeSyntheticBatches([config, seed = basis.data_seed](uint64_t index) { return ClassificationBatch(config, seed, index); },
                       config.batch_size, basis, job);
  job.forward_step = ForwardStepOf("mlp", MlpModel(config), basis);
  return job;
}

absl::StatusOr<ExampleJob> MakeTwoTowerJob(const ExampleJobOptions& options, const JobBasis& basis) {
  const TwoTowerConfig config = TwoTowerConfigOf(options);
  if (absl::Status s = ValidateTwoTowerConfig(config); !s.ok()) return s;
  const std::string sizes = absl::StrCat("two-tower: towers of ", config.left_layers, " and ", config.right_layers,
                                         " layers, head ", config.head_layers, ", dim ", config.hidden_dim,
                                         ", batch ", config.batch_size);
  absl::StatusOr<ir::TrainStep> step = TraceJobStep(options, basis, "two-tower", TwoTowerModel(config), 1e-2, sizes);
  if (!step.ok()) return step.status();
  ExampleJob job;
  job.step = *std::move(step);
  const ir::StageGraph graph = job.step.stage_graph();
  job.description = absl::StrCat(
      sizes, " x ", basis.num_microbatches, " microbatches", basis.replicas, ", ", config.num_stages, " stages",
      graph.IsChain() ? "" : absl::StrCat(" (graph ", ir::FormatStageEdges(graph.Edges()), ")"),
      "; data: synthetic teacher-labelled classes");
  TakeSyntheticBatches([config, seed = basis.data_seed](uint64_t index) { return TwoTowerBatch(config, seed, index); },
                       config.batch_size, basis, job);
  job.forward_step = ForwardStepOf("two-tower", TwoTowerModel(config), basis);
  return job;
}

}  // namespace

absl::StatusOr<ExampleJob> MakeExampleJob(const ExampleJobOptions& options) {
  if (absl::Status s = CheckSizes(options); !s.ok()) return s;
  if (!options.preset.empty() && options.model != "gpt") {
    return absl::InvalidArgumentError(
        absl::StrCat("preset '", options.preset, "' is a gpt's shape; the model is ", options.model));
  }
  if (options.kv_heads.has_value() && options.model != "llama") {
    return absl::InvalidArgumentError(absl::StrCat("kv heads apply to the llama model, not ", options.model));
  }
  if ((options.mlp_hidden.has_value() || options.rope_theta.has_value() || options.norm_eps.has_value()) &&
      options.model != "llama") {
    return absl::InvalidArgumentError(absl::StrCat(
        "an MLP width, a rope theta and a norm epsilon apply to the llama model, not ", options.model));
  }
  if (options.precision != ir::DType::kF32 && options.model != "gpt" && options.model != "llama") {
    return absl::InvalidArgumentError(absl::StrCat("precision ", ir::DTypeName(options.precision),
                                                   " applies to the gpt and llama models; ", options.model,
                                                   " computes in f32"));
  }
  const JobBasis basis = BasisOf(options);
  if (options.model == "gpt") return MakeGptJob(options, basis);
  if (options.model == "llama") return MakeLlamaJob(options, basis);
  if (options.model == "mlp") return MakeMlpJob(options, basis);
  if (options.model == "two-tower") return MakeTwoTowerJob(options, basis);
  return absl::InvalidArgumentError(
      absl::StrCat("unknown model '", options.model, "' (expected gpt, llama, mlp or two-tower)"));
}

}  // namespace tandem::examples

namespace tandem::examples {

absl::StatusOr<std::vector<int32_t>> CostBalancedLayerStages(const ExampleJobOptions& options, int32_t stages) {
  // One stage per layer: each stage's flops are then its layer's, plus the
  // embeddings on the first and the head and loss on the last.
  ExampleJobOptions per_layer = options;
  per_layer.stages = 1;
  absl::StatusOr<ExampleJob> whole = MakeExampleJob(per_layer);
  if (!whole.ok()) return whole.status();
  if (!whole->gpt && !whole->llama) {
    return absl::InvalidArgumentError(absl::StrCat("a cost-balanced split is for gpt and llama, not ", options.model));
  }
  const int32_t layers = static_cast<int32_t>(whole->gpt ? whole->gpt->num_layers : whole->llama->num_layers);
  if (layers < stages || stages < 1) {
    return absl::InvalidArgumentError(absl::StrCat(layers, " layers cannot fill ", stages, " stages"));
  }
  per_layer.stages = layers;
  per_layer.layer_stages.resize(static_cast<size_t>(layers));
  for (int32_t l = 0; l < layers; ++l) per_layer.layer_stages[static_cast<size_t>(l)] = l;
  absl::StatusOr<ExampleJob> split = MakeExampleJob(per_layer);
  if (!split.ok()) return split.status();
  const ir::Graph& graph = split->step.microbatch;
  std::vector<double> cost(static_cast<size_t>(layers), 0.0);
  for (const ir::Node& node : graph.nodes()) {
    if (node.op == ir::OpKind::kInput || node.stage < 0 || node.stage >= layers) continue;
    std::vector<ir::TensorType> operands;
    for (ir::ValueId operand : node.operands) operands.push_back(graph.type(operand));
    cost[static_cast<size_t>(node.stage)] += ir::NodeCost(node, operands).flops;
  }
  // The linear partition: best[s][l] = the least possible largest stage cost
  // of layers [0, l) on s stages; cut[s][l] = where its last stage begins.
  std::vector<double> prefix(static_cast<size_t>(layers) + 1, 0.0);
  for (int32_t l = 0; l < layers; ++l) prefix[l + 1] = prefix[l] + cost[l];
  const double infinity = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(stages + 1, std::vector<double>(layers + 1, infinity));
  std::vector<std::vector<int32_t>> cut(stages + 1, std::vector<int32_t>(layers + 1, 0));
  best[0][0] = 0.0;
  for (int32_t s = 1; s <= stages; ++s) {
    for (int32_t l = s; l <= layers; ++l) {
      for (int32_t begin = s - 1; begin < l; ++begin) {
        const double largest = std::max(best[s - 1][begin], prefix[l] - prefix[begin]);
        if (largest < best[s][l]) {
          best[s][l] = largest;
          cut[s][l] = begin;
        }
      }
    }
  }
  std::vector<int32_t> layer_stages(static_cast<size_t>(layers));
  for (int32_t s = stages, end = layers; s >= 1; --s) {
    const int32_t begin = cut[s][end];
    for (int32_t l = begin; l < end; ++l) layer_stages[static_cast<size_t>(l)] = s - 1;
    end = begin;
  }
  return layer_stages;
}

}  // namespace tandem::examples
