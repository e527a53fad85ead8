#include "backends/cpu/interpreter.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/kernels/parallel.h"
#include "ir/graph_plan.h"

namespace tandem::cpu {
absl::StatusOr<ir::TensorMap> RunGraph(const ir::Graph& graph, const ir::TensorMap& inputs,
                                       const std::vector<std::string>* wanted) {
  return RunGraph(graph, ir::PlanGraph(graph, wanted), inputs);
}

absl::StatusOr<ir::TensorMap> RunGraph(const ir::Graph& graph, const ir::GraphPlan& plan, const ir::TensorMap& inputs) {
  const int32_t n = graph.size();
  const std::vector<bool>& needed = plan.needed;
  const std::vector<int32_t>& last_use = plan.last_use;
  std::vector<ir::HostTensor> values(n);
  std::vector<const ir::HostTensor*> operands;
  for (ir::ValueId id = 0; id < n; ++id) {
    if (!needed[id]) continue;
    const ir::Node& node = graph.node(id);
    if (node.op == ir::OpKind::kInput) {
      auto it = inputs.find(node.attributes.GetString("name"));
      if (absl::Status status = ir::CheckInputValue(graph, id, it == inputs.end() ? nullptr : &it->second.type());
          !status.ok()) {
        return status;
      }
      values[id] = it->second;
    } else {
      operands.clear();
      for (ir::ValueId operand : node.operands) operands.push_back(&values[operand]);
      absl::StatusOr<ir::HostTensor> result = EvaluateNode(node, operands);
      if (!result.ok()) {
        return absl::Status(result.status().code(),
                            absl::StrCat(ir::DescribeValue(graph, id), ": ", result.status().message()));
      }
      values[id] = *std::move(result);
    }
    for (ir::ValueId operand : node.operands) {
      if (last_use[operand] == id) values[operand] = ir::HostTensor();
    }
    if (last_use[id] == -1) values[id] = ir::HostTensor();
  }
  ir::TensorMap results;
  for (const ir::GraphOutput& output : plan.outputs) results[output.name] = values[output.value];
  return results;
}

absl::StatusOr<ir::HostTensor> AccumulateGradient(const ir::HostTensor& acc, const ir::HostTensor& g) {
  absl::StatusOr<ir::HostTensor> allocated = ir::HostTensor::Allocate(acc.type());
  if (!allocated.ok()) return allocated.status();
  ir::HostTensor sum = *std::move(allocated);
  const float* a = acc.f32();
  const float* b = g.f32();
  float* out = sum.f32();
  internal::ParallelFor(acc.num_elements(), internal::kElementGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) out[i] = a[i] + b[i];
  });
  return sum;
}

namespace {

absl::Status CheckMicrobatchCount(const ir::TrainStep& step, const std::vector<ir::TensorMap>& microbatches) {
  const int64_t expected = int64_t{step.num_microbatches} * step.num_replicas;
  if (static_cast<int64_t>(microbatches.size()) != expected) {
    return absl::InvalidArgumentError(
        absl::StrCat("step '", step.name, "' is traced for ", step.num_microbatches, " microbatches",
                     step.num_replicas == 1 ? "" : absl::StrCat(" on each of ", step.num_replicas, " replicas"),
                     ", got ", microbatches.size()));
  }
  return absl::OkStatus();
}

// total = total + part for every accumulator (part itself where total has
// none yet), with `what` naming the step for errors.
absl::Status AddInto(ir::TensorMap& total, const ir::TensorMap& part, const std::string& what) {
  for (const auto& [name, tensor] : part) {
    auto it = total.find(name);
    if (it == total.end()) {
      total[name] = tensor;
      continue;
    }
    absl::StatusOr<ir::HostTensor> sum = AccumulateGradient(it->second, tensor);
    if (!sum.ok()) {
      return absl::Status(sum.status().code(),
                          absl::StrCat(what, ": accumulating ", name, ": ", sum.status().message()));
    }
    it->second = *std::move(sum);
  }
  return absl::OkStatus();
}

// The microbatch graph's inputs: the state plus the microbatch's data.
ir::TensorMap MicrobatchInputs(const ir::TensorMap& state, const ir::TensorMap& data) {
  ir::TensorMap inputs = state;
  for (const auto& [name, tensor] : data) inputs[name] = tensor;
  return inputs;
}

// Runs the update graph on `accumulators` as update `update_number`
// (1-based), after the norm graph when the step has one (its partials go
// into `gradient_squares`), and replaces `state` by its outputs.
template <typename Run>
absl::Status Update(const ir::TrainStep& step, ir::TensorMap& state, const ir::TensorMap& accumulators,
                    int64_t update_number, const Run& run, std::map<int32_t, float>& gradient_squares) {
  ir::TensorMap update_inputs = state;
  for (const auto& [name, tensor] : accumulators) update_inputs[name] = tensor;
  update_inputs["step"] = ir::HostTensor::Scalar(static_cast<float>(update_number));
  if (step.computes_gradient_norm()) {
    absl::StatusOr<ir::TensorMap> partials = run(step.norm, accumulators);
    if (!partials.ok()) return partials.status();
    for (const ir::GraphOutput& output : step.norm.outputs()) {
      gradient_squares[step.norm.node(output.value).stage] = partials->at(output.name).f32()[0];
    }
    for (auto& [name, tensor] : *partials) update_inputs[name] = std::move(tensor);
  }
  absl::StatusOr<ir::TensorMap> updated = run(step.update, update_inputs);
  if (!updated.ok()) return updated.status();
  for (auto& [name, tensor] : *updated) state[name] = std::move(tensor);
  return absl::OkStatus();
}

// An asynchronous step (PipeDream, 2BW; ir/train_step.h): group after
// group, each microbatch on its stages' stashed weight versions, and an
// update after each group.
template <typename Run>
absl::StatusOr<StepResult> RunAsynchronousStep(const ir::TrainStep& step, ir::TensorMap& state,
                                               const std::vector<ir::TensorMap>& microbatches, int64_t step_number,
                                               const Run& run) {
  const std::map<std::string, int32_t> delays = ParameterVersionDelays(step);
  const int32_t group_size = step.group_size();
  StepResult result;
  for (int32_t group = 0; group < step.updates_per_step(); ++group) {
    ir::TensorMap weights = state;
    for (const auto& [parameter, delay] : delays) weights[parameter] = state.at(ir::StashName(parameter, delay));
    ir::TensorMap accumulators;
    for (int32_t m = group * group_size; m < (group + 1) * group_size; ++m) {
      absl::StatusOr<ir::TensorMap> outputs = run(step.microbatch, MicrobatchInputs(weights, microbatches[m]));
      if (!outputs.ok()) {
        return absl::Status(outputs.status().code(), absl::StrCat("microbatch ", m, ": ", outputs.status().message()));
      }
      result.losses.push_back(outputs->at("loss").f32()[0]);
      ir::TensorMap gradients;
      for (const ir::Accumulator& acc : step.accumulators) gradients[acc.name] = outputs->at(acc.source);
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

absl::StatusOr<StepResult> RunReferenceStep(const ir::TrainStep& step, ir::TensorMap& state,
                                            const std::vector<ir::TensorMap>& microbatches, int64_t step_number,
                                            const GraphRunner& runner) {
  if (absl::Status status = CheckMicrobatchCount(step, microbatches); !status.ok()) return status;
  auto run = [&runner](const ir::Graph& graph, const ir::TensorMap& inputs) {
    return runner ? runner(graph, inputs) : RunGraph(graph, inputs);
  };
  if (step.asynchronous() && !step.forward_only()) {
    return RunAsynchronousStep(step, state, microbatches, step_number, run);
  }
  // Each replica sums its microbatches in order; then the replicas' sums
  // are added in replica order (ir/all_reduce.h).
  StepResult result;
  ir::TensorMap accumulators;
  for (int32_t replica = 0; replica < step.num_replicas; ++replica) {
    ir::TensorMap replica_sums;
    for (int32_t local = 0; local < step.num_microbatches; ++local) {
      const size_t m = static_cast<size_t>(replica) * step.num_microbatches + local;
      absl::StatusOr<ir::TensorMap> outputs = run(step.microbatch, MicrobatchInputs(state, microbatches[m]));
      if (!outputs.ok()) {
        return absl::Status(outputs.status().code(), absl::StrCat("microbatch ", m, ": ", outputs.status().message()));
      }
      result.losses.push_back(outputs->at("loss").f32()[0]);
      ir::TensorMap gradients;
      for (const ir::Accumulator& acc : step.accumulators) gradients[acc.name] = outputs->at(acc.source);
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

absl::StatusOr<std::vector<float>> EvaluateLosses(const ir::TrainStep& step, const ir::TensorMap& state,
                                                  const std::vector<ir::TensorMap>& microbatches) {
  const std::vector<std::string> wanted = {"loss"};
  std::vector<float> losses;
  for (const ir::TensorMap& data : microbatches) {
    absl::StatusOr<ir::TensorMap> result = RunGraph(step.microbatch, MicrobatchInputs(state, data), &wanted);
    if (!result.ok()) return result.status();
    losses.push_back(result->at("loss").f32()[0]);
  }
  return losses;
}

absl::StatusOr<LossAndGradients> EvaluateGradients(const ir::TrainStep& step, const ir::TensorMap& state,
                                                   const ir::TensorMap& microbatch) {
  absl::StatusOr<ir::TensorMap> outputs = RunGraph(step.microbatch, MicrobatchInputs(state, microbatch));
  if (!outputs.ok()) return outputs.status();
  LossAndGradients result;
  result.loss = outputs->at("loss").f32()[0];
  for (const ir::StateSpec& spec : step.state) {
    if (spec.role != ir::StateRole::kParameter) continue;
    ir::TensorMap sum;
    for (int32_t stage = 0; stage < step.num_stages; ++stage) {
      auto found = outputs->find(ir::GradientName(spec.name, stage));
      if (found == outputs->end()) continue;
      if (absl::Status status = AddInto(sum, {{spec.name, found->second}}, "gradients"); !status.ok()) return status;
    }
    if (!sum.empty()) result.gradients[spec.name] = std::move(sum.at(spec.name));
  }
  return result;
}

absl::StatusOr<std::vector<ir::HostTensor>> RunReferenceForward(const ir::TrainStep& step, const ir::TensorMap& state,
                                                                const std::vector<ir::TensorMap>& microbatches) {
  if (absl::Status status = CheckMicrobatchCount(step, microbatches); !status.ok()) return status;
  std::vector<ir::HostTensor> outputs;
  for (const ir::TensorMap& data : microbatches) {
    absl::StatusOr<ir::TensorMap> result = RunGraph(step.microbatch, MicrobatchInputs(state, data));
    if (!result.ok()) return result.status();
    outputs.push_back(result->at("output"));
  }
  return outputs;
}

}  // namespace tandem::cpu
