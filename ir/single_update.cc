#include "ir/single_update.h"

#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ir/verifier.h"

namespace tandem::ir {
namespace {

// Appends `source`'s nodes to `target`, except the inputs `bound` already
// gives a value; returns the value in `target` of every node of `source`.
std::vector<ValueId> Append(const Graph& source, const std::map<std::string, ValueId>& bound, Graph& target) {
  std::vector<ValueId> value(static_cast<size_t>(source.size()), -1);
  for (ValueId id = 0; id < source.size(); ++id) {
    Node node = source.node(id);
    if (node.op == OpKind::kInput) {
      auto it = bound.find(node.attributes.GetString("name"));
      if (it != bound.end()) {
        value[id] = it->second;
        continue;
      }
    }
    for (ValueId& operand : node.operands) operand = value[operand];
    value[id] = target.Append(std::move(node));
  }
  return value;
}

}  // namespace

absl::StatusOr<Graph> SingleUpdateGraph(const TrainStep& step) {
  if (step.forward_only()) {
    return absl::InvalidArgumentError(absl::StrCat("step '", step.name, "' is forward-only: it has no update"));
  }
  if (step.num_microbatches != 1 || step.num_replicas != 1 || step.asynchronous()) {
    return absl::InvalidArgumentError(absl::StrCat("step '", step.name, "' has ", step.num_microbatches,
                                                   " microbatches and ", step.num_replicas, " replicas",
                                                   step.asynchronous() ? ", asynchronously" : "",
                                                   "; a single update is one microbatch on one replica, synchronous"));
  }
  if (step.FindState(kSingleUpdateStep) != nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("step '", step.name, "' declares state '", kSingleUpdateStep,
                                                   "', the name of the update counter"));
  }
  Graph graph(absl::StrCat(step.name, ".single_update"));
  const std::vector<ValueId> body = Append(step.microbatch, {}, graph);

  // The update reads the body's gradients, the body's parameters, and the
  // counter plus one; its optimizer slots become inputs of their own.
  std::map<std::string, ValueId> bound;
  for (ValueId id : graph.Inputs()) bound[graph.node(id).attributes.GetString("name")] = id;
  for (const Accumulator& accumulator : step.accumulators) {
    const std::optional<ValueId> gradient = step.microbatch.FindOutput(accumulator.source);
    if (!gradient.has_value()) {
      return absl::InternalError(absl::StrCat("accumulator '", accumulator.name, "' sums '", accumulator.source,
                                              "', which the microbatch graph does not output"));
    }
    bound[accumulator.name] = body[*gradient];
  }
  const TensorType scalar{DType::kF32, {}};
  Node counter{.op = OpKind::kInput, .attributes = Attributes{{"name", std::string(kSingleUpdateStep)},
                                                              {"role", std::string("step")}},
               .type = scalar, .phase = Phase::kUpdate};
  const ValueId count = graph.Append(std::move(counter));
  const ValueId one = graph.Append(Node{.op = OpKind::kConstant, .attributes = Attributes{{"value", 1.0}},
                                        .type = scalar, .phase = Phase::kUpdate});
  const ValueId next = graph.Append(Node{.op = OpKind::kAdd, .operands = {count, one}, .type = scalar,
                                         .phase = Phase::kUpdate});
  bound["step"] = next;  // the update graph's step number
  // Clipping: the stages' partial norms, from the same gradients.
  const std::vector<ValueId> norm = Append(step.norm, bound, graph);
  for (const GraphOutput& output : step.norm.outputs()) bound[output.name] = norm[output.value];
  const std::vector<ValueId> update = Append(step.update, bound, graph);

  const std::optional<ValueId> loss = step.microbatch.FindOutput("loss");
  if (!loss.has_value()) return absl::InternalError(absl::StrCat("step '", step.name, "' outputs no loss"));
  graph.AddOutput("loss", body[*loss]);
  for (const GraphOutput& output : step.update.outputs()) graph.AddOutput(output.name, update[output.value]);
  graph.AddOutput(kSingleUpdateStep, next);
  if (absl::Status status = VerifyGraph(graph); !status.ok()) {
    return absl::InternalError(absl::StrCat("the single update of '", step.name, "': ", status.message()));
  }
  return graph;
}

}  // namespace tandem::ir
