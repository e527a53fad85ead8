#include "examples/models/two_tower.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "examples/data/synthetic.h"
#include "examples/models/layer_stages.h"
#include "ir/initial_state.h"
#include "ir/layers.h"

namespace tandem::examples {
namespace {

// Relu layers `name`.fc0, ... at `stages` (one per layer), from stage
// `stage`: a pipeline_yield before each layer whose stage is past the
// current one. Returns the last hidden value; `stage` ends at the last
// layer's.
Tensor Tower(Tracer& t, const std::string& name, Tensor h, int64_t in, int64_t width,
             const std::vector<int32_t>& stages, int32_t& stage) {
  for (size_t layer = 0; layer < stages.size(); ++layer) {
    if (stages[layer] > stage) {
      h = pipeline_yield(h);
      stage = stages[layer];
    }
    const ir::Initializer he = init::Normal(std::sqrt(2.0 / static_cast<double>(in)));
    h = relu(layers::Linear(t, absl::StrCat(name, ".fc", layer), h, in, width, he));
    in = width;
  }
  return h;
}

// The stages of the left and right towers by default: both 0 with fewer
// than 3 stages.
std::pair<int32_t, int32_t> DefaultTowerStages(const TwoTowerConfig& c) {
  if (c.num_stages < 3) return {0, 0};
  const int32_t shared = c.num_stages - 1;
  const double share = static_cast<double>(c.left_layers) / static_cast<double>(c.left_layers + c.right_layers);
  const int32_t left = std::clamp(static_cast<int32_t>(std::lround(shared * share)), 1, shared - 1);
  return {left, shared - left};
}

// The left tower's, the right tower's and the head's layer stages.
struct TowerLayout {
  std::vector<int32_t> left, right, head;
};

TowerLayout Layout(const TwoTowerConfig& c) {
  const std::vector<int32_t> stages = TwoTowerLayerStages(c);
  const auto at = [&](int64_t from, int64_t count) {
    return std::vector<int32_t>(stages.begin() + from, stages.begin() + from + count);
  };
  return {at(0, c.left_layers), at(c.left_layers, c.right_layers), at(c.left_layers + c.right_layers, c.head_layers)};
}

}  // namespace

std::vector<int32_t> TwoTowerLayerStages(const TwoTowerConfig& c) {
  if (!c.layer_stages.empty()) return c.layer_stages;
  const auto [left, right] = DefaultTowerStages(c);
  std::vector<int32_t> stages;
  for (int64_t l = 0; l < c.left_layers; ++l) stages.push_back(static_cast<int32_t>(l * std::max(left, 1) / c.left_layers));
  for (int64_t l = 0; l < c.right_layers; ++l) {
    stages.push_back(left + static_cast<int32_t>(l * std::max(right, 1) / c.right_layers));
  }
  for (int64_t l = 0; l < c.head_layers; ++l) stages.push_back(c.num_stages - 1);
  return stages;
}

bool TwoTowerBranches(const TwoTowerConfig& c) {
  const TowerLayout layout = Layout(c);
  return layout.left.back() < layout.right.front() && layout.right.back() < layout.head.front();
}

absl::Status ValidateTwoTowerConfig(const TwoTowerConfig& c) {
  if (c.input_dim < 1 || c.hidden_dim < 1 || c.left_layers < 1 || c.right_layers < 1 || c.head_layers < 1 ||
      c.num_classes < 1 || c.batch_size < 1 || c.num_stages < 1) {
    return absl::InvalidArgumentError("two-tower: every size must be at least 1");
  }
  if (!c.layer_stages.empty()) {
    return CheckLayerStages("two-tower", c.layer_stages, c.left_layers + c.right_layers + c.head_layers,
                            c.num_stages);
  }
  const auto [left, right] = DefaultTowerStages(c);
  if (left > c.left_layers || right > c.right_layers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "two-tower: ", c.num_stages, " stages give the towers ", left, " and ", right, " stages, but they have ",
        c.left_layers, " and ", c.right_layers, " layers (every stage holds at least one): use deeper towers "
        "(--towers) or fewer stages"));
  }
  return absl::OkStatus();
}

Tensor TwoTowerLoss(Tracer& t, const TwoTowerConfig& c) {
  const ir::TensorType input{ir::DType::kF32, {c.batch_size, c.input_dim}};
  Tensor left = t.Input("left", input);
  Tensor right = t.Input("right", input);
  const TowerLayout layout = Layout(c);
  int32_t stage = 0;
  if (TwoTowerBranches(c)) {
    // Each branch opens its first stage, and the head's first op opens the
    // merge stage.
    {
      auto branch = t.Branch("left");
      stage = layout.left.front();
      left = Tower(t, "left", left, c.input_dim, c.hidden_dim, layout.left, stage);
    }
    {
      auto branch = t.Branch("right");
      stage = layout.right.front();
      right = Tower(t, "right", right, c.input_dim, c.hidden_dim, layout.right, stage);
    }
    stage = layout.head.front();
  } else {
    left = Tower(t, "left", left, c.input_dim, c.hidden_dim, layout.left, stage);
    if (layout.right.front() > stage) {
      right = pipeline_yield(right);
      stage = layout.right.front();
    }
    right = Tower(t, "right", right, c.input_dim, c.hidden_dim, layout.right, stage);
    if (layout.head.front() > stage) {
      right = pipeline_yield(right);
      stage = layout.head.front();
    }
  }
  Tensor h = Tower(t, "head", concat({left, right}, 1), 2 * c.hidden_dim, c.hidden_dim, layout.head, stage);
  Tensor w = t.Parameter("out.w", {c.hidden_dim, c.num_classes}, init::Normal(1.0 / std::sqrt(c.hidden_dim)));
  Tensor b = t.Parameter("out.b", {c.num_classes}, init::Zeros());
  Tensor labels = t.Label("labels", {ir::DType::kI32, {c.batch_size}});
  return mean(cross_entropy(matmul(h, w) + b, labels));
}

ModelFunction TwoTowerModel(const TwoTowerConfig& config) {
  return [config](Tracer& tracer) { return TwoTowerLoss(tracer, config); };
}

ir::TensorMap TwoTowerBatch(const TwoTowerConfig& c, uint64_t seed, uint64_t index) {
  using Kind = ir::Initializer::Kind;
  // MakeExampleJob bounds the sizes: these are small.
  const ir::TensorType input{ir::DType::kF32, {c.batch_size, c.input_dim}};
  ir::HostTensor left = *ir::MakeTensor(input, {Kind::kNormal, 0.0, 1.0, seed * 7919 + 2 * index + 1});
  ir::HostTensor right = *ir::MakeTensor(input, {Kind::kNormal, 0.0, 1.0, seed * 7919 + 2 * index + 2});
  // The teacher sees both inputs side by side.
  ir::HostTensor both({ir::DType::kF32, {c.batch_size, 2 * c.input_dim}});
  for (int64_t b = 0; b < c.batch_size; ++b) {
    std::copy_n(left.f32() + b * c.input_dim, c.input_dim, both.f32() + b * 2 * c.input_dim);
    std::copy_n(right.f32() + b * c.input_dim, c.input_dim, both.f32() + (b * 2 + 1) * c.input_dim);
  }
  const std::vector<int32_t> labels = TeacherLabels(both, c.num_classes, seed + 17);
  return {{"left", left}, {"right", right}, {"labels", ir::HostTensor::FromInts({c.batch_size}, labels)}};
}

}  // namespace tandem::examples
