#include "ir/autodiff.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "ir/gradients.h"
#include "ir/graph_builder.h"
#include "ir/tensor.h"

namespace tandem::ir {
namespace {

bool IsParameter(const Node& node) { return HasRole(node, InputRole::kParameter); }

// Sums `values` left to right: ((v0 + v1) + v2) + ...
ValueId SumInOrder(GraphBuilder& builder, const std::vector<ValueId>& values) {
  Tensor total(&builder, values[0]);
  for (size_t i = 1; i < values.size(); ++i) total = total + Tensor(&builder, values[i]);
  return total.id();
}

// Groups contributions by the stage that produced them, keeping first-seen
// order of stages and of contributions within a stage.
std::vector<std::pair<int32_t, std::vector<ValueId>>> GroupByStage(
    const Graph& graph, const std::vector<ValueId>& contributions) {
  std::vector<std::pair<int32_t, std::vector<ValueId>>> groups;
  for (ValueId c : contributions) {
    int32_t stage = graph.node(c).stage;
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == stage; });
    if (it == groups.end()) {
      groups.push_back({stage, {c}});
    } else {
      it->second.push_back(c);
    }
  }
  return groups;
}

// Sums each stage's contributions within that stage.
std::vector<ValueId> PartialSums(GraphBuilder& builder, const std::vector<ValueId>& contributions,
                                 const SourceLocation& location) {
  std::vector<ValueId> partials;
  for (const auto& [stage, values] : GroupByStage(builder.graph(), contributions)) {
    builder.set_stage(stage);
    builder.set_location_override(location);
    partials.push_back(SumInOrder(builder, values));
  }
  return partials;
}

// Marks each backward op I or W (see the header).
void ClassifyPhases(Graph& graph, ValueId first_backward) {
  const int32_t n = graph.size();
  std::vector<bool> input_gradient(n, false);
  for (ValueId c = first_backward; c < n; ++c) {
    for (ValueId operand : graph.node(c).operands) {
      if (operand >= first_backward && graph.node(operand).stage != graph.node(c).stage) {
        input_gradient[operand] = true;
      }
    }
  }
  for (ValueId b = n - 1; b >= first_backward; --b) {
    if (!input_gradient[b]) continue;
    for (ValueId operand : graph.node(b).operands) {
      if (operand >= first_backward && graph.node(operand).stage == graph.node(b).stage) {
        input_gradient[operand] = true;
      }
    }
  }
  for (ValueId b = first_backward; b < n; ++b) {
    graph.mutable_node(b).phase = input_gradient[b] ? Phase::kBackwardInput : Phase::kBackwardWeight;
  }
}

}  // namespace

absl::StatusOr<std::vector<ParameterGradient>> AppendBackward(Graph& graph, ValueId loss) {
  const int32_t n = graph.size();
  if (loss < 0 || loss >= n) return absl::InvalidArgumentError("autodiff: loss is not a value of the graph");
  const Node& loss_node = graph.node(loss);
  if (loss_node.type != TensorType{DType::kF32, {}}) {
    return absl::InvalidArgumentError(absl::StrCat(
        loss_node.location.ToString(), ": the loss must be an f32 scalar, got ", TypeToString(loss_node.type)));
  }

  // Values that depend on a parameter, and values the loss depends on.
  std::vector<bool> active(n, false);
  for (ValueId v = 0; v < n; ++v) {
    const Node& node = graph.node(v);
    if (IsParameter(node)) {
      active[v] = true;
    } else if (node.op != OpKind::kInput && IsComputedFloat(node.type.dtype)) {
      for (ValueId operand : node.operands) active[v] = active[v] || active[operand];
    }
  }
  std::vector<bool> needed(n, false);
  needed[loss] = true;
  for (ValueId v = loss; v >= 0; --v) {
    if (!needed[v]) continue;
    for (ValueId operand : graph.node(v).operands) needed[operand] = true;
  }
  if (!active[loss]) {
    return absl::InvalidArgumentError(
        absl::StrCat(loss_node.location.ToString(), ": the loss does not depend on any parameter"));
  }

  GraphBuilder builder(&graph);
  builder.set_phase(Phase::kBackwardInput);
  std::vector<std::vector<ValueId>> contributions(n);
  builder.set_stage(loss_node.stage);
  builder.set_location_override(loss_node.location);
  contributions[loss].push_back(builder.AddConstant(1.0, TensorType{DType::kF32, {}}, {}));

  std::map<ValueId, std::vector<ValueId>> parameter_contributions;
  for (ValueId v = loss; v >= 0; --v) {
    if (!active[v] || !needed[v] || contributions[v].empty()) continue;
    const Node node = graph.node(v);
    if (IsParameter(node)) {
      parameter_contributions[v] = contributions[v];
      continue;
    }
    std::vector<ValueId> partials = PartialSums(builder, contributions[v], node.location);
    builder.set_stage(node.stage);
    builder.set_location_override(node.location);
    Tensor cotangent(&builder, SumInOrder(builder, partials));
    std::vector<bool> wanted;
    for (ValueId operand : node.operands) wanted.push_back(active[operand]);
    absl::StatusOr<std::vector<Tensor>> pulled = PullBack(builder, v, cotangent, wanted);
    if (!pulled.ok()) return pulled.status();
    for (size_t i = 0; i < pulled->size(); ++i) {
      if ((*pulled)[i].valid()) contributions[node.operands[i]].push_back((*pulled)[i].id());
    }
    if (!builder.ok()) return builder.status();
  }

  std::vector<ParameterGradient> gradients;
  for (const auto& [parameter, values] : parameter_contributions) {
    const Node node = graph.node(parameter);  // a copy: the loop appends nodes
    std::string name = node.attributes.GetString("name");
    auto groups = GroupByStage(graph, values);
    std::sort(groups.begin(), groups.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& [stage, stage_values] : groups) {
      builder.set_stage(stage);
      builder.set_location_override(node.location);
      gradients.push_back({name, stage, SumInOrder(builder, stage_values)});
    }
  }
  if (!builder.ok()) return builder.status();
  ClassifyPhases(graph, n);
  return gradients;
}

}  // namespace tandem::ir
