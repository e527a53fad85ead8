// The reference interpreter: runs graphs and whole training steps on the CPU
// with the reference kernels. It is the meaning of a TrainStep, and every
// pipelined run is compared with it bitwise.
#ifndef TANDEM_BACKENDS_CPU_INTERPRETER_H_
#define TANDEM_BACKENDS_CPU_INTERPRETER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ir/graph.h"
#include "ir/graph_plan.h"
#include "ir/host_tensor.h"
#include "ir/train_step.h"

namespace tandem::cpu {

// Runs `graph` in program order. `inputs` supplies every input node's value
// by name, of the declared type. Each value is released after its last use.
// Returns the graph's outputs by name; with `wanted`, only those outputs,
// computing only the ops they need. A kernel error names the value, op and
// source location: "%12 = embedding at examples/gpt.cc:40: ...".
absl::StatusOr<ir::TensorMap> RunGraph(const ir::Graph& graph, const ir::TensorMap& inputs,
                                       const std::vector<std::string>* wanted = nullptr);
// The same with the plan made beforehand (PlanGraph(graph, ...)).
absl::StatusOr<ir::TensorMap> RunGraph(const ir::Graph& graph, const ir::GraphPlan& plan, const ir::TensorMap& inputs);

// acc + g, elementwise in f32: the one definition of gradient accumulation,
// used by the interpreter and by every pipelined executor.
// ResourceExhausted when the sum cannot be allocated.
absl::StatusOr<ir::HostTensor> AccumulateGradient(const ir::HostTensor& acc, const ir::HostTensor& g);

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
using GraphRunner = std::function<absl::StatusOr<ir::TensorMap>(const ir::Graph& graph, const ir::TensorMap& inputs)>;

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
// Graphs run on `runner` (RunGraph when empty), one at a time; on RunGraph,
// up to one microbatch per thread of the calling oneTBB arena
// (kernel_threads.h) runs at once, and their gradients are still added in
// microbatch order: the same bits, with that many microbatches' activations
// and gradients alive together. Accumulation is always AccumulateGradient,
// as in every executor.
absl::StatusOr<StepResult> RunReferenceStep(const ir::TrainStep& step, ir::TensorMap& state,
                                            const std::vector<ir::TensorMap>& microbatches, int64_t step_number,
                                            const GraphRunner& runner = nullptr);

// The loss of each microbatch under `state`, without gradients or update.
absl::StatusOr<std::vector<float>> EvaluateLosses(const ir::TrainStep& step, const ir::TensorMap& state,
                                                  const std::vector<ir::TensorMap>& microbatches);

// One microbatch's loss under `state` and the gradient of that loss with
// respect to each parameter (summed over the stages that read it, in stage
// order), by the parameter's name: what a step would accumulate, without
// the update.
struct LossAndGradients {
  float loss = 0;
  ir::TensorMap gradients;
};
absl::StatusOr<LossAndGradients> EvaluateGradients(const ir::TrainStep& step, const ir::TensorMap& state,
                                                   const ir::TensorMap& microbatch);

// A forward-only step: each microbatch's "output".
absl::StatusOr<std::vector<ir::HostTensor>> RunReferenceForward(const ir::TrainStep& step, const ir::TensorMap& state,
                                                                const std::vector<ir::TensorMap>& microbatches);

}  // namespace tandem::cpu

#endif  // TANDEM_BACKENDS_CPU_INTERPRETER_H_
