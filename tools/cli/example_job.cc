#include "tools/cli/example_job.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "examples/data/char_corpus.h"
#include "examples/data/synthetic.h"
#include "examples/models/gpt.h"
#include "examples/models/mlp.h"

namespace tandem::cli {
namespace {

absl::StatusOr<double> GetDouble(const Arguments& arguments, const std::string& name) {
  absl::StatusOr<std::string> text = arguments.Require(name);
  if (!text.ok()) return text.status();
  double value = 0;
  if (!absl::SimpleAtod(*text, &value)) {
    return absl::InvalidArgumentError(absl::StrCat("option --", name, " needs a number, got '", *text, "'"));
  }
  return value;
}

absl::StatusOr<std::unique_ptr<Optimizer>> MakeOptimizer(const Arguments& arguments, double default_lr) {
  std::string name = arguments.Get("optimizer").value_or("adam");
  double lr = default_lr;
  if (arguments.Has("lr")) {
    absl::StatusOr<double> value = GetDouble(arguments, "lr");
    if (!value.ok()) return value.status();
    lr = *value;
  }
  if (name == "adam") return std::make_unique<Adam>(AdamOptions{.learning_rate = lr});
  if (name == "sgd") return std::make_unique<Sgd>(SgdOptions{.learning_rate = lr, .momentum = 0.9});
  return absl::InvalidArgumentError(absl::StrCat("unknown optimizer '", name, "' (expected adam or sgd)"));
}

// Reads an optional integer option into `field`.
template <typename T>
absl::Status ReadSize(const Arguments& arguments, const std::string& name, T& field) {
  if (!arguments.Has(name)) return absl::OkStatus();
  absl::StatusOr<int64_t> value = arguments.GetInt(name);
  if (!value.ok()) return value.status();
  field = static_cast<T>(*value);
  return absl::OkStatus();
}

}  // namespace

void AddExampleOptions(Arguments& arguments) {
  arguments.AddOption("model", "example model: gpt or mlp", "gpt");
  arguments.AddOption("stages", "pipeline stages the model is split into", "1");
  arguments.AddOption("microbatches", "microbatches per step", "4");
  arguments.AddOption("layers", "decoder blocks (gpt) or hidden layers (mlp)");
  arguments.AddOption("dim", "model width (gpt d_model, mlp hidden width)");
  arguments.AddOption("heads", "attention heads (gpt)");
  arguments.AddOption("seq", "sequence length (gpt)");
  arguments.AddOption("batch", "sequences or examples per microbatch");
  arguments.AddFlag("tied", "tie the gpt LM head to the token embedding");
  arguments.AddOption("optimizer", "adam or sgd (momentum 0.9)", "adam");
  arguments.AddOption("lr", "learning rate (default 3e-3 for gpt, 1e-2 for mlp)");
  arguments.AddOption("seed", "seed of parameter initialization and data sampling", "1");
  arguments.AddOption("data", "gpt: a UTF-8 text file or directory (default: /usr/share/common-licenses)");
}

absl::StatusOr<ExampleJob> MakeExampleJob(const Arguments& arguments, std::optional<int32_t> stages_override) {
  std::string model = arguments.Get("model").value_or("gpt");
  TraceOptions trace;
  absl::StatusOr<int64_t> microbatches = arguments.GetInt("microbatches");
  absl::StatusOr<int64_t> stages = arguments.GetInt("stages");
  absl::StatusOr<int64_t> seed = arguments.GetInt("seed");
  for (const auto* value : {&microbatches, &stages, &seed}) {
    if (!value->ok()) return value->status();
  }
  if (stages_override) {
    if (arguments.Has("stages") && *stages != *stages_override) {
      return absl::InvalidArgumentError(absl::StrCat("--stages ", *stages, " does not match the schedule's ",
                                                     *stages_override, " stages"));
    }
    stages = *stages_override;
  }
  trace.num_microbatches = static_cast<int32_t>(*microbatches);
  trace.seed = static_cast<uint64_t>(*seed);
  const uint64_t data_seed = static_cast<uint64_t>(*seed);
  const int32_t num_microbatches = trace.num_microbatches;
  ExampleJob job;

  if (model == "gpt") {
    absl::StatusOr<examples::CharCorpus> corpus = examples::CharCorpus::LoadDefault(arguments.Get("data"));
    if (!corpus.ok()) return corpus.status();
    examples::GptConfig config;
    config.vocab_size = corpus->vocab_size();
    config.num_stages = static_cast<int32_t>(*stages);
    config.num_layers = std::max<int64_t>(config.num_layers, config.num_stages);
    config.tied_head = arguments.Flag("tied");
    for (auto [name, field] : {std::pair{"layers", &config.num_layers}, {"dim", &config.model_dim},
                               {"heads", &config.num_heads}, {"seq", &config.sequence_length},
                               {"batch", &config.batch_size}}) {
      if (absl::Status s = ReadSize(arguments, name, *field); !s.ok()) return s;
    }
    if (absl::Status s = examples::ValidateGptConfig(config); !s.ok()) return s;
    absl::StatusOr<std::unique_ptr<Optimizer>> optimizer = MakeOptimizer(arguments, 3e-3);
    if (!optimizer.ok()) return optimizer.status();
    absl::StatusOr<ir::TrainStep> step = TraceTrainStep("gpt", examples::GptModel(config), **optimizer, trace);
    if (!step.ok()) return step.status();
    job.step = *std::move(step);
    job.description = absl::StrCat("gpt: ", config.num_layers, " layers, d=", config.model_dim, ", ",
                                   config.num_heads, " heads, seq ", config.sequence_length, ", vocab ",
                                   config.vocab_size, ", batch ", config.batch_size, " x ", num_microbatches,
                                   " microbatches, ", config.num_stages, " stages; data: ", corpus->source(),
                                   " (", corpus->size(), " bytes)");
    job.items_per_step = int64_t{config.batch_size} * config.sequence_length * num_microbatches;
    job.item_name = "tokens";
    auto shared = std::make_shared<examples::CharCorpus>(*std::move(corpus));
    auto batches = [shared, config, num_microbatches, data_seed](examples::CharCorpus::Split split, uint64_t index) {
      std::vector<ir::TensorMap> microbatches;
      for (int32_t m = 0; m < num_microbatches; ++m) {
        microbatches.push_back(shared->Batch(split, config.batch_size, config.sequence_length, data_seed,
                                             index * num_microbatches + m));
      }
      return microbatches;
    };
    job.train_batch = [batches](uint64_t index) { return batches(examples::CharCorpus::Split::kTrain, index); };
    job.validation_batch = [batches](uint64_t index) {
      return batches(examples::CharCorpus::Split::kValidation, index);
    };
    return job;
  }
  if (model == "mlp") {
    examples::MlpConfig config;
    config.num_stages = static_cast<int32_t>(*stages);
    config.num_layers = std::max<int64_t>(config.num_layers, config.num_stages);
    for (auto [name, field] : {std::pair{"layers", &config.num_layers}, {"dim", &config.hidden_dim},
                               {"batch", &config.batch_size}}) {
      if (absl::Status s = ReadSize(arguments, name, *field); !s.ok()) return s;
    }
    if (absl::Status s = examples::ValidateMlpConfig(config); !s.ok()) return s;
    absl::StatusOr<std::unique_ptr<Optimizer>> optimizer = MakeOptimizer(arguments, 1e-2);
    if (!optimizer.ok()) return optimizer.status();
    absl::StatusOr<ir::TrainStep> step = TraceTrainStep("mlp", examples::MlpModel(config), **optimizer, trace);
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
        microbatches.push_back(examples::ClassificationBatch(config, data_seed, base + m));
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
  return absl::InvalidArgumentError(absl::StrCat("unknown model '", model, "' (expected gpt or mlp)"));
}

}  // namespace tandem::cli
