#include "examples/example_job.h"

#include <algorithm>
#include <memory>

#include "absl/strings/str_cat.h"
#include "examples/data/char_corpus.h"
#include "examples/data/synthetic.h"
#include "examples/models/gpt.h"
#include "examples/models/mlp.h"
#include "ir/trace.h"

namespace tandem::examples {
namespace {

absl::StatusOr<std::unique_ptr<Optimizer>> MakeOptimizer(const ExampleJobOptions& options, double default_lr) {
  const double lr = options.lr.value_or(default_lr);
  if (options.optimizer == "adam") return std::make_unique<Adam>(AdamOptions{.learning_rate = lr});
  if (options.optimizer == "sgd") return std::make_unique<Sgd>(SgdOptions{.learning_rate = lr, .momentum = 0.9});
  return absl::InvalidArgumentError(absl::StrCat("unknown optimizer '", options.optimizer, "' (expected adam or sgd)"));
}

template <typename T>
void Override(const std::optional<int64_t>& value, T& field) {
  if (value.has_value()) field = static_cast<T>(*value);
}

}  // namespace

absl::StatusOr<ExampleJob> MakeExampleJob(const ExampleJobOptions& options) {
  if (options.stages < 1 || options.microbatches < 1) {
    return absl::InvalidArgumentError("an example job needs at least 1 stage and 1 microbatch");
  }
  TraceOptions trace;
  trace.num_microbatches = options.microbatches;
  trace.seed = options.seed;
  const uint64_t data_seed = options.seed;
  const int32_t num_microbatches = options.microbatches;
  ExampleJob job;

  if (options.model == "gpt") {
    absl::StatusOr<CharCorpus> corpus = CharCorpus::LoadDefault(options.data);
    if (!corpus.ok()) return corpus.status();
    GptConfig config;
    config.vocab_size = corpus->vocab_size();
    config.num_stages = options.stages;
    config.num_layers = std::max<int64_t>(config.num_layers, config.num_stages);
    config.tied_head = options.tied;
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
    job.step = *std::move(step);
    job.description = absl::StrCat("gpt: ", config.num_layers, " layers, d=", config.model_dim, ", ",
                                   config.num_heads, " heads, seq ", config.sequence_length, ", vocab ",
                                   config.vocab_size, ", batch ", config.batch_size, " x ", num_microbatches,
                                   " microbatches, ", config.num_stages, " stages; data: ", corpus->source(),
                                   " (", corpus->size(), " bytes)");
    job.items_per_step = int64_t{config.batch_size} * config.sequence_length * num_microbatches;
    job.item_name = "tokens";
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
    config.num_layers = std::max<int64_t>(config.num_layers, config.num_stages);
    Override(options.layers, config.num_layers);
    Override(options.dim, config.hidden_dim);
    Override(options.batch, config.batch_size);
    if (absl::Status s = ValidateMlpConfig(config); !s.ok()) return s;
    absl::StatusOr<std::unique_ptr<Optimizer>> optimizer = MakeOptimizer(options, 1e-2);
    if (!optimizer.ok()) return optimizer.status();
    absl::StatusOr<ir::TrainStep> step = TraceTrainStep("mlp", MlpModel(config), **optimizer, trace);
    if (!step.ok()) return step.status();
    job.step = *std::move(step);
    job.description = absl::StrCat("mlp: ", config.num_layers, " hidden layers of ", config.hidden_dim,
                                   ", batch ", config.batch_size, " x ", num_microbatches, " microbatches, ",
                                   config.num_stages, " stages; data: synthetic teacher-labelled classes");
    job.items_per_step = int64_t{config.batch_size} * num_microbatches;
    job.item_name = "examples";
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
  return absl::InvalidArgumentError(absl::StrCat("unknown model '", options.model, "' (expected gpt or mlp)"));
}

}  // namespace tandem::examples
