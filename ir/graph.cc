#include "ir/graph.h"

#include "absl/strings/str_cat.h"

namespace tandem::ir {

char PhaseLetter(Phase phase) {
  switch (phase) {
    case Phase::kForward: return 'F';
    case Phase::kBackwardInput: return 'I';
    case Phase::kBackwardWeight: return 'W';
    case Phase::kUpdate: return 'U';
  }
  return '?';
}

std::optional<Phase> PhaseFromLetter(char letter) {
  for (Phase phase : {Phase::kForward, Phase::kBackwardInput, Phase::kBackwardWeight,
                      Phase::kUpdate}) {
    if (PhaseLetter(phase) == letter) return phase;
  }
  return std::nullopt;
}

std::string SourceLocation::ToString() const {
  if (!known()) return "<unknown>";
  return absl::StrCat(file, ":", line);
}

SourceLocation MakeSourceLocation(absl::string_view path, int32_t line) {
  size_t cut = path.rfind('/');
  if (cut != absl::string_view::npos && cut > 0) {
    size_t parent = path.rfind('/', cut - 1);
    if (parent != absl::string_view::npos) path.remove_prefix(parent + 1);
  }
  return SourceLocation{std::string(path), line};
}

ValueId Graph::Append(Node node) {
  nodes_.push_back(std::move(node));
  return static_cast<ValueId>(nodes_.size() - 1);
}

std::optional<ValueId> Graph::FindOutput(absl::string_view name) const {
  for (const GraphOutput& output : outputs_) {
    if (output.name == name) return output.value;
  }
  return std::nullopt;
}

std::vector<ValueId> Graph::Inputs() const {
  std::vector<ValueId> inputs;
  for (ValueId id = 0; id < size(); ++id) {
    if (nodes_[id].op == OpKind::kInput) inputs.push_back(id);
  }
  return inputs;
}

std::optional<ValueId> Graph::FindInput(absl::string_view name) const {
  for (ValueId id = 0; id < size(); ++id) {
    const Node& node = nodes_[id];
    if (node.op == OpKind::kInput && node.attributes.GetString("name") == name) return id;
  }
  return std::nullopt;
}

absl::string_view InputRoleName(InputRole role) {
  switch (role) {
    case InputRole::kData: return "data";
    case InputRole::kLabel: return "label";
    case InputRole::kParameter: return "parameter";
    case InputRole::kOptimizerState: return "optimizer_state";
    case InputRole::kAccumulator: return "accumulator";
    case InputRole::kGradient: return "gradient";
    case InputRole::kStep: return "step";
    case InputRole::kGradientNorm: return "gradient_norm";
    case InputRole::kCache: return "cache";
  }
  return "";
}

bool HasRole(const Node& node, InputRole role) {
  return node.op == OpKind::kInput && node.attributes.GetString("role") == InputRoleName(role);
}

std::string DescribeValue(const Graph& graph, ValueId id) {
  const Node& node = graph.node(id);
  std::string where = absl::StrCat("%", id, " = ", OpName(node.op));
  if (node.location.known()) absl::StrAppend(&where, " at ", node.location.ToString());
  return where;
}

}  // namespace tandem::ir
