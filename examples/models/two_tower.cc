#include "examples/models/two_tower.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "examples/data/synthetic.h"
#include "ir/layers.h"

namespace tandem::examples {
namespace {

// `layers` relu layers spread evenly over `stages` stages, yielding between
// them; returns the last hidden value.
Tensor Tower(Tracer& t, const std::string& name, Tensor h, int64_t in, int64_t width, int64_t layers,
             int32_t stages) {
  int32_t stage = 0;
  for (int64_t layer = 0; layer < layers; ++layer) {
    const int32_t wanted = static_cast<int32_t>(layer * stages / layers);
    if (wanted > stage) {
      h = pipeline_yield(h);
      stage = wanted;
    }
    const ir::Initializer he = init::Normal(std::sqrt(2.0 / static_cast<double>(in)));
    h = relu(layers::Linear(t, absl::StrCat(name, ".fc", layer), h, in, width, he));
    in = width;
  }
  return h;
}

}  // namespace

std::pair<int32_t, int32_t> TowerStages(const TwoTowerConfig& c) {
  if (c.num_stages < 3) return {0, 0};
  const int32_t shared = c.num_stages - 1;
  const double share = static_cast<double>(c.left_layers) / static_cast<double>(c.left_layers + c.right_layers);
  const int32_t left = std::clamp(static_cast<int32_t>(std::lround(shared * share)), 1, shared - 1);
  return {left, shared - left};
}

absl::Status ValidateTwoTowerConfig(const TwoTowerConfig& c) {
  if (c.input_dim < 1 || c.hidden_dim < 1 || c.left_layers < 1 || c.right_layers < 1 || c.head_layers < 1 ||
      c.num_classes < 1 || c.batch_size < 1 || c.num_stages < 1) {
    return absl::InvalidArgumentError("two-tower: every size must be at least 1");
  }
  const auto [left, right] = TowerStages(c);
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
  const auto [left_stages, right_stages] = TowerStages(c);
  if (c.num_stages >= 3) {
    {
      auto branch = t.Branch("left");
      left = Tower(t, "left", left, c.input_dim, c.hidden_dim, c.left_layers, left_stages);
    }
    {
      auto branch = t.Branch("right");
      right = Tower(t, "right", right, c.input_dim, c.hidden_dim, c.right_layers, right_stages);
    }
  } else {
    left = Tower(t, "left", left, c.input_dim, c.hidden_dim, c.left_layers, 1);
    right = Tower(t, "right", right, c.input_dim, c.hidden_dim, c.right_layers, 1);
    if (c.num_stages == 2) right = pipeline_yield(right);
  }
  // The head: the merge stage (one op reading both towers starts it).
  Tensor h = Tower(t, "head", concat({left, right}, 1), 2 * c.hidden_dim, c.hidden_dim, c.head_layers, 1);
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
