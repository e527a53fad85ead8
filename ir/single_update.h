// One optimizer update on one microbatch as a single graph: the training
// step of a fill job's piece (controller/fill.h), which must run whole or
// not at all.
//
// SingleUpdateGraph(step) joins `step`'s microbatch graph and its update
// graph: the update reads the body's gradients where it read the
// accumulators (with one microbatch an accumulator is its one gradient, and
// the update's 1/M is 1), and its step number from the state scalar
// kSingleUpdateStep plus one. Inputs: the step's parameters and optimizer
// state, kSingleUpdateStep (f32 [], 0 before the first update) and the
// microbatch's data and labels. Outputs, in order: "loss", then the new
// value of every state tensor the update writes and of kSingleUpdateStep,
// each named like the state it replaces. Running it once gives the bits of
// cpu::RunReferenceStep on that microbatch.
#ifndef TANDEM_IR_SINGLE_UPDATE_H_
#define TANDEM_IR_SINGLE_UPDATE_H_

#include "absl/status/statusor.h"
#include "ir/graph.h"
#include "ir/train_step.h"

namespace tandem::ir {

// The state scalar that counts the graph's updates.
inline constexpr char kSingleUpdateStep[] = "step";

// InvalidArgument unless `step` trains one microbatch on one replica,
// synchronously, and declares no state named kSingleUpdateStep.
absl::StatusOr<Graph> SingleUpdateGraph(const TrainStep& step);

}  // namespace tandem::ir

#endif  // TANDEM_IR_SINGLE_UPDATE_H_
