#include "ir/interpreter.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "ir/kernels.h"
#include "ir/kernels/parallel.h"

namespace tandem::ir {
namespace {

// SplitMix64 (Steele, Lea & Flood, 2014): a counter-based generator, so the
// k-th number of a stream is a pure function of (seed, k).
uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Uniform in (0, 1), from the top 53 bits.
double UniformOpen(uint64_t seed, uint64_t counter) {
  uint64_t bits = SplitMix64(seed ^ SplitMix64(counter)) >> 11;
  return (static_cast<double>(bits) + 0.5) * 0x1.0p-53;
}

}  // namespace

GraphPlan PlanGraph(const Graph& graph, const std::vector<std::string>* wanted) {
  const int32_t n = graph.size();
  GraphPlan plan;
  for (const GraphOutput& output : graph.outputs()) {
    if (wanted == nullptr || std::find(wanted->begin(), wanted->end(), output.name) != wanted->end()) {
      plan.outputs.push_back(output);
    }
  }
  plan.needed.assign(n, wanted == nullptr);
  for (const GraphOutput& output : plan.outputs) plan.needed[output.value] = true;
  for (ValueId id = n - 1; id >= 0; --id) {
    if (!plan.needed[id]) continue;
    for (ValueId operand : graph.node(id).operands) plan.needed[operand] = true;
  }
  plan.last_use = LastUses(graph, plan.outputs, &plan.needed);
  return plan;
}

absl::StatusOr<TensorMap> RunGraph(const Graph& graph, const TensorMap& inputs,
                                   const std::vector<std::string>* wanted) {
  return RunGraph(graph, PlanGraph(graph, wanted), inputs);
}

absl::StatusOr<TensorMap> RunGraph(const Graph& graph, const GraphPlan& plan, const TensorMap& inputs) {
  const int32_t n = graph.size();
  const std::vector<bool>& needed = plan.needed;
  const std::vector<int32_t>& last_use = plan.last_use;
  std::vector<HostTensor> values(n);
  std::vector<const HostTensor*> operands;
  for (ValueId id = 0; id < n; ++id) {
    if (!needed[id]) continue;
    const Node& node = graph.node(id);
    if (node.op == OpKind::kInput) {
      auto it = inputs.find(node.attributes.GetString("name"));
      if (absl::Status status = CheckInputValue(graph, id, it == inputs.end() ? nullptr : &it->second.type());
          !status.ok()) {
        return status;
      }
      values[id] = it->second;
    } else {
      operands.clear();
      for (ValueId operand : node.operands) operands.push_back(&values[operand]);
      absl::StatusOr<HostTensor> result = EvaluateNode(node, operands);
      if (!result.ok()) {
        return absl::Status(result.status().code(),
                            absl::StrCat(DescribeValue(graph, id), ": ", result.status().message()));
      }
      values[id] = *std::move(result);
    }
    for (ValueId operand : node.operands) {
      if (last_use[operand] == id) values[operand] = HostTensor();
    }
    if (last_use[id] == -1) values[id] = HostTensor();
  }
  TensorMap results;
  for (const GraphOutput& output : plan.outputs) results[output.name] = values[output.value];
  return results;
}

std::vector<int32_t> LastUses(const Graph& graph, const std::vector<GraphOutput>& outputs,
                              const std::vector<bool>* needed) {
  const int32_t n = graph.size();
  std::vector<int32_t> last_use(n, -1);
  for (ValueId id = 0; id < n; ++id) {
    if (needed != nullptr && !(*needed)[id]) continue;
    for (ValueId operand : graph.node(id).operands) last_use[operand] = id;
  }
  for (const GraphOutput& output : outputs) last_use[output.value] = n;
  return last_use;
}

absl::Status CheckInputValue(const Graph& graph, ValueId id, const TensorType* given) {
  const Node& node = graph.node(id);
  const std::string& name = node.attributes.GetString("name");
  if (given == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("graph @", graph.name(), ": no value for input '", name, "'"));
  }
  if (*given != node.type) {
    return absl::InvalidArgumentError(absl::StrCat("graph @", graph.name(), ": input '", name, "' must be ",
                                                   TypeToString(node.type), ", got ", TypeToString(*given)));
  }
  return absl::OkStatus();
}

absl::StatusOr<HostTensor> MakeTensor(const TensorType& type, const Initializer& init) {
  absl::StatusOr<HostTensor> allocated = HostTensor::Allocate(type);
  if (!allocated.ok()) return allocated.status();
  HostTensor tensor = *std::move(allocated);
  const int64_t n = tensor.num_elements();
  float* out = tensor.f32();
  switch (init.kind) {
    case Initializer::Kind::kZeros:
      break;
    case Initializer::Kind::kOnes:
      for (int64_t i = 0; i < n; ++i) out[i] = 1.0f;
      break;
    case Initializer::Kind::kUniform:
      for (int64_t i = 0; i < n; ++i) {
        out[i] = static_cast<float>(init.a + (init.b - init.a) * UniformOpen(init.seed, i));
      }
      break;
    case Initializer::Kind::kNormal:
      // Box-Muller on the pair (2j, 2j+1) of the stream; element 2j takes the
      // cosine branch, 2j+1 the sine branch.
      for (int64_t i = 0; i < n; ++i) {
        uint64_t pair = static_cast<uint64_t>(i / 2);
        double radius = std::sqrt(-2.0 * std::log(UniformOpen(init.seed, 2 * pair)));
        double angle = 2.0 * M_PI * UniformOpen(init.seed, 2 * pair + 1);
        double z = radius * (i % 2 == 0 ? std::cos(angle) : std::sin(angle));
        out[i] = static_cast<float>(init.a + init.b * z);
      }
      break;
  }
  return tensor;
}

absl::StatusOr<TensorMap> InitialState(const TrainStep& step) {
  TensorMap state;
  for (const StateSpec& spec : step.state) {
    absl::StatusOr<HostTensor> value = InitialValue(spec);
    if (!value.ok()) {
      return absl::Status(value.status().code(),
                          absl::StrCat("state '", spec.name, "': ", value.status().message()));
    }
    state[spec.name] = *std::move(value);
  }
  return state;
}

absl::StatusOr<HostTensor> AccumulateGradient(const HostTensor& acc, const HostTensor& g) {
  absl::StatusOr<HostTensor> allocated = HostTensor::Allocate(acc.type());
  if (!allocated.ok()) return allocated.status();
  HostTensor sum = *std::move(allocated);
  const float* a = acc.f32();
  const float* b = g.f32();
  float* out = sum.f32();
  internal::ParallelFor(acc.num_elements(), internal::kElementGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) out[i] = a[i] + b[i];
  });
  return sum;
}

namespace {

absl::Status CheckMicrobatchCount(const TrainStep& step, const std::vector<TensorMap>& microbatches) {
  const int64_t expected = int64_t{step.num_microbatches} * step.num_replicas;
  if (static_cast<int64_t>(microbatches.size()) != expected) {
    return absl::InvalidArgumentError(absl::StrCat(
        "step '", step.name, "' is traced for ", step.num_microbatches, " microbatches",
        step.num_replicas == 1 ? "" : absl::StrCat(" on each of ", step.num_replicas, " replicas"), ", got ",
        microbatches.size()));
  }
  return absl::OkStatus();
}

// total = total + part for every accumulator (part itself where total has
// none yet), with `what` naming the step for errors.
absl::Status AddInto(TensorMap& total, const TensorMap& part, const std::string& what) {
  for (const auto& [name, tensor] : part) {
    auto it = total.find(name);
    if (it == total.end()) {
      total[name] = tensor;
      continue;
    }
    absl::StatusOr<HostTensor> sum = AccumulateGradient(it->second, tensor);
    if (!sum.ok()) {
      return absl::Status(sum.status().code(), absl::StrCat(what, ": accumulating ", name, ": ", sum.status().message()));
    }
    it->second = *std::move(sum);
  }
  return absl::OkStatus();
}

// The microbatch graph's inputs: the state plus the microbatch's data.
TensorMap MicrobatchInputs(const TensorMap& state, const TensorMap& data) {
  TensorMap inputs = state;
  for (const auto& [name, tensor] : data) inputs[name] = tensor;
  return inputs;
}

// Runs the update graph on `accumulators` as update `update_number`
// (1-based), after the norm graph when the step has one (its partials go
// into `gradient_squares`), and replaces `state` by its outputs.
template <typename Run>
absl::Status Update(const TrainStep& step, TensorMap& state, const TensorMap& accumulators, int64_t update_number,
                    const Run& run, std::map<int32_t, float>& gradient_squares) {
  TensorMap update_inputs = state;
  for (const auto& [name, tensor] : accumulators) update_inputs[name] = tensor;
  update_inputs["step"] = HostTensor::Scalar(static_cast<float>(update_number));
  if (step.computes_gradient_norm()) {
    absl::StatusOr<TensorMap> partials = run(step.norm, accumulators);
    if (!partials.ok()) return partials.status();
    for (const GraphOutput& output : step.norm.outputs()) {
      gradient_squares[step.norm.node(output.value).stage] = partials->at(output.name).f32()[0];
    }
    for (auto& [name, tensor] : *partials) update_inputs[name] = std::move(tensor);
  }
  absl::StatusOr<TensorMap> updated = run(step.update, update_inputs);
  if (!updated.ok()) return updated.status();
  for (auto& [name, tensor] : *updated) state[name] = std::move(tensor);
  return absl::OkStatus();
}

// An asynchronous step (PipeDream, 2BW; ir/train_step.h): group after
// group, each microbatch on its stages' stashed weight versions, and an
// update after each group.
template <typename Run>
absl::StatusOr<StepResult> RunAsynchronousStep(const TrainStep& step, TensorMap& state,
                                               const std::vector<TensorMap>& microbatches, int64_t step_number,
                                               const Run& run) {
  const std::map<std::string, int32_t> delays = ParameterVersionDelays(step);
  const int32_t group_size = step.group_size();
  StepResult result;
  for (int32_t group = 0; group < step.updates_per_step(); ++group) {
    TensorMap weights = state;
    for (const auto& [parameter, delay] : delays) weights[parameter] = state.at(StashName(parameter, delay));
    TensorMap accumulators;
    for (int32_t m = group * group_size; m < (group + 1) * group_size; ++m) {
      absl::StatusOr<TensorMap> outputs = run(step.microbatch, MicrobatchInputs(weights, microbatches[m]));
      if (!outputs.ok()) {
        return absl::Status(outputs.status().code(), absl::StrCat("microbatch ", m, ": ", outputs.status().message()));
      }
      result.losses.push_back(outputs->at("loss").f32()[0]);
      TensorMap gradients;
      for (const Accumulator& acc : step.accumulators) gradients[acc.name] = outputs->at(acc.source);
      if (absl::Status status = AddInto(accumulators, gradients, absl::StrCat("microbatch ", m)); !status.ok()) {
        return status;
      }
    }
    const int64_t update_number = (step_number - 1) * step.updates_per_step() + group + 1;
    if (absl::Status status = Update(step, state, accumulators, update_number, run, result.gradient_squares);
        !status.ok()) {
      return status;
    }
  }
  return result;
}

}  // namespace

absl::StatusOr<StepResult> RunReferenceStep(const TrainStep& step, TensorMap& state,
                                            const std::vector<TensorMap>& microbatches, int64_t step_number,
                                            const GraphRunner& runner) {
  if (absl::Status status = CheckMicrobatchCount(step, microbatches); !status.ok()) return status;
  auto run = [&runner](const Graph& graph, const TensorMap& inputs) {
    return runner ? runner(graph, inputs) : RunGraph(graph, inputs);
  };
  if (step.asynchronous() && !step.forward_only()) {
    return RunAsynchronousStep(step, state, microbatches, step_number, run);
  }
  // Each replica sums its microbatches in order; then the replicas' sums
  // are added in replica order (ir/all_reduce.h).
  StepResult result;
  TensorMap accumulators;
  for (int32_t replica = 0; replica < step.num_replicas; ++replica) {
    TensorMap replica_sums;
    for (int32_t local = 0; local < step.num_microbatches; ++local) {
      const size_t m = static_cast<size_t>(replica) * step.num_microbatches + local;
      absl::StatusOr<TensorMap> outputs = run(step.microbatch, MicrobatchInputs(state, microbatches[m]));
      if (!outputs.ok()) {
        return absl::Status(outputs.status().code(),
                            absl::StrCat("microbatch ", m, ": ", outputs.status().message()));
      }
      result.losses.push_back(outputs->at("loss").f32()[0]);
      TensorMap gradients;
      for (const Accumulator& acc : step.accumulators) gradients[acc.name] = outputs->at(acc.source);
      if (absl::Status status = AddInto(replica_sums, gradients, absl::StrCat("microbatch ", m)); !status.ok()) {
        return status;
      }
    }
    if (absl::Status status = AddInto(accumulators, replica_sums, absl::StrCat("replica ", replica)); !status.ok()) {
      return status;
    }
  }
  if (step.forward_only()) return result;
  if (absl::Status status = Update(step, state, accumulators, step_number, run, result.gradient_squares);
      !status.ok()) {
    return status;
  }
  return result;
}

absl::StatusOr<std::vector<float>> EvaluateLosses(const TrainStep& step, const TensorMap& state,
                                                  const std::vector<TensorMap>& microbatches) {
  const std::vector<std::string> wanted = {"loss"};
  std::vector<float> losses;
  for (const TensorMap& data : microbatches) {
    absl::StatusOr<TensorMap> result = RunGraph(step.microbatch, MicrobatchInputs(state, data), &wanted);
    if (!result.ok()) return result.status();
    losses.push_back(result->at("loss").f32()[0]);
  }
  return losses;
}

absl::StatusOr<std::vector<HostTensor>> RunReferenceForward(const TrainStep& step, const TensorMap& state,
                                                            const std::vector<TensorMap>& microbatches) {
  if (absl::Status status = CheckMicrobatchCount(step, microbatches); !status.ok()) return status;
  std::vector<HostTensor> outputs;
  for (const TensorMap& data : microbatches) {
    absl::StatusOr<TensorMap> result = RunGraph(step.microbatch, MicrobatchInputs(state, data));
    if (!result.ok()) return result.status();
    outputs.push_back(result->at("output"));
  }
  return outputs;
}

}  // namespace tandem::ir
