// The reference interpreter: runs graphs and whole training steps on the CPU
// with the reference kernels. It is the meaning of a TrainStep, and every
// pipelined run is compared with it bitwise.
#ifndef TANDEM_IR_INTERPRETER_H_
#define TANDEM_IR_INTERPRETER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ir/graph.h"
#include "ir/host_tensor.h"
#include "ir/train_step.h"

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

// Runs `graph` in program order. `inputs` supplies every input node's value
// by name, of the declared type. Each value is released after its last use.
// Returns the graph's outputs by name; with `wanted`, only those outputs,
// computing only the ops they need. A kernel error names the value, op and
// source location: "%12 = embedding at examples/gpt.cc:40: ...".
absl::StatusOr<TensorMap> RunGraph(const Graph& graph, const TensorMap& inputs,
                                   const std::vector<std::string>* wanted = nullptr);
// The same with the plan made beforehand (PlanGraph(graph, ...)).
absl::StatusOr<TensorMap> RunGraph(const Graph& graph, const GraphPlan& plan, const TensorMap& inputs);

// What every evaluator of graphs (RunGraph, the CUDA runner, the profilers)
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

// A tensor of `type` (f32) filled by `initializer`: the same arguments give
// the same bits on every run. The errors of HostTensor::Allocate.
absl::StatusOr<HostTensor> MakeTensor(const TensorType& type, const Initializer& initializer);
// The first value of a state tensor, from its seeded initializer.
inline absl::StatusOr<HostTensor> InitialValue(const StateSpec& spec) { return MakeTensor(spec.type, spec.init); }
// InitialValue of every state tensor of `step`, by name; ResourceExhausted
// naming the tensor when one cannot be allocated.
absl::StatusOr<TensorMap> InitialState(const TrainStep& step);

// acc + g, elementwise in f32: the one definition of gradient accumulation,
// used by the interpreter and by every pipelined executor.
// ResourceExhausted when the sum cannot be allocated.
absl::StatusOr<HostTensor> AccumulateGradient(const HostTensor& acc, const HostTensor& g);

struct StepResult {
  std::vector<float> losses;  // one per microbatch, in microbatch order
  // By stage: its sum of squared averaged gradients (the norm graph's
  // partial, ir/train_step.h), in a step that computes them; empty in
  // others.
  std::map<int32_t, float> gradient_squares;
};

// How a whole graph is evaluated: RunGraph (the reference kernels) unless
// another backend is given (e.g. a GPU's, for the single-process GPU
// reference that pipelined GPU runs are compared with).
using GraphRunner = std::function<absl::StatusOr<TensorMap>(const Graph& graph, const TensorMap& inputs)>;

// One training step as the user wrote it: for each microbatch in order, run
// the microbatch graph and add its gradients into the accumulators; then run
// the update graph with `step_number` (1-based) and replace `state` by its
// outputs. `microbatches` holds each microbatch's data and labels by name:
// num_replicas * num_microbatches of them, replica r's being
// [r * num_microbatches, (r + 1) * num_microbatches). With replicas, each
// replica accumulates its own microbatches, and the replicas' sums are added
// in replica order (the two levels of ir/all_reduce.h); losses come back in
// global microbatch order.
// An asynchronous step (PipeDream, 2BW) updates after each group of
// step.group_size() microbatches instead, as update (step_number-1)*K + g + 1
// for group g of K, each microbatch computing on the weight version its
// stage's delay names (ir/train_step.h).
// Graphs run on `runner` (RunGraph when empty); accumulation is always
// AccumulateGradient, as in every executor.
absl::StatusOr<StepResult> RunReferenceStep(const TrainStep& step, TensorMap& state,
                                            const std::vector<TensorMap>& microbatches,
                                            int64_t step_number, const GraphRunner& runner = nullptr);

// The loss of each microbatch under `state`, without gradients or update.
absl::StatusOr<std::vector<float>> EvaluateLosses(const TrainStep& step, const TensorMap& state,
                                                  const std::vector<TensorMap>& microbatches);

// A forward-only step: each microbatch's "output".
absl::StatusOr<std::vector<HostTensor>> RunReferenceForward(const TrainStep& step, const TensorMap& state,
                                                            const std::vector<TensorMap>& microbatches);

}  // namespace tandem::ir

#endif  // TANDEM_IR_INTERPRETER_H_
