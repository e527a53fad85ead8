#include "backends/cpu/interpreter.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/kernels/kernel_support.h"
#include "backends/cpu/kernels/parallel.h"
#include "ir/elementwise_runs.h"
#include "ir/graph_plan.h"
#include "tbb/task_arena.h"

namespace tandem::cpu {
absl::StatusOr<ir::TensorMap> RunGraph(const ir::Graph& graph, const ir::TensorMap& inputs,
                                       const std::vector<std::string>* wanted) {
  return RunGraph(graph, ir::PlanGraph(graph, wanted), inputs);
}

namespace {

// Runs of elementwise nodes (ir/elementwise_runs.h) evaluated a piece at a
// time: one pass over memory for the whole run instead of one per node. The
// reference fuses f32 runs of at least kMinFusedElements. Only the members
// read after the run (or outputs) are written out whole; the others live
// in a piece-sized scratch.
constexpr int64_t kMinFusedElements = int64_t{1} << 16;
constexpr int64_t kFusedPiece = 2048;  // elements per piece: the scratch stays in cache
constexpr ir::ElementwiseRunRules kFusedRunRules{.min_elements = kMinFusedElements};

absl::Status EvaluateFusedRun(const ir::Graph& graph, const std::vector<ir::ValueId>& members,
                              const std::vector<int32_t>& last_use, std::vector<ir::HostTensor>& values) {
  const ir::ValueId last = members.back();
  const size_t count = members.size();
  std::vector<bool> written(count);  // written out whole: read after the run, or an output
  for (size_t m = 0; m < count; ++m) {
    const ir::ValueId id = members[m];
    written[m] = last_use[id] > last;
    if (written[m]) {
      absl::StatusOr<ir::HostTensor> out = ir::HostTensor::AllocateUninitialized(graph.node(id).type);
      if (!out.ok()) return absl::Status(out.status().code(), absl::StrCat(ir::DescribeValue(graph, id), ": ",
                                                                          out.status().message()));
      values[id] = *std::move(out);
    }
  }
  // Where each member's operands come from: an earlier member, or a value
  // from outside the run.
  const std::vector<std::vector<int32_t>> sources = ir::OperandsOf(graph, members).sources;
  const int64_t elements = graph.node(last).type.num_elements();
  const int64_t pieces = (elements + kFusedPiece - 1) / kFusedPiece;
  internal::ParallelFor(pieces, std::max<int64_t>(1, internal::kElementGrain / kFusedPiece),
                        [&](int64_t begin, int64_t end) {
    std::vector<float> scratch(count * kFusedPiece);
    const float* in[2];
    int64_t strides[2];
    for (int64_t piece = begin; piece < end; ++piece) {
      const int64_t offset = piece * kFusedPiece;
      const int64_t n = std::min(kFusedPiece, elements - offset);
      for (size_t m = 0; m < count; ++m) {
        const ir::Node& node = graph.node(members[m]);
        for (size_t k = 0; k < node.operands.size(); ++k) {
          const int64_t from = sources[m][k];
          if (from >= 0) {
            in[k] = written[from] ? values[members[from]].f32() + offset : scratch.data() + from * kFusedPiece;
            strides[k] = 1;
          } else {
            const ir::HostTensor& value = values[node.operands[k]];
            const bool single = value.num_elements() == 1 && elements != 1;
            in[k] = single ? value.f32() : value.f32() + offset;
            strides[k] = single ? 0 : 1;
          }
        }
        float* out = written[m] ? values[members[m]].f32() + offset : scratch.data() + m * kFusedPiece;
        internal::ElementwiseRange(node.op, in, strides, out, n);
      }
    }
  });
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ir::TensorMap> RunGraph(const ir::Graph& graph, const ir::GraphPlan& plan, const ir::TensorMap& inputs) {
  const int32_t n = graph.size();
  const std::vector<bool>& needed = plan.needed;
  const std::vector<int32_t>& last_use = plan.last_use;
  const ir::ElementwiseRuns fused = ir::FindElementwiseRuns(graph, needed, kFusedRunRules);
  std::vector<ir::HostTensor> values(n);
  std::vector<const ir::HostTensor*> operands;
  // Releases what the evaluation of `id` was the last to read.
  auto release = [&](ir::ValueId id) {
    for (ir::ValueId operand : graph.node(id).operands) {
      if (last_use[operand] == id) values[operand] = ir::HostTensor();
    }
    if (last_use[id] == -1) values[id] = ir::HostTensor();
  };
  for (ir::ValueId id = 0; id < n; ++id) {
    if (!needed[id] || fused.role[id] == ir::ElementwiseRuns::kInsideRun) continue;  // evaluated with its run
    const ir::Node& node = graph.node(id);
    if (fused.role[id] >= 0) {
      const std::vector<ir::ValueId>& run = fused.runs[static_cast<size_t>(fused.role[id])];
      if (absl::Status status = EvaluateFusedRun(graph, run, last_use, values); !status.ok()) return status;
      for (ir::ValueId member : run) release(member);
      continue;
    }
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
    release(id);
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
  // are added in replica order (ir/all_reduce.h). On the reference
  // kernels, up to one microbatch per kernel thread runs at once (a small
  // model's kernels alone cannot keep the threads busy): the outputs of a
  // window of them are kept, then added in microbatch order, so the bits are
  // those of one at a time.
  const int32_t window = runner ? 1 : std::max(1, tbb::this_task_arena::max_concurrency());
  const ir::GraphPlan plan = ir::PlanGraph(step.microbatch);
  StepResult result;
  ir::TensorMap accumulators;
  for (int32_t replica = 0; replica < step.num_replicas; ++replica) {
    ir::TensorMap replica_sums;
    for (int32_t first = 0; first < step.num_microbatches; first += window) {
      const int32_t count = std::min(window, step.num_microbatches - first);
      const size_t base = static_cast<size_t>(replica) * step.num_microbatches + first;
      std::vector<absl::StatusOr<ir::TensorMap>> outputs(static_cast<size_t>(count));
      if (runner) {
        outputs[0] = runner(step.microbatch, MicrobatchInputs(state, microbatches[base]));
      } else {
        internal::ParallelFor(count, 1, [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i) {
            outputs[i] = RunGraph(step.microbatch, plan, MicrobatchInputs(state, microbatches[base + i]));
          }
        });
      }
      for (int32_t i = 0; i < count; ++i) {
        const size_t m = base + i;
        if (!outputs[i].ok()) {
          return absl::Status(outputs[i].status().code(),
                              absl::StrCat("microbatch ", m, ": ", outputs[i].status().message()));
        }
        const ir::TensorMap finished = *std::move(outputs[i]);  // freed once added
        result.losses.push_back(finished.at("loss").f32()[0]);
        ir::TensorMap gradients;
        for (const ir::Accumulator& acc : step.accumulators) gradients[acc.name] = finished.at(acc.source);
        if (absl::Status status = AddInto(replica_sums, gradients, absl::StrCat("microbatch ", m)); !status.ok()) {
          return status;
        }
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
