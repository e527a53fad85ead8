#include "examples/models/mlp.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "examples/models/layer_stages.h"
#include "ir/layers.h"

namespace tandem::examples {

absl::Status ValidateMlpConfig(const MlpConfig& c) {
  if (c.input_dim < 1 || c.hidden_dim < 1 || c.num_layers < 1 || c.num_classes < 1 || c.batch_size < 1 ||
      c.num_stages < 1) {
    return absl::InvalidArgumentError("mlp: every size must be at least 1");
  }
  if (c.num_stages > c.num_layers) {
    return absl::InvalidArgumentError(absl::StrCat("mlp: ", c.num_layers, " hidden layers cannot fill ", c.num_stages,
                                                   " stages (every stage holds at least one); use at least ",
                                                   c.num_stages, " layers"));
  }
  return CheckLayerStages("mlp", c.layer_stages, c.num_layers, c.num_stages);
}

namespace {

// The logits of input `h`: the hidden layers, each on its stage, then the
// output layer.
Tensor LogitsOf(Tracer& t, const MlpConfig& c, Tensor h) {
  int64_t width = c.input_dim;
  for (int64_t layer = 0; layer < c.num_layers; ++layer) {
    if (LayerStage(c.layer_stages, layer, c.num_layers, c.num_stages) > t.stage()) h = pipeline_yield(h);
    // He initialization for relu layers.
    const ir::Initializer he = init::Normal(std::sqrt(2.0 / width));
    h = relu(layers::Linear(t, absl::StrCat("fc", layer), h, width, c.hidden_dim, he));
    width = c.hidden_dim;
  }
  Tensor w = t.Parameter("out.w", {width, c.num_classes}, init::Normal(1.0 / std::sqrt(width)));
  Tensor b = t.Parameter("out.b", {c.num_classes}, init::Zeros());
  return matmul(h, w) + b;
}

Tensor InputX(Tracer& t, const MlpConfig& c) { return t.Input("x", {ir::DType::kF32, {c.batch_size, c.input_dim}}); }

Tensor CrossEntropyLoss(const Tensor& logits, const Tensor& labels) { return mean(cross_entropy(logits, labels)); }

// Row `item` of the dataset input `name`, f32 [batches, width].
Tensor DatasetRow(Tracer& t, const char* name, int64_t batches, int64_t width, const Tensor& item) {
  return embedding(t.Input(name, {ir::DType::kF32, {batches, width}}), item);
}

}  // namespace

Tensor MlpLogits(Tracer& t, const MlpConfig& c) { return LogitsOf(t, c, InputX(t, c)); }

Tensor MlpLoss(Tracer& t, const MlpConfig& c) {
  Tensor logits = LogitsOf(t, c, InputX(t, c));
  Tensor labels = t.Label("labels", {ir::DType::kI32, {c.batch_size}});
  return CrossEntropyLoss(logits, labels);
}

ModelFunction MlpModel(const MlpConfig& config) {
  return [config](Tracer& tracer) { return MlpLoss(tracer, config); };
}

ModelFunction MlpInferenceModel(const MlpConfig& config) {
  return [config](Tracer& tracer) { return MlpLogits(tracer, config); };
}

ModelFunction MlpDatasetInferenceModel(const MlpConfig& config, int64_t dataset_batches) {
  return [config, dataset_batches](Tracer& t) {
    Tensor item = t.Input("item", {ir::DType::kI32, {1}});
    Tensor x = DatasetRow(t, "data", dataset_batches, config.batch_size * config.input_dim, item);
    return LogitsOf(t, config, reshape(x, {config.batch_size, config.input_dim}));
  };
}

ModelFunction MlpDatasetModel(const MlpConfig& config, int64_t dataset_batches) {
  return [config, dataset_batches](Tracer& t) {
    Tensor item = t.Input("item", {ir::DType::kI32, {1}});
    Tensor x = DatasetRow(t, "data", dataset_batches, config.batch_size * config.input_dim, item);
    Tensor targets = DatasetRow(t, "targets", dataset_batches, config.batch_size, item);
    Tensor logits = LogitsOf(t, config, reshape(x, {config.batch_size, config.input_dim}));
    return CrossEntropyLoss(logits, convert(reshape(targets, {config.batch_size}), ir::DType::kI32));
  };
}

}  // namespace tandem::examples
