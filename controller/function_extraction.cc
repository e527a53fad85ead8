#include "controller/function_extraction.h"

#include <map>

#include "absl/strings/str_cat.h"

namespace tandem::controller {

ExtractedFunction ExtractFunction(const ir::Graph& graph, const std::string& name,
                                  const std::vector<bool>& member, const std::vector<ir::ValueId>& exports) {
  ExtractedFunction extracted;
  extracted.function.name = name;
  ir::Graph& out = extracted.function.graph;
  out = ir::Graph(name);
  std::map<ir::ValueId, ir::ValueId> local;  // original -> function value

  // Inputs first, in order of first use, so that a function's signature
  // reads in dataflow order.
  auto bind_input = [&](ir::ValueId original) {
    if (local.count(original)) return;
    const ir::Node& source = graph.node(original);
    ir::Node input;
    input.op = ir::OpKind::kInput;
    input.type = source.type;
    input.stage = source.stage;
    input.location = source.location;
    if (source.op == ir::OpKind::kInput) {
      input.attributes = source.attributes;
    } else {
      input.attributes = ir::Attributes{{"name", absl::StrCat("%", original)}, {"role", std::string("value")}};
    }
    local[original] = out.Append(std::move(input));
    extracted.inputs.push_back(original);
  };
  for (ir::ValueId id = 0; id < graph.size(); ++id) {
    if (!member[id]) continue;
    const ir::Node& node = graph.node(id);
    if (node.op == ir::OpKind::kInput) {
      bind_input(id);
      continue;
    }
    for (ir::ValueId operand : node.operands) {
      if (!member[operand] && graph.node(operand).op != ir::OpKind::kConstant) bind_input(operand);
    }
  }
  // An exported input passes through (e.g. a weight version shifted into
  // the next stash).
  for (ir::ValueId value : exports) {
    if (!member[value] && graph.node(value).op == ir::OpKind::kInput) bind_input(value);
  }
  for (ir::ValueId id = 0; id < graph.size(); ++id) {
    if (!member[id] || graph.node(id).op == ir::OpKind::kInput) continue;
    ir::Node node = graph.node(id);
    for (ir::ValueId& operand : node.operands) {
      auto it = local.find(operand);
      if (it == local.end()) {  // a constant from outside: recompute it here
        it = local.emplace(operand, out.Append(graph.node(operand))).first;
      }
      operand = it->second;
    }
    local[id] = out.Append(std::move(node));
  }
  for (ir::ValueId value : exports) {
    out.AddOutput(absl::StrCat("%", value), local.at(value));
    extracted.outputs.push_back(value);
  }
  return extracted;
}

}  // namespace tandem::controller
