// Reverse-mode automatic differentiation over a traced forward graph.
#ifndef TANDEM_IR_AUTODIFF_H_
#define TANDEM_IR_AUTODIFF_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ir/graph.h"

namespace tandem::ir {

// The gradient of the loss with respect to one parameter, from the ops of
// one stage. A parameter used in several stages (a tied embedding) has one
// gradient per stage; they are summed after the microbatch loop.
struct ParameterGradient {
  std::string parameter;
  int32_t stage = 0;
  ValueId value = 0;
};

// Appends to `graph` the ops computing the gradient of the scalar `loss`
// with respect to every parameter input (role "parameter") it depends on,
// and returns those gradients ordered by (parameter declaration, stage).
//
// Every backward op gets the stage and source location of the forward op it
// differentiates, and a phase: kBackwardInput (I) if its result is needed to
// compute a gradient that flows into an earlier stage, kBackwardWeight (W)
// otherwise. I never depends on W, so a zero-bubble schedule can run a
// stage's I part, send the input gradient on, and run W later. When a value
// has cotangent contributions from several stages, each stage first sums its
// own (so one tensor crosses each boundary); the value's stage then sums the
// partial sums in the order autodiff produced them; contributions that are
// zero but for disjoint pieces of the value (the gradients of slices that
// do not overlap: q, k and v of one projection) are gathered into one
// concat instead. All orders are fixed, so the graph is deterministic.
// Backward values that no gradient needs are not kept: the graph's first
// nodes are the forward ones, unchanged, and then only backward nodes that
// some gradient uses.
absl::StatusOr<std::vector<ParameterGradient>> AppendBackward(Graph& graph, ValueId loss);

}  // namespace tandem::ir

#endif  // TANDEM_IR_AUTODIFF_H_
