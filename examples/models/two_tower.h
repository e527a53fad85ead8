// A two-tower classifier: two encoders of unequal depth over two inputs,
// merged by a small head. The shape of DLRM-style and multi-modal models,
// and the model behind branch-parallel (GraphPipe) pipelines: the towers
// share nothing until the head, so with three or more stages they are
// traced as two branches (Tracer::Branch) whose stages run side by side,
// and the head is the stage that merges them.
//
// Its layers, in order: the left tower's, the right tower's, the head's.
// Each has a stage (TwoTowerLayerStages): by default, with 1 stage
// everything is stage 0; with 2, both towers are stage 0 and the head stage
// 1 (a chain); with S >= 3, the head is the last stage and the towers share
// the other S - 1 by depth (each at least one, each tower's layers spread
// evenly over its stages): left tower stages first, then the right tower's.
// A planner gives its own assignment (examples/models/layer_stages.h).
// When the towers hold stages of their own (the left's before the right's,
// both before the head's), they are traced as two branches and the stage
// graph is two chains into the head; otherwise the layers form a chain of
// stages in the order above.
#ifndef TANDEM_EXAMPLES_MODELS_TWO_TOWER_H_
#define TANDEM_EXAMPLES_MODELS_TWO_TOWER_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "ir/initial_state.h"
#include "ir/trace.h"

namespace tandem::examples {

struct TwoTowerConfig {
  int64_t input_dim = 32;
  int64_t hidden_dim = 64;
  int64_t left_layers = 4;   // hidden layers of the tower over "left"
  int64_t right_layers = 3;  // ... and over "right"
  int64_t head_layers = 3;   // hidden layers of the head, over both towers' outputs
  int64_t num_classes = 10;
  int64_t batch_size = 16;  // examples per microbatch
  int32_t num_stages = 1;
  // The stage of each layer (left, right, head); empty: the default above.
  std::vector<int32_t> layer_stages;
};

// InvalidArgument naming the problem for a size below 1, towers with fewer
// layers than the stages they get by default, or layer stages that are not
// an assignment of the model's layers to its stages.
absl::Status ValidateTwoTowerConfig(const TwoTowerConfig& config);

// The stage of each layer: config.layer_stages, or the default above.
std::vector<int32_t> TwoTowerLayerStages(const TwoTowerConfig& config);
// Whether those stages trace the towers as branches (see above).
bool TwoTowerBranches(const TwoTowerConfig& config);

// Inputs: "left" and "right", f32 [batch_size, input_dim] each, and
// "labels", i32 [batch_size].
Tensor TwoTowerLoss(Tracer& tracer, const TwoTowerConfig& config);
ModelFunction TwoTowerModel(const TwoTowerConfig& config);

// A synthetic task for it: both inputs from a standard normal, labelled by
// the argmax of a fixed random linear teacher over their concatenation.
// The same (config, seed, index) gives the same batch.
ir::TensorMap TwoTowerBatch(const TwoTowerConfig& config, uint64_t seed, uint64_t index);

}  // namespace tandem::examples

#endif  // TANDEM_EXAMPLES_MODELS_TWO_TOWER_H_
