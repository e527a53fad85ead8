// Runs of elementwise nodes that a backend evaluates as one pass over
// memory instead of one per node: a chain such as a linear layer's bias add
// and GELU, a residual add, or an optimizer's update. Found from the graph
// alone, once, when a backend compiles it (beside ir/graph_plan.h); each
// backend says by its rules what it can evaluate together (the reference
// interpreter: f32 over large tensors; the CUDA runner: f32 and bf16 of any
// size, with a bias repeated along leading axes).
//
// A run is consecutive needed nodes in program order (nodes of one value
// between them that read none of the run's members, constants and scalars
// such as an optimizer's bias correction, evaluate as usual before the run
// and do not break it) of the unary and
// binary families (ir/op_def.h), every one of the run's shape, whose
// operands are earlier members or values from outside the run of the
// run's shape, one element, or (rules.bias) a shape repeated along the
// run's leading axes. Evaluating a run computes each element through the
// same functions in the same order as node by node, so the bits are the
// same; only the members read after the run (or outputs) need storing.
#ifndef TANDEM_IR_ELEMENTWISE_RUNS_H_
#define TANDEM_IR_ELEMENTWISE_RUNS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ir/graph.h"

namespace tandem::ir {

// What a backend can evaluate as one run.
struct ElementwiseRunRules {
  // A run starts only at a node of at least this many elements.
  int64_t min_elements = 1;
  // Members and operands may be bf16 (else f32 only).
  bool bf16 = false;
  // Operands may repeat along the run's leading axes: a bias [d] added to
  // [rows, d] (else only the run's shape or one element).
  bool bias = false;
  // At most this many members, and distinct operands from outside the run
  // (0: no bound); a node past either starts the next run.
  size_t max_members = 0;
  size_t max_inputs = 0;
};

struct ElementwiseRuns {
  // What a node is to the runs.
  static constexpr int32_t kNotInRun = -1;
  static constexpr int32_t kInsideRun = -2;  // a member but the last: evaluated with the run

  // Each run's members in program order; at least two.
  std::vector<std::vector<ValueId>> runs;
  // By value id: the index into `runs` of the run the node is the last
  // member of, kInsideRun for its other members, kNotInRun for the rest.
  std::vector<int32_t> role;
};

// The runs of `graph` under `rules`, among the nodes `needed` marks.
ElementwiseRuns FindElementwiseRuns(const Graph& graph, const std::vector<bool>& needed,
                                    const ElementwiseRunRules& rules);

// Where the members of a run read their operands, as an evaluator of the
// run needs it: the run's inputs (the distinct values from outside it, in
// the order the members first read them), and for member m's operand k,
// sources[m][k]: the index of an earlier member (>= 0), or -1 - i for
// inputs[i].
struct RunOperands {
  std::vector<ValueId> inputs;
  std::vector<std::vector<int32_t>> sources;
};
RunOperands OperandsOf(const Graph& graph, const std::vector<ValueId>& members);

// How an operand of `operand_shape` from outside a run of `run_shape` is
// read at the run's flat element i: at i % period. `run elements` for an
// operand of the run's shape, 1 for one element, the operand's elements
// for a bias repeated along leading axes; -1 when it is none of these (a
// bias only where `bias`).
int64_t RepeatPeriod(const Shape& operand_shape, const Shape& run_shape, bool bias);

}  // namespace tandem::ir

#endif  // TANDEM_IR_ELEMENTWISE_RUNS_H_
