// Which pipeline stage holds each layer of an example model (a GPT block,
// an MLP hidden layer): by default the layers are spread evenly, layer l on
// stage l * S / L; a planner (`tandem plan`) gives its own assignment, one
// stage per layer, that starts at stage 0, never goes back and never skips
// a stage. The first stage also holds what comes before the first layer
// (embeddings, inputs), the last what comes after the last (head, loss).
#ifndef TANDEM_EXAMPLES_MODELS_LAYER_STAGES_H_
#define TANDEM_EXAMPLES_MODELS_LAYER_STAGES_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace tandem::examples {

// InvalidArgument, naming `model` and the first layer that breaks a rule,
// when `layer_stages` is neither empty nor an assignment of `num_layers`
// layers to exactly `num_stages` stages as above.
absl::Status CheckLayerStages(absl::string_view model, const std::vector<int32_t>& layer_stages, int64_t num_layers,
                              int32_t num_stages);

// The stage of `layer`: layer_stages[layer], or the even split when empty.
int32_t LayerStage(const std::vector<int32_t>& layer_stages, int64_t layer, int64_t num_layers, int32_t num_stages);

}  // namespace tandem::examples

#endif  // TANDEM_EXAMPLES_MODELS_LAYER_STAGES_H_
