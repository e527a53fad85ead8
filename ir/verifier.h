// The verifier: checks that a graph or a training step is well formed.
// Run it after every pass and on everything parsed from text.
#ifndef TANDEM_IR_VERIFIER_H_
#define TANDEM_IR_VERIFIER_H_

#include "absl/status/status.h"
#include "ir/graph.h"
#include "ir/train_step.h"

namespace tandem::ir {

// Checks, naming the value, op and source location of the first problem:
// operands name earlier values; each op has its attributes, of the right
// kinds; each result type is what the op's shape rule gives; inputs have a
// name and role, unique names; outputs exist with unique names; and a
// forward op never reads a forward value of a later stage.
absl::Status VerifyGraph(const Graph& graph);

// VerifyGraph on both graphs, plus: every parameter or optimizer-state input
// has a state entry of that role and type; every accumulator sums an output
// of the microbatch graph and feeds an input of the update graph; every
// update output names a state tensor; stages are within num_stages.
absl::Status VerifyTrainStep(const TrainStep& step);

}  // namespace tandem::ir

#endif  // TANDEM_IR_VERIFIER_H_
