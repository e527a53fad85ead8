// What running a graph needs that follows from the graph alone: the plan
// every backend's Compile keeps with its graph (backends/device.h), the
// release point of each value, and the check of an input's value.
#ifndef TANDEM_IR_GRAPH_PLAN_H_
#define TANDEM_IR_GRAPH_PLAN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "ir/graph.h"

namespace tandem::ir {

// What running a graph needs that follows from the graph alone, worked out
// once (a device's Compile keeps it with the graph): the outputs computed,
// the nodes they need, and the node after which each value is released
// (LastUses). Plain value type; meaningful only with the graph it was made
// for.
struct GraphPlan {
  std::vector<GraphOutput> outputs;
  std::vector<bool> needed;
  std::vector<int32_t> last_use;
};
// The plan of `graph`; with `wanted`, for only those outputs.
GraphPlan PlanGraph(const Graph& graph, const std::vector<std::string>* wanted = nullptr);

// What every evaluator of graphs (the CPU backend's RunGraph, the CUDA
// runner, the profilers)
// shares:
// - the node after whose evaluation each value is released: the last node
//   in program order that reads it, graph.size() for an output, -1 for a
//   value nothing reads (released at once). With `needed`, only the needed
//   nodes count as readers.
std::vector<int32_t> LastUses(const Graph& graph, const std::vector<GraphOutput>& outputs,
                              const std::vector<bool>* needed = nullptr);
// - the check of an input's value: InvalidArgument "graph @g: no value for
//   input 'x'" when `given` is null, "graph @g: input 'x' must be f32[2],
//   got f32[3]" when its type differs from input node `id`'s.
absl::Status CheckInputValue(const Graph& graph, ValueId id, const TensorType* given);

}  // namespace tandem::ir

#endif  // TANDEM_IR_GRAPH_PLAN_H_
