#include "ir/verifier.h"

#include <map>
#include <set>
#include <variant>

#include "absl/strings/str_cat.h"
#include "ir/limits.h"
#include "ir/op_def.h"
#include "ir/shape_rules.h"

namespace tandem::ir {
namespace {

std::string Where(const Graph& graph, ValueId id) {
  return absl::StrCat("graph @", graph.name(), ": ", DescribeValue(graph, id));
}

absl::Status Fail(const Graph& graph, ValueId id, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(Where(graph, id), ": ", what));
}

absl::Status VerifyNode(const Graph& graph, ValueId id) {
  const Node& node = graph.node(id);
  if (std::string problem = OperandCountProblem(node.op, node.operands.size()); !problem.empty()) {
    return Fail(graph, id, problem);
  }
  for (ValueId operand : node.operands) {
    if (operand < 0 || operand >= id) {
      return Fail(graph, id, absl::StrCat("operand %", operand, " is not an earlier value"));
    }
  }
  const OpDef& def = Def(node.op);
  for (int i = 0; i < def.num_attributes(); ++i) {
    const AttributeSpec& spec = def.attributes[i];
    auto it = node.attributes.values().find(spec.name);
    if (it == node.attributes.values().end() ? spec.required : !HoldsKind(it->second, spec.kind)) {
      return Fail(graph, id,
                  absl::StrCat("attribute '", spec.name, "' is ",
                               it == node.attributes.values().end() ? "missing" : "of the wrong kind", " (",
                               def.name, " reads an attribute of kind ", AttributeKindName(spec.kind), ")"));
    }
  }
  if (node.op == OpKind::kInput || node.op == OpKind::kConstant) return absl::OkStatus();
  std::vector<TensorType> types;
  for (ValueId operand : node.operands) types.push_back(graph.type(operand));
  absl::StatusOr<TensorType> inferred = InferResultType(node.op, types, node.attributes);
  if (!inferred.ok()) return Fail(graph, id, inferred.status().message());
  if (*inferred != node.type) {
    return Fail(graph, id, absl::StrCat("declared type ", TypeToString(node.type), " but the op gives ",
                                        TypeToString(*inferred)));
  }
  if (node.phase == Phase::kForward) {
    for (ValueId operand : node.operands) {
      const Node& producer = graph.node(operand);
      if (producer.op != OpKind::kInput && producer.phase == Phase::kForward && producer.stage > node.stage) {
        return Fail(graph, id, absl::StrCat("forward op of stage ", node.stage, " reads %", operand,
                                            " of the later stage ", producer.stage));
      }
    }
  }
  return absl::OkStatus();
}

// The norm graph (the stages' gradient norms) reads only accumulators and
// outputs one f32 scalar per stage, NormPartialName(stage), computed on
// that stage; the update reads either exactly those partials as its
// "gradient_norm" inputs (clipping, skipping non-finite updates) or none.
absl::Status VerifyNormGraph(const TrainStep& step, const std::set<std::string>& update_inputs) {
  std::set<std::string> accumulators;
  for (const Accumulator& acc : step.accumulators) accumulators.insert(acc.name);
  for (ValueId id : step.norm.Inputs()) {
    const Node& node = step.norm.node(id);
    if (!HasRole(node, InputRole::kAccumulator) || !accumulators.count(node.attributes.GetString("name"))) {
      return Fail(step.norm, id, "the norm graph reads only the step's accumulators");
    }
  }
  std::set<std::string> partials;
  for (const GraphOutput& output : step.norm.outputs()) {
    const Node& node = step.norm.node(output.value);
    if (output.name != NormPartialName(node.stage) || node.type != TensorType{DType::kF32, {}}) {
      return absl::InvalidArgumentError(absl::StrCat("norm output '", output.name, "' is not the f32 scalar '",
                                                     NormPartialName(node.stage), "' of its stage ", node.stage));
    }
    partials.insert(output.name);
  }
  const bool reads_norm = step.update_reads_gradient_norm();
  for (const std::string& partial : partials) {
    if (reads_norm && !update_inputs.count(partial)) {
      return absl::InvalidArgumentError(absl::StrCat("norm output '", partial,
                                                     "' is not an input of the update, which reads other stages'"));
    }
  }
  for (ValueId id : step.update.Inputs()) {
    const Node& node = step.update.node(id);
    if (HasRole(node, InputRole::kGradientNorm) && !partials.count(node.attributes.GetString("name"))) {
      return Fail(step.update, id, "a gradient_norm input that the norm graph does not output");
    }
  }
  return absl::OkStatus();
}

// Every forward value read across stages flows along a path of the stage
// graph, so that the stages' order in any valid schedule has it computed
// before it is read.
absl::Status VerifyStageDataflow(const TrainStep& step) {
  if (step.stage_edges.empty()) return absl::OkStatus();  // a chain orders every pair of stages
  const StageGraph stages = step.stage_graph();
  std::set<std::pair<int32_t, int32_t>> checked;
  const Graph& graph = step.microbatch;
  for (ValueId id = 0; id < graph.size(); ++id) {
    const Node& node = graph.node(id);
    if (node.phase != Phase::kForward || node.op == OpKind::kInput) continue;
    for (ValueId operand : node.operands) {
      const Node& producer = graph.node(operand);
      if (producer.op == OpKind::kInput || producer.op == OpKind::kConstant || producer.phase != Phase::kForward ||
          producer.stage == node.stage || !checked.insert({producer.stage, node.stage}).second) {
        continue;
      }
      if (!stages.Reaches(producer.stage, node.stage)) {
        return Fail(graph, id, absl::StrCat("forward op of stage ", node.stage, " reads %", operand, " of stage ",
                                            producer.stage, ", but the stage graph has no path ", producer.stage,
                                            "->...->", node.stage));
      }
    }
  }
  return absl::OkStatus();
}

// The step's counts (microbatches, replicas, stages, the update group, the
// version delays) against their ranges.
absl::Status CheckStepCounts(const TrainStep& step) {
  if (step.num_microbatches < 1) {
    return absl::InvalidArgumentError(absl::StrCat("train step '", step.name, "' has ", step.num_microbatches,
                                                   " microbatches; it needs at least 1"));
  }
  if (step.num_replicas < 1 || step.num_replicas > kMaxReplicas) {
    return absl::InvalidArgumentError(absl::StrCat("train step '", step.name, "' has ", step.num_replicas,
                                                   " replicas, outside [1, ", kMaxReplicas, "]"));
  }
  if (step.num_stages < 1 || step.num_stages > kMaxStages) {
    return absl::InvalidArgumentError(absl::StrCat("train step '", step.name, "' has ", step.num_stages,
                                                   " stages, outside [1, ", kMaxStages, "]"));
  }
  if (step.microbatches_per_update < 0 || step.microbatches_per_update > step.num_microbatches ||
      (step.microbatches_per_update > 0 && step.num_microbatches % step.microbatches_per_update != 0)) {
    return absl::InvalidArgumentError(absl::StrCat("train step '", step.name, "' updates every ",
                                                   step.microbatches_per_update,
                                                   " microbatches, which must divide its ", step.num_microbatches));
  }
  if (!step.version_delay.empty() && step.version_delay.size() != static_cast<size_t>(step.num_stages)) {
    return absl::InvalidArgumentError(absl::StrCat("train step '", step.name, "' has ", step.version_delay.size(),
                                                   " version delays for ", step.num_stages, " stages"));
  }
  for (int32_t delay : step.version_delay) {
    if (delay < 0 || delay > kMaxVersionDelay) {
      return absl::InvalidArgumentError(absl::StrCat("train step '", step.name, "' has a version delay of ", delay,
                                                     ", outside [0, ", kMaxVersionDelay, "]"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status VerifyGraph(const Graph& graph) {
  std::set<std::string> input_names;
  for (ValueId id = 0; id < graph.size(); ++id) {
    if (absl::Status status = VerifyNode(graph, id); !status.ok()) return status;
    const Node& node = graph.node(id);
    if (node.op == OpKind::kInput && !input_names.insert(node.attributes.GetString("name")).second) {
      return Fail(graph, id, absl::StrCat("input '", node.attributes.GetString("name"), "' declared twice"));
    }
  }
  std::set<std::string> output_names;
  for (const GraphOutput& output : graph.outputs()) {
    if (output.value < 0 || output.value >= graph.size()) {
      return absl::InvalidArgumentError(absl::StrCat("graph @", graph.name(), ": output '", output.name,
                                                     "' names %", output.value, ", which does not exist"));
    }
    if (!output_names.insert(output.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("graph @", graph.name(), ": output '", output.name, "' appears twice"));
    }
  }
  return absl::OkStatus();
}

// The caches of a forward step (StateRole::kCache): each cache read (an
// input of role "cache") or written (an output of its name) has a state
// tensor of its type for every microbatch, and is read and written on one
// stage, whose actor keeps it.
absl::Status VerifyCaches(const TrainStep& step, const std::map<std::string, const StateSpec*>& state) {
  const Graph& graph = step.microbatch;
  std::map<std::string, int32_t> stage_of;  // each cache's stage, from its first use
  auto check = [&](const std::string& cache, const TensorType& type, int32_t stage,
                   const std::string& where) -> absl::Status {
    for (int32_t m = 0; m < step.num_microbatches; ++m) {
      auto it = state.find(CacheStateName(cache, m));
      if (it == state.end() || it->second->role != StateRole::kCache) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": cache '", cache, "' has no state '",
                                                       CacheStateName(cache, m), "' of role cache for microbatch ",
                                                       m));
      }
      if (it->second->type != type) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": cache '", cache, "' is ", TypeToString(type),
                                                       ", its state '", it->first, "' ",
                                                       TypeToString(it->second->type)));
      }
    }
    auto [it, inserted] = stage_of.emplace(cache, stage);
    if (!inserted && it->second != stage) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": cache '", cache, "' is used on stage ", stage,
                                                     " and on stage ", it->second,
                                                     ": a cache is read and written on one stage"));
    }
    return absl::OkStatus();
  };
  for (ValueId id = 0; id < graph.size(); ++id) {
    const Node& node = graph.node(id);
    for (ValueId operand : node.operands) {
      const Node& read = graph.node(operand);
      if (!HasRole(read, InputRole::kCache)) continue;
      if (absl::Status s = check(read.attributes.GetString("name"), read.type, node.stage, DescribeValue(graph, id));
          !s.ok()) {
        return s;
      }
    }
  }
  bool has_caches = !stage_of.empty();
  for (const GraphOutput& output : graph.outputs()) {
    auto it = state.find(CacheStateName(output.name, 0));
    if (it == state.end() || it->second->role != StateRole::kCache) continue;
    has_caches = true;
    const Node& node = graph.node(output.value);
    if (absl::Status s = check(output.name, node.type, node.stage, absl::StrCat("output '", output.name, "'"));
        !s.ok()) {
      return s;
    }
  }
  if (has_caches && !step.forward_only()) {
    return absl::InvalidArgumentError(absl::StrCat("train step '", step.name,
                                                   "' keeps caches: only a forward step may (no gradient flows "
                                                   "through a cache)"));
  }
  return absl::OkStatus();
}

absl::Status VerifyTrainStep(const TrainStep& step) {
  if (absl::Status status = CheckStepCounts(step); !status.ok()) return status;
  if (absl::Status status = CheckStageEdges(step.num_stages, step.stage_edges); !status.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("train step '", step.name, "': ", status.message()));
  }
  std::map<std::string, const StateSpec*> state;
  for (const StateSpec& spec : step.state) state.emplace(spec.name, &spec);
  auto find_state = [&](const std::string& name) -> const StateSpec* {
    auto it = state.find(name);
    return it == state.end() ? nullptr : it->second;
  };
  for (const Graph* graph : {&step.microbatch, &step.norm, &step.update}) {
    if (absl::Status status = VerifyGraph(*graph); !status.ok()) return status;
    for (ValueId id = 0; id < graph->size(); ++id) {
      const Node& node = graph->node(id);
      if (node.stage < 0 || node.stage >= step.num_stages) {
        return Fail(*graph, id, absl::StrCat("stage ", node.stage, " outside [0, ", step.num_stages, ")"));
      }
      if (node.op != OpKind::kInput) continue;
      const std::string& role = node.attributes.GetString("role");
      const std::string& name = node.attributes.GetString("name");
      if (graph == &step.microbatch && name == "step") {
        return Fail(*graph, id, "a microbatch input may not be called 'step': that is the update's step number");
      }
      const bool parameter = HasRole(node, InputRole::kParameter);
      if (!parameter && !HasRole(node, InputRole::kOptimizerState)) continue;
      const StateSpec* spec = find_state(name);
      StateRole expected = parameter ? StateRole::kParameter : StateRole::kOptimizerState;
      if (spec == nullptr || spec->role != expected) {
        return Fail(*graph, id, absl::StrCat(role, " '", name, "' is used but never declared"));
      }
      if (spec->type != node.type) {
        return Fail(*graph, id, absl::StrCat(role, " '", name, "' is declared ", TypeToString(spec->type),
                                             " but used as ", TypeToString(node.type)));
      }
    }
  }
  for (const StateSpec& spec : step.state) {
    if (spec.parameter.empty()) continue;
    const StateSpec* owner = find_state(spec.parameter);
    if (spec.role != StateRole::kOptimizerState || owner == nullptr || owner->role != StateRole::kParameter) {
      return absl::InvalidArgumentError(absl::StrCat("state '", spec.name, "' belongs to '", spec.parameter,
                                                     "', which is not a parameter"));
    }
  }
  if (!step.forward_only()) {
    for (const auto& [parameter, delay] : ParameterVersionDelays(step)) {
      for (int32_t k = 1; k <= delay; ++k) {
        const StateSpec* stash = find_state(StashName(parameter, k));
        if (stash == nullptr || stash->parameter != parameter) {
          return absl::InvalidArgumentError(absl::StrCat("parameter '", parameter, "' has a version delay of ", delay,
                                                         " but no state '", StashName(parameter, k), "' of it"));
        }
      }
    }
  }
  if (absl::Status status = VerifyStageDataflow(step); !status.ok()) return status;
  if (absl::Status status = VerifyCaches(step, state); !status.ok()) return status;
  std::set<std::string> outputs;
  for (const GraphOutput& output : step.microbatch.outputs()) outputs.insert(output.name);
  std::set<std::string> update_inputs;
  for (ValueId id : step.update.Inputs()) update_inputs.insert(step.update.node(id).attributes.GetString("name"));
  for (const Accumulator& acc : step.accumulators) {
    if (!outputs.count(acc.source)) {
      return absl::InvalidArgumentError(absl::StrCat("accumulator '", acc.name, "' sums '", acc.source,
                                                     "', which is not an output of the microbatch graph"));
    }
    if (!update_inputs.count(acc.name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("accumulator '", acc.name, "' is not an input of the update graph"));
    }
  }
  for (const GraphOutput& output : step.update.outputs()) {
    if (find_state(output.name) == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("update output '", output.name, "' names no state tensor"));
    }
  }
  return VerifyNormGraph(step, update_inputs);
}

}  // namespace tandem::ir
