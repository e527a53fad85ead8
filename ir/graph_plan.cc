#include "ir/graph_plan.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace tandem::ir {

GraphPlan PlanGraph(const Graph& graph, const std::vector<std::string>* wanted) {
  const int32_t n = graph.size();
  GraphPlan plan;
  for (const GraphOutput& output : graph.outputs()) {
    if (wanted == nullptr || std::find(wanted->begin(), wanted->end(), output.name) != wanted->end()) {
      plan.outputs.push_back(output);
    }
  }
  plan.needed.assign(n, wanted == nullptr);
  for (const GraphOutput& output : plan.outputs) plan.needed[output.value] = true;
  for (ValueId id = n - 1; id >= 0; --id) {
    if (!plan.needed[id]) continue;
    for (ValueId operand : graph.node(id).operands) plan.needed[operand] = true;
  }
  plan.last_use = LastUses(graph, plan.outputs, &plan.needed);
  return plan;
}

std::vector<int32_t> LastUses(const Graph& graph, const std::vector<GraphOutput>& outputs,
                              const std::vector<bool>* needed) {
  const int32_t n = graph.size();
  std::vector<int32_t> last_use(n, -1);
  for (ValueId id = 0; id < n; ++id) {
    if (needed != nullptr && !(*needed)[id]) continue;
    for (ValueId operand : graph.node(id).operands) last_use[operand] = id;
  }
  for (const GraphOutput& output : outputs) last_use[output.value] = n;
  return last_use;
}

absl::Status CheckInputValue(const Graph& graph, ValueId id, const TensorType* given) {
  const Node& node = graph.node(id);
  const std::string& name = node.attributes.GetString("name");
  if (given == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("graph @", graph.name(), ": no value for input '", name, "'"));
  }
  if (*given != node.type) {
    return absl::InvalidArgumentError(absl::StrCat("graph @", graph.name(), ": input '", name, "' must be ",
                                                   TypeToString(node.type), ", got ", TypeToString(*given)));
  }
  return absl::OkStatus();
}

}  // namespace tandem::ir
