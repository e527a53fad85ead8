#include "examples/models/layer_stages.h"

#include "absl/strings/str_cat.h"

namespace tandem::examples {

absl::Status CheckLayerStages(absl::string_view model, const std::vector<int32_t>& layer_stages, int64_t num_layers,
                              int32_t num_stages) {
  if (layer_stages.empty()) return absl::OkStatus();
  if (static_cast<int64_t>(layer_stages.size()) != num_layers) {
    return absl::InvalidArgumentError(absl::StrCat(model, ": the stage assignment names ", layer_stages.size(),
                                                   " layers, but the model has ", num_layers));
  }
  int32_t previous = -1;
  for (int64_t layer = 0; layer < num_layers; ++layer) {
    const int32_t stage = layer_stages[layer];
    const bool first_ok = layer > 0 || stage == 0;
    if (!first_ok || stage < previous || stage > previous + 1 || stage >= num_stages) {
      return absl::InvalidArgumentError(absl::StrCat(
          model, ": layer ", layer, " is assigned to stage ", stage, " after stage ", previous,
          "; stages must start at 0, hold contiguous layers in order and stay below ", num_stages));
    }
    previous = stage;
  }
  if (previous != num_stages - 1) {
    return absl::InvalidArgumentError(absl::StrCat(model, ": the stage assignment fills ", previous + 1, " of ",
                                                   num_stages, " stages"));
  }
  return absl::OkStatus();
}

int32_t LayerStage(const std::vector<int32_t>& layer_stages, int64_t layer, int64_t num_layers, int32_t num_stages) {
  if (!layer_stages.empty()) return layer_stages[layer];
  return static_cast<int32_t>(layer * num_stages / num_layers);
}

}  // namespace tandem::examples
