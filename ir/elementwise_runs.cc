#include "ir/elementwise_runs.h"

#include <algorithm>

#include "ir/op_def.h"

namespace tandem::ir {

int64_t RepeatPeriod(const Shape& operand_shape, const Shape& run_shape, bool bias) {
  const int64_t elements = NumElements(operand_shape);
  if (operand_shape == run_shape) return NumElements(run_shape);
  if (elements == 1) return 1;
  if (!bias) return -1;
  // The operand's axes after its leading 1s are the run's last axes.
  size_t first = 0;
  while (first < operand_shape.size() && operand_shape[first] == 1) ++first;
  const size_t kept = operand_shape.size() - first;
  if (kept == 0 || kept > run_shape.size()) return -1;
  if (!std::equal(operand_shape.begin() + static_cast<std::ptrdiff_t>(first), operand_shape.end(),
                  run_shape.end() - static_cast<std::ptrdiff_t>(kept))) {
    return -1;
  }
  return elements;
}

namespace {

bool AllowedDType(DType dtype, const ElementwiseRunRules& rules) {
  return dtype == DType::kF32 || (rules.bf16 && dtype == DType::kBF16);
}

// Whether `node` can be a member of a run of `shape`, given the members so
// far (`members`): its op, its type, and how each operand is read.
bool Fits(const Graph& graph, const Node& node, const Shape& shape, const std::vector<ValueId>& members,
          const ElementwiseRunRules& rules) {
  const OpFamily family = Def(node.op).family;
  if (family != OpFamily::kUnary && family != OpFamily::kBinary) return false;
  if (!AllowedDType(node.type.dtype, rules) || node.type.shape != shape) return false;
  for (ValueId operand : node.operands) {
    if (std::find(members.begin(), members.end(), operand) != members.end()) continue;
    const TensorType& type = graph.type(operand);
    if (!AllowedDType(type.dtype, rules) || RepeatPeriod(type.shape, shape, rules.bias) < 0) return false;
  }
  return true;
}

bool ReadsAny(const Node& node, const std::vector<ValueId>& members) {
  for (ValueId operand : node.operands) {
    if (std::find(members.begin(), members.end(), operand) != members.end()) return true;
  }
  return false;
}

}  // namespace

RunOperands OperandsOf(const Graph& graph, const std::vector<ValueId>& members) {
  RunOperands result;
  for (ValueId member : members) {
    std::vector<int32_t>& sources = result.sources.emplace_back();
    for (ValueId operand : graph.node(member).operands) {
      auto earlier = std::find(members.begin(), members.end(), operand);
      if (earlier != members.end()) {
        sources.push_back(static_cast<int32_t>(earlier - members.begin()));
        continue;
      }
      auto input = std::find(result.inputs.begin(), result.inputs.end(), operand);
      if (input == result.inputs.end()) input = result.inputs.insert(input, operand);
      sources.push_back(-1 - static_cast<int32_t>(input - result.inputs.begin()));
    }
  }
  return result;
}

ElementwiseRuns FindElementwiseRuns(const Graph& graph, const std::vector<bool>& needed,
                                    const ElementwiseRunRules& rules) {
  ElementwiseRuns result;
  result.role.assign(static_cast<size_t>(graph.size()), ElementwiseRuns::kNotInRun);
  std::vector<ValueId> current;
  auto close = [&] {
    if (current.size() >= 2) {
      for (size_t i = 0; i + 1 < current.size(); ++i) result.role[current[i]] = ElementwiseRuns::kInsideRun;
      result.role[current.back()] = static_cast<int32_t>(result.runs.size());
      result.runs.push_back(std::move(current));
    }
    current.clear();
  };
  auto within_bounds = [&](ValueId id) {
    if (rules.max_members != 0 && current.size() + 1 > rules.max_members) return false;
    if (rules.max_inputs == 0) return true;
    std::vector<ValueId> with = current;
    with.push_back(id);
    return OperandsOf(graph, with).inputs.size() <= rules.max_inputs;
  };
  for (ValueId id = 0; id < graph.size(); ++id) {
    if (!needed[id]) continue;
    const Node& node = graph.node(id);
    if (node.op == OpKind::kConstant && node.type.num_elements() == 1) continue;  // evaluated as usual
    if (!current.empty()) {
      const Shape& shape = graph.node(current.front()).type.shape;
      // One value computed from outside the run (an optimizer's bias
      // correction, a learning rate): evaluated as usual, before the run's
      // launch, and read by later members like a constant.
      if (node.type.num_elements() == 1 && NumElements(shape) != 1 && !ReadsAny(node, current)) continue;
      if (Fits(graph, node, shape, current, rules) && within_bounds(id)) {
        current.push_back(id);
        continue;
      }
      close();
    }
    if (node.type.num_elements() >= rules.min_elements && Fits(graph, node, node.type.shape, current, rules) &&
        within_bounds(id)) {
      current.push_back(id);
    }
  }
  close();
  return result;
}

}  // namespace tandem::ir
