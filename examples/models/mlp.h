// A multi-layer perceptron classifier in Tandem's tensor API: hidden layers
// of matmul + bias + relu, a linear output layer and the mean cross-entropy.
// The hidden layers are spread over `num_stages` pipeline stages (evenly, or
// as `layer_stages` says: examples/models/layer_stages.h); the output layer
// and loss go with the last stage.
#ifndef TANDEM_EXAMPLES_MODELS_MLP_H_
#define TANDEM_EXAMPLES_MODELS_MLP_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "ir/trace.h"

namespace tandem::examples {

struct MlpConfig {
  int64_t input_dim = 32;
  int64_t hidden_dim = 64;
  int64_t num_layers = 4;  // hidden layers
  int64_t num_classes = 10;
  int64_t batch_size = 16;  // examples per microbatch
  int32_t num_stages = 1;
  std::vector<int32_t> layer_stages;  // the stage of each hidden layer; empty: an even split
};

absl::Status ValidateMlpConfig(const MlpConfig& config);

// Inputs: "x", f32 [batch_size, input_dim], and "labels", i32 [batch_size].
Tensor MlpLoss(Tracer& tracer, const MlpConfig& config);
ModelFunction MlpModel(const MlpConfig& config);
// The classifier's logits, f32 [batch_size, num_classes], from input "x":
// the model MlpLoss trains, for inference (TraceForwardStep).
Tensor MlpLogits(Tracer& tracer, const MlpConfig& config);
ModelFunction MlpInferenceModel(const MlpConfig& config);
// The model over a dataset that travels with it, for fill jobs: input
// "data", f32 [dataset_batches, batch_size * input_dim], holds
// dataset_batches input batches, "targets", f32 [dataset_batches,
// batch_size], their labels as floats, and input "item", i32 [1], picks the
// batch (ClassificationDataset makes the first two). A fill job keeps the
// dataset on its actors (controller/fill.h), so a piece is told only which
// batch to take. The inference model's output is the batch's logits and
// reads no targets; the training model's loss is MlpLoss's.
ModelFunction MlpDatasetInferenceModel(const MlpConfig& config, int64_t dataset_batches);
ModelFunction MlpDatasetModel(const MlpConfig& config, int64_t dataset_batches);

}  // namespace tandem::examples

#endif  // TANDEM_EXAMPLES_MODELS_MLP_H_
