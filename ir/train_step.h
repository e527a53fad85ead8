// A traced training step: the microbatch loop and the optimizer update.
//
// The step a user writes is "for each microbatch in order: run the model,
// differentiate it, add its gradients to the accumulators; then update the
// parameters". TrainStep holds that loop in structured form:
//  - `microbatch`: the body, run once per microbatch. Inputs are the
//    parameters (role "parameter") and the microbatch's data and labels;
//    outputs are "loss" and one gradient per (parameter, stage that uses it),
//    named GradientName(parameter, stage).
//  - `accumulators`: each body gradient is summed over microbatches in
//    microbatch order in f32: acc = g_0, then acc = acc + g_m for m = 1..M-1.
//  - `num_replicas` (data parallelism): D replicas each run M microbatches
//    of the global batch of D*M and accumulate them as above; their sums are
//    then added in replica order (ir/all_reduce.h), the same on every
//    replica.
//  - `update`: run once after the loop. Inputs: parameters, accumulators
//    (role "accumulator"), optimizer state and the step number (role "step",
//    f32 scalar, 1 for the first step). It sums a parameter's accumulators in
//    stage order, scales by 1/(D*M) and applies the optimizer; each output is the
//    new value of the state tensor with the same name.
//  - `norm` (every synchronous step's; empty in an asynchronous one): run
//    after the loop, before the update, on the same accumulators. It
//    outputs each stage's sum of squared averaged gradients,
//    NormPartialName(stage), over the parameters the stage updates, in state
//    order; whoever runs the step reports them, so that a gradient that is
//    not finite is seen and its stage named. When the update clips by the
//    global norm or skips non-finite updates, it reads every stage's partial
//    (role "gradient_norm") and adds them in stage order to the same total
//    everywhere. Clipping scales each gradient by
//    min(1, max_norm / (sqrt(total) + 1e-6)), as torch.nn.utils.clip_grad_norm_;
//    skipping keeps each parameter and slot as it was when the total is
//    not finite.
// A forward-only step has no gradients, accumulators or update ops.
//
// Asynchronous pipelines (PipeDream, PipeDream-2BW; schedules/FORMAT.md)
// relax the loop: the microbatches form groups of `microbatches_per_update`
// in order, and the update runs after each group on that group's
// accumulators (scaled by 1/group), with step number (s-1)*K + g + 1 for
// group g of step s, K groups per step. A stage with `version_delay` d > 0
// computes group g's forward and backward on the weights of d updates
// before the latest: its parameters keep d older versions as state
// ("stash<k>.<parameter>" holds the version of k updates ago, initialized
// like the parameter), and each update shifts them by one. The result does
// not depend on how many groups a step holds.
// Value type; not synchronized.
#ifndef TANDEM_IR_TRAIN_STEP_H_
#define TANDEM_IR_TRAIN_STEP_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ir/dtype.h"
#include "ir/graph.h"
#include "ir/stage_graph.h"

namespace tandem::ir {

// How a state tensor gets its first value. Deterministic: the same seed gives
// the same bits on every machine (a counter-based generator, not <random>).
struct Initializer {
  enum class Kind : uint8_t { kZeros, kOnes, kNormal, kUniform };
  Kind kind = Kind::kZeros;
  double a = 0;  // normal: mean; uniform: low
  double b = 0;  // normal: standard deviation; uniform: high
  uint64_t seed = 0;
  friend bool operator==(const Initializer&, const Initializer&) = default;
};

// kCache: a forward step's cache of one microbatch (a KV cache: what a
// decoding step keeps of the sequences it extends). The microbatch graph
// reads cache `c` as an input of role "cache" named `c`, and its output
// named `c`, if any, is the cache's new value; microbatch m's copy is the
// state tensor CacheStateName(c, m), kept by the actor that runs the
// cache's stage, which reads and writes it.
enum class StateRole : uint8_t { kParameter, kOptimizerState, kCache };
// "parameter", "optimizer_state", "cache": the text form's words.
const char* StateRoleName(StateRole role);

// A tensor that lives across steps: a parameter, an optimizer slot or a
// microbatch's cache.
struct StateSpec {
  std::string name;
  TensorType type;
  StateRole role = StateRole::kParameter;
  Initializer init;
  // kOptimizerState: the parameter this slot belongs to; its update runs
  // wherever the parameter lives.
  std::string parameter;
  friend bool operator==(const StateSpec&, const StateSpec&) = default;
};

struct Accumulator {
  std::string name;    // the update graph's input
  std::string source;  // the microbatch graph's output it sums
  friend bool operator==(const Accumulator&, const Accumulator&) = default;
};

struct TrainStep {
  std::string name;
  int32_t num_stages = 1;
  // Which stages feed which (ir/stage_graph.h); empty: the chain.
  std::vector<StageEdge> stage_edges;
  int32_t num_microbatches = 1;  // per replica
  int32_t num_replicas = 1;
  // Asynchronous pipelines: microbatches per update (0: all of the step's)
  // and the version delay of each stage (empty: none).
  int32_t microbatches_per_update = 0;
  std::vector<int32_t> version_delay;
  std::vector<StateSpec> state;
  Graph microbatch{"microbatch"};
  std::vector<Accumulator> accumulators;
  Graph norm{"norm"};
  Graph update{"update"};

  const StateSpec* FindState(const std::string& state_name) const;
  StageGraph stage_graph() const { return StageGraph(num_stages, stage_edges); }
  bool forward_only() const { return accumulators.empty(); }
  // Whether the step computes its stages' gradient norms (the norm graph).
  bool computes_gradient_norm() const { return !norm.outputs().empty(); }
  // Whether the update reads them: it clips by the global norm or skips
  // non-finite updates.
  bool update_reads_gradient_norm() const;
  int32_t group_size() const { return microbatches_per_update > 0 ? microbatches_per_update : num_microbatches; }
  int32_t updates_per_step() const { return num_microbatches / group_size(); }
  int32_t VersionDelay(int32_t stage) const {
    return version_delay.empty() ? 0 : version_delay[static_cast<size_t>(stage)];
  }
  // Whether the loop updates more than once a step or computes on stashed
  // weights: a PipeDream or 2BW step.
  bool asynchronous() const { return updates_per_step() > 1 || MaxVersionDelay() > 0; }
  int32_t MaxVersionDelay() const;
  friend bool operator==(const TrainStep&, const TrainStep&) = default;
};

// "grad.<parameter>.s<stage>": the body output holding a parameter's
// gradient from one stage, and "acc.<parameter>.s<stage>" its accumulator.
std::string GradientName(const std::string& parameter, int32_t stage);
std::string AccumulatorName(const std::string& parameter, int32_t stage);
// "norm.s<stage>": the norm graph's output (and the update's input) holding
// the stage's sum of squared gradients.
std::string NormPartialName(int32_t stage);
// "<cache>@<microbatch>": the state tensor holding microbatch
// `microbatch`'s copy of cache `cache` (StateRole::kCache).
std::string CacheStateName(const std::string& cache, int32_t microbatch);
// "stash<k>.<parameter>": the parameter's version of k >= 1 updates ago;
// k == 0 is the parameter itself.
std::string StashName(const std::string& parameter, int32_t k);
// The version delay of every parameter the microbatch graph reads on a
// stage with a delay above 0, by name.
std::map<std::string, int32_t> ParameterVersionDelays(const TrainStep& step);

}  // namespace tandem::ir

#endif  // TANDEM_IR_TRAIN_STEP_H_
