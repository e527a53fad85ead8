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

}  // namespace

Tensor MlpLogits(Tracer& t, const MlpConfig& c) { return LogitsOf(t, c, InputX(t, c)); }

Tensor MlpLoss(Tracer& t, const MlpConfig& c) {
  Tensor logits = LogitsOf(t, c, InputX(t, c));
  Tensor labels = t.Label("labels", {ir::DType::kI32, {c.batch_size}});
  return mean(cross_entropy(logits, labels));
}

ModelFunction MlpModel(const MlpConfig& config) {
  return [config](Tracer& tracer) { return MlpLoss(tracer, config); };
}

ModelFunction MlpInferenceModel(const MlpConfig& config) {
  return [config](Tracer& tracer) { return MlpLogits(tracer, config); };
}

ModelFunction MlpDatasetInferenceModel(const MlpConfig& config, int64_t dataset_batches) {
  return [config, dataset_batches](Tracer& t) {
    const int64_t row = config.batch_size * config.input_dim;
    Tensor data = t.Parameter("data", {dataset_batches, row}, init::Normal(1.0));
    Tensor item = t.Input("item", {ir::DType::kI32, {1}});
    return LogitsOf(t, config, reshape(embedding(data, item), {config.batch_size, config.input_dim}));
  };
}

}  // namespace tandem::examples
