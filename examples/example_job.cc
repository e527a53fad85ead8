#include "examples/example_job.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "absl/strings/str_cat.h"
#include "examples/data/char_corpus.h"
#include "examples/data/synthetic.h"
#include "examples/limits.h"
#include "examples/models/gpt.h"
#include "examples/models/mlp.h"
#include "examples/models/two_tower.h"
#include "ir/limits.h"
#include "ir/trace.h"

namespace tandem::examples {
namespace {

absl::StatusOr<std::unique_ptr<Optimizer>> MakeOptimizer(const ExampleJobOptions& options, double default_lr) {
  const double lr = options.lr.value_or(default_lr);
  if (!std::isfinite(lr) || lr <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("lr ", lr, " is not a learning rate: it must be a finite number above 0"));
  }
  if (options.optimizer == "adam") return std::make_unique<Adam>(AdamOptions{.learning_rate = lr});
  if (options.optimizer == "sgd") return std::make_unique<Sgd>(SgdOptions{.learning_rate = lr, .momentum = 0.9});
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
    state_bytes += *bytes;  // checked after every tensor, so far from overflowing
    if (state_bytes > kMaxStateBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the model's parameters and optimizer state need more than the ", kMaxStateBytes,
          " bytes an example job may use (", sizes, "): choose smaller sizes"));
    }
  }
  for (const ir::Graph* graph : {&step.microbatch, &step.update}) {
    for (ir::ValueId id = 0; id < graph->size(); ++id) {
      const ir::Node& node = graph->node(id);
      absl::StatusOr<int64_t> bytes = ir::CheckedNumBytes(node.type);
      if (!bytes.ok() || *bytes > kMaxValueBytes) {
        return absl::InvalidArgumentError(absl::StrCat(
            "value %", id, " (", ir::OpName(node.op), ") of the traced step is ", ir::TypeToString(node.type),
            ", more than the ", kMaxValueBytes, " bytes one value of an example job may have (", sizes,
            "): choose smaller sizes"));
      }
    }
  }
  return absl::OkStatus();
}

int64_t TwoTowerLayerCount(const ExampleJobOptions& options) {
  const TwoTowerConfig config = TwoTowerConfigOf(options);
  return config.left_layers + config.right_layers + config.head_layers;
}

absl::StatusOr<ExampleJob> MakeExampleJob(const ExampleJobOptions& options) {
  if (absl::Status s = CheckSizes(options); !s.ok()) return s;
  if (!options.preset.empty() && options.model != "gpt") {
    return absl::InvalidArgumentError(
        absl::StrCat("preset '", options.preset, "' is a gpt's shape; the model is ", options.model));
  }
  TraceOptions trace;
  trace.num_microbatches = options.microbatches;
  trace.num_replicas = options.replicas;
  trace.seed = options.seed;
  trace.updates = options.updates;
  const uint64_t data_seed = options.seed;
  // A step's batch: every replica's microbatches, replica after replica.
  const int32_t num_microbatches = options.microbatches * options.replicas;
  const std::string replicas =
      options.replicas == 1 ? "" : absl::StrCat(" (", options.microbatches, " on each of ", options.replicas, " replicas)");
  ExampleJob job;

  if (options.model == "gpt") {
    absl::StatusOr<CharCorpus> corpus = CharCorpus::LoadDefault(options.data);
    if (!corpus.ok()) return corpus.status();
    GptConfig config;
    config.vocab_size = corpus->vocab_size();
    if (!options.preset.empty()) {
      if (absl::Status s = ApplyGptPreset(options.preset, config); !s.ok()) return s;
    }
    // Ids past the corpus's never occur; the head is as wide as asked.
    Override(options.vocab, config.vocab_size);
    if (config.vocab_size < corpus->vocab_size()) {
      return absl::InvalidArgumentError(absl::StrCat("vocab ", config.vocab_size, " is smaller than the ",
                                                     corpus->vocab_size(), " characters of ", corpus->source()));
    }
    config.num_stages = options.stages;
    config.block_stages = options.layer_stages;
    config.tied_head = config.tied_head || options.tied;
    Override(options.layers, config.num_layers);
    Override(options.dim, config.model_dim);
    Override(options.heads, config.num_heads);
    Override(options.seq, config.sequence_length);
    Override(options.batch, config.batch_size);
    if (absl::Status s = ValidateGptConfig(config); !s.ok()) return s;
    absl::StatusOr<std::unique_ptr<Optimizer>> optimizer = MakeOptimizer(options, 3e-3);
    if (!optimizer.ok()) return optimizer.status();
    absl::StatusOr<ir::TrainStep> step = TraceTrainStep("gpt", GptModel(config), **optimizer, trace);
    if (!step.ok()) return step.status();
    if (absl::Status s = CheckFootprint(*step, absl::StrCat("gpt: ", config.num_layers, " layers, dim ",
                                                             config.model_dim, ", seq ", config.sequence_length,
                                                             ", batch ", config.batch_size));
        !s.ok()) {
      return s;
    }
    job.step = *std::move(step);
    job.description = absl::StrCat("gpt: ", config.num_layers, " layers, d=", config.model_dim, ", ",
                                   config.num_heads, " heads, seq ", config.sequence_length, ", vocab ",
                                   config.vocab_size, ", batch ", config.batch_size, " x ", num_microbatches,
                                   " microbatches", replicas, ", ", config.num_stages, " stages; data: ", corpus->source(),
                                   " (", corpus->size(), " bytes)");
    job.items_per_step = int64_t{config.batch_size} * config.sequence_length * num_microbatches;
    job.item_name = "tokens";
    job.microbatch_size = config.batch_size;
    auto shared = std::make_shared<CharCorpus>(*std::move(corpus));
    auto batches = [shared, config, num_microbatches, data_seed](CharCorpus::Split split, uint64_t index) {
      std::vector<ir::TensorMap> microbatches;
      for (int32_t m = 0; m < num_microbatches; ++m) {
        microbatches.push_back(shared->Batch(split, config.batch_size, config.sequence_length, data_seed,
                                             index * num_microbatches + m));
      }
      return microbatches;
    };
    job.train_batch = [batches](uint64_t index) { return batches(CharCorpus::Split::kTrain, index); };
    job.validation_batch = [batches](uint64_t index) { return batches(CharCorpus::Split::kValidation, index); };
    return job;
  }
  if (options.model == "mlp") {
    MlpConfig config;
    config.num_stages = options.stages;
    config.layer_stages = options.layer_stages;
    Override(options.layers, config.num_layers);
    Override(options.dim, config.hidden_dim);
    Override(options.batch, config.batch_size);
    if (absl::Status s = ValidateMlpConfig(config); !s.ok()) return s;
    absl::StatusOr<std::unique_ptr<Optimizer>> optimizer = MakeOptimizer(options, 1e-2);
    if (!optimizer.ok()) return optimizer.status();
    absl::StatusOr<ir::TrainStep> step = TraceTrainStep("mlp", MlpModel(config), **optimizer, trace);
    if (!step.ok()) return step.status();
    if (absl::Status s = CheckFootprint(*step, absl::StrCat("mlp: ", config.num_layers, " layers, dim ",
                                                             config.hidden_dim, ", batch ", config.batch_size));
        !s.ok()) {
      return s;
    }
    job.step = *std::move(step);
    job.description = absl::StrCat("mlp: ", config.num_layers, " hidden layers of ", config.hidden_dim,
                                   ", batch ", config.batch_size, " x ", num_microbatches, " microbatches", replicas, ", ",
                                   config.num_stages, " stages; data: synthetic teacher-labelled classes");
    job.items_per_step = int64_t{config.batch_size} * num_microbatches;
    job.item_name = "examples";
    job.microbatch_size = config.batch_size;
    auto batches = [config, num_microbatches, data_seed](uint64_t base) {
      std::vector<ir::TensorMap> microbatches;
      for (int32_t m = 0; m < num_microbatches; ++m) {
        microbatches.push_back(ClassificationBatch(config, data_seed, base + m));
      }
      return microbatches;
    };
    job.train_batch = [batches, num_microbatches](uint64_t index) { return batches(index * num_microbatches); };
    // Validation draws from an index range training never reaches.
    job.validation_batch = [batches, num_microbatches](uint64_t index) {
      return batches((uint64_t{1} << 40) + index * num_microbatches);
    };
    return job;
  }
  if (options.model == "two-tower") {
    const TwoTowerConfig config = TwoTowerConfigOf(options);
    if (absl::Status s = ValidateTwoTowerConfig(config); !s.ok()) return s;
    absl::StatusOr<std::unique_ptr<Optimizer>> optimizer = MakeOptimizer(options, 1e-2);
    if (!optimizer.ok()) return optimizer.status();
    absl::StatusOr<ir::TrainStep> step = TraceTrainStep("two-tower", TwoTowerModel(config), **optimizer, trace);
    if (!step.ok()) return step.status();
    const std::string sizes = absl::StrCat("two-tower: towers of ", config.left_layers, " and ", config.right_layers,
                                           " layers, head ", config.head_layers, ", dim ", config.hidden_dim,
                                           ", batch ", config.batch_size);
    if (absl::Status s = CheckFootprint(*step, sizes); !s.ok()) return s;
    job.step = *std::move(step);
    const ir::StageGraph graph = job.step.stage_graph();
    job.description = absl::StrCat(
        sizes, " x ", num_microbatches, " microbatches", replicas, ", ", config.num_stages, " stages",
        graph.IsChain() ? "" : absl::StrCat(" (graph ", ir::FormatStageEdges(graph.Edges()), ")"),
        "; data: synthetic teacher-labelled classes");
    job.items_per_step = int64_t{config.batch_size} * num_microbatches;
    job.item_name = "examples";
    job.microbatch_size = config.batch_size;
    auto batches = [config, num_microbatches, data_seed](uint64_t base) {
      std::vector<ir::TensorMap> microbatches;
      for (int32_t m = 0; m < num_microbatches; ++m) microbatches.push_back(TwoTowerBatch(config, data_seed, base + m));
      return microbatches;
    };
    job.train_batch = [batches, num_microbatches](uint64_t index) { return batches(index * num_microbatches); };
    job.validation_batch = [batches, num_microbatches](uint64_t index) {
      return batches((uint64_t{1} << 40) + index * num_microbatches);
    };
    return job;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown model '", options.model, "' (expected gpt, mlp or two-tower)"));
}

}  // namespace tandem::examples
