// Cutting a traced graph into the functions actors run.
#ifndef TANDEM_CONTROLLER_FUNCTION_EXTRACTION_H_
#define TANDEM_CONTROLLER_FUNCTION_EXTRACTION_H_

#include <string>
#include <vector>

#include "ir/actor_program.h"
#include "ir/graph.h"

namespace tandem::controller {

// A function cut out of a larger graph, and how its inputs and outputs map
// back to the values of that graph.
struct ExtractedFunction {
  ir::Function function;
  // The original values bound to the function's inputs, in order. Original
  // input nodes (parameters, data) keep their name; other values come in as
  // inputs named "%<id>".
  std::vector<ir::ValueId> inputs;
  // The original values the function's outputs carry, in order.
  std::vector<ir::ValueId> outputs;
  bool empty() const { return function.graph.size() == static_cast<int32_t>(inputs.size()) && outputs.empty(); }
};

// Extracts the nodes of `graph` for which member[id] is true, in program
// order. Operands from outside become inputs, except constants, which are
// recomputed inside (a scalar fill costs less than a transfer). `exports`
// lists the values to output, in order: members, or inputs of `graph`,
// which pass through.
ExtractedFunction ExtractFunction(const ir::Graph& graph, const std::string& name,
                                  const std::vector<bool>& member, const std::vector<ir::ValueId>& exports);

}  // namespace tandem::controller

#endif  // TANDEM_CONTROLLER_FUNCTION_EXTRACTION_H_
