#include "ir/autodiff.h"

#include <algorithm>
#include <map>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ir/gradients.h"
#include "ir/graph_builder.h"
#include "ir/tensor.h"

namespace tandem::ir {
namespace {

bool IsParameter(const Node& node) { return HasRole(node, InputRole::kParameter); }

bool IsZeros(const Node& node) { return node.op == OpKind::kConstant && node.attributes.GetDouble("value") == 0.0; }

// A gradient that is zero but for pieces along one axis: a concat of
// constant zeros and other values (a slice's gradient, ops/data_movement.cc).
struct PaddedPiece {
  int64_t start = 0, end = 0;  // along the axis
  ValueId value = -1;          // -1: zeros
};
struct Padded {
  int64_t axis = 0;
  std::vector<PaddedPiece> pieces;  // in order, covering the axis
};

std::optional<Padded> AsPadded(const Graph& graph, ValueId id) {
  const Node& node = graph.node(id);
  if (node.op != OpKind::kConcat) return std::nullopt;
  Padded padded{.axis = node.attributes.GetInt("axis")};
  if (padded.axis < 0 || padded.axis >= static_cast<int64_t>(node.type.shape.size())) return std::nullopt;
  int64_t start = 0;
  bool zeros = false;
  for (ValueId operand : node.operands) {
    const Node& part = graph.node(operand);
    const int64_t end = start + part.type.shape[static_cast<size_t>(padded.axis)];
    const bool zero = IsZeros(part);
    zeros = zeros || zero;
    padded.pieces.push_back({start, end, zero ? -1 : operand});
    start = end;
  }
  if (!zeros) return std::nullopt;
  return padded;
}

// The sum of `values` when each is a Padded along the same axis and no two
// have values in the same place: the concat of their values (and zeros
// where none has one), so that nothing of the full size is filled with
// zeros, copied into place and added (three slices of one projection, q, k
// and v, are the common case). Each element of the sum has one non-zero
// term, so it equals that term (a -0.0 term stays -0.0 here; the sum made
// it +0.0). nullopt when `values` are not so.
std::optional<ValueId> SumOfDisjointPieces(GraphBuilder& builder, const std::vector<ValueId>& values) {
  std::vector<PaddedPiece> pieces;
  int64_t axis = -1;
  for (ValueId value : values) {
    std::optional<Padded> padded = AsPadded(builder.graph(), value);
    if (!padded || (axis >= 0 && padded->axis != axis)) return std::nullopt;
    axis = padded->axis;
    for (const PaddedPiece& piece : padded->pieces) {
      if (piece.value >= 0 && piece.end > piece.start) pieces.push_back(piece);
    }
  }
  std::sort(pieces.begin(), pieces.end(), [](const PaddedPiece& a, const PaddedPiece& b) { return a.start < b.start; });
  for (size_t i = 1; i < pieces.size(); ++i) {
    if (pieces[i].start < pieces[i - 1].end) return std::nullopt;  // overlapping: added after all
  }
  // Copies: appending nodes moves the graph's.
  const TensorType type = builder.graph().node(values[0]).type;
  const SourceLocation location = builder.graph().node(values[0]).location;
  std::vector<Tensor> parts;
  int64_t at = 0;
  auto zeros_up_to = [&](int64_t end) {
    if (end <= at) return;
    Shape shape = type.shape;
    shape[static_cast<size_t>(axis)] = end - at;
    parts.push_back(Tensor(&builder, builder.AddConstant(0.0, TensorType{type.dtype, shape}, location)));
  };
  for (const PaddedPiece& piece : pieces) {
    zeros_up_to(piece.start);
    parts.push_back(Tensor(&builder, piece.value));
    at = piece.end;
  }
  zeros_up_to(type.shape[static_cast<size_t>(axis)]);
  if (parts.size() == 1) return parts[0].id();
  return concat(parts, axis).id();
}

// Sums `values` left to right: ((v0 + v1) + v2) + ..., or, where they are
// zero but for disjoint pieces, gathers the pieces (SumOfDisjointPieces).
ValueId SumInOrder(GraphBuilder& builder, const std::vector<ValueId>& values) {
  if (values.size() > 1) {
    if (std::optional<ValueId> gathered = SumOfDisjointPieces(builder, values)) return *gathered;
  }
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

// Keeps the nodes `keep` marks (every operand of a kept node and every
// output kept), in order, and returns each value's new id (-1: dropped).
std::vector<ValueId> KeepOnly(Graph& graph, const std::vector<bool>& keep) {
  std::vector<ValueId> renamed(graph.size(), -1);
  Graph kept(graph.name());
  for (ValueId id = 0; id < graph.size(); ++id) {
    if (!keep[id]) continue;
    Node node = graph.node(id);
    for (ValueId& operand : node.operands) operand = renamed[operand];
    renamed[id] = kept.Append(std::move(node));
  }
  for (const GraphOutput& output : graph.outputs()) kept.AddOutput(output.name, renamed[output.value]);
  graph = std::move(kept);
  return renamed;
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
  // Backward values no gradient needs (the padded pieces that
  // SumOfDisjointPieces gathered) are dropped, so that no device runs them.
  std::vector<bool> keep(graph.size(), false);
  std::fill(keep.begin(), keep.begin() + n, true);
  for (const ParameterGradient& gradient : gradients) keep[gradient.value] = true;
  for (ValueId v = graph.size() - 1; v >= n; --v) {
    if (!keep[v]) continue;
    for (ValueId operand : graph.node(v).operands) keep[operand] = true;
  }
  const std::vector<ValueId> renamed = KeepOnly(graph, keep);
  for (ParameterGradient& gradient : gradients) gradient.value = renamed[gradient.value];
  ClassifyPhases(graph, n);
  return gradients;
}

}  // namespace tandem::ir
