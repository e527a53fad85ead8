#include "ir/trace.h"

#include <cmath>
#include <map>

#include "absl/strings/str_cat.h"
#include "ir/autodiff.h"
#include "ir/limits.h"
#include "ir/verifier.h"

namespace tandem {
namespace {

// Runs the model on a tracer and checks what every step needs.
absl::Status TraceModel(const ModelFunction& model, Tracer& tracer, const TraceOptions& options,
                        Tensor& result) {
  if (options.num_microbatches < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("the number of microbatches must be at least 1, got ", options.num_microbatches));
  }
  if (options.num_replicas < 1 || options.num_replicas > ir::kMaxReplicas) {
    return absl::InvalidArgumentError(absl::StrCat("the number of data-parallel replicas must be in [1, ",
                                                   ir::kMaxReplicas, "], got ", options.num_replicas));
  }
  result = model(tracer);
  if (!tracer.status().ok()) return tracer.status();
  if (!result.valid()) return absl::InvalidArgumentError("the model returned no tensor");
  // A pipeline_yield closing the last stage, or branches the model never
  // merges, would leave an empty stage.
  const ir::GraphBuilder& builder = tracer.builder();
  for (int32_t stage = 0; stage < tracer.num_stages(); ++stage) {
    if (!builder.StageHasOps(stage)) {
      return absl::InvalidArgumentError(absl::StrCat(
          builder.StageName(stage), " has no ops: mark stage ends with pipeline_yield between stages, not after "
          "the last one, and merge branches with an op after the last one closes"));
    }
  }
  // Every stage must feed the result, or its work would reach nothing.
  const ir::StageGraph stages = tracer.stage_graph();
  const int32_t result_stage = tracer.graph().node(result.id()).stage;
  for (int32_t stage = 0; stage < tracer.num_stages(); ++stage) {
    if (!stages.Reaches(stage, result_stage)) {
      return absl::InvalidArgumentError(absl::StrCat(
          builder.StageName(stage), " does not feed ", builder.StageName(result_stage),
          ", where the model's result is computed: merge every branch before the result"));
    }
  }
  return absl::OkStatus();
}

// Sets the step's update groups and version delays for `updates`, or says
// why the model cannot train that way.
absl::Status SetWeightUpdates(ir::TrainStep& step, const WeightUpdates& updates) {
  using Mode = WeightUpdates::Mode;
  if (updates.mode == Mode::kFlush) return absl::OkStatus();
  const char* name = updates.mode == Mode::kPipeDream ? "pipedream" : "2bw";
  if (step.num_replicas != 1) {
    return absl::InvalidArgumentError(absl::StrCat(name, " runs one pipeline: data-parallel replicas (",
                                                   step.num_replicas, ") are not supported with it"));
  }
  if (!step.stage_edges.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(name, " needs a chain of stages; the model's stages form a DAG"));
  }
  if (updates.mode == Mode::kPipeDream) {
    if (step.num_stages - 1 > ir::kMaxVersionDelay) {
      return absl::InvalidArgumentError(absl::StrCat("pipedream: ", step.num_stages, " stages would keep up to ",
                                                     step.num_stages, " weight versions; at most ",
                                                     ir::kMaxVersionDelay + 1, " are supported"));
    }
    step.microbatches_per_update = 1;
    for (int32_t stage = 0; stage < step.num_stages; ++stage) step.version_delay.push_back(step.num_stages - 1 - stage);
    return absl::OkStatus();
  }
  if (updates.every < 1 || step.num_microbatches % updates.every != 0) {
    return absl::InvalidArgumentError(absl::StrCat("2bw updates every ", updates.every,
                                                   " microbatches, which must be at least 1 and divide the step's ",
                                                   step.num_microbatches));
  }
  step.microbatches_per_update = updates.every;
  step.version_delay.assign(static_cast<size_t>(step.num_stages), 1);
  return absl::OkStatus();
}

// A parameter's gradient as the update applies it: its accumulators summed
// in stage order, averaged over the microbatches of one update (the global
// batch's, unless the step is asynchronous). Traced on `builder`, with the
// accumulators as its inputs.
Tensor AveragedGradient(ir::GraphBuilder& builder, const ir::TrainStep& step, const ir::StateSpec& parameter,
                        const std::vector<const ir::ParameterGradient*>& parts, const ir::SourceLocation& location) {
  Tensor gradient;
  for (const ir::ParameterGradient* part : parts) {
    Tensor acc(&builder, builder.AddInput(ir::AccumulatorName(part->parameter, part->stage),
                                          ir::InputRole::kAccumulator, parameter.type, location));
    gradient = gradient.valid() ? gradient + acc : acc;
  }
  return gradient * (1.0 / (static_cast<double>(step.group_size()) * step.num_replicas));
}

using GradientParts = std::map<std::string, std::vector<const ir::ParameterGradient*>>;

// Traces the norm graph (ir/train_step.h): each stage's sum of squared
// averaged gradients, over the parameters it updates (those whose first
// gradient part it computes), in state order.
absl::Status TraceNormPartials(ir::TrainStep& step, const GradientParts& by_parameter) {
  ir::GraphBuilder norm(&step.norm);
  norm.set_phase(ir::Phase::kUpdate);
  std::map<int32_t, Tensor> partials;
  for (const ir::StateSpec& parameter : step.state) {
    auto found = by_parameter.find(parameter.name);
    if (found == by_parameter.end()) continue;
    const int32_t stage = found->second.front()->stage;
    norm.set_stage(stage);
    Tensor gradient = AveragedGradient(norm, step, parameter, found->second, {});
    Tensor squares = sum(gradient * gradient);
    Tensor& partial = partials[stage];
    partial = partial.valid() ? partial + squares : squares;
  }
  for (const auto& [stage, partial] : partials) step.norm.AddOutput(ir::NormPartialName(stage), partial.id());
  return norm.status();
}

// Traces, on the update's `builder`, the sum of every stage's partial in
// stage order: the squared global norm, the same on every stage.
Tensor TraceSquaredNorm(const ir::TrainStep& step, ir::GraphBuilder& builder) {
  Tensor total;
  for (const ir::GraphOutput& output : step.norm.outputs()) {
    builder.set_stage(step.norm.node(output.value).stage);
    Tensor input(&builder, builder.AddInput(output.name, ir::InputRole::kGradientNorm, {ir::DType::kF32, {}}, {}));
    total = total.valid() ? total + input : input;
  }
  return total;
}

// The update's gradient norm: the clipping coefficient
// min(1, max_norm / (norm + 1e-6)) (torch.nn.utils.clip_grad_norm_'s) when
// `clip_grad_norm` is above 0, and whether the norm is finite (1 or 0)
// when the step skips non-finite updates.
struct NormUse {
  Tensor clip;
  Tensor finite;
};

absl::StatusOr<NormUse> TraceNormUse(ir::TrainStep& step, const GradientParts& by_parameter,
                                     const TraceOptions& options, ir::GraphBuilder& builder) {
  const bool clips = options.clip_grad_norm != 0;
  if (clips && (!std::isfinite(options.clip_grad_norm) || options.clip_grad_norm <= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("clip_grad_norm ", options.clip_grad_norm, " must be a finite number above 0"));
  }
  if (step.asynchronous()) {
    if (clips) {
      return absl::InvalidArgumentError(
          "clipping by the global norm needs a synchronous step: pipedream and 2bw update each stage on its own");
    }
    if (options.skip_nonfinite_updates) {
      return absl::InvalidArgumentError(
          "skipping non-finite updates needs a synchronous step: pipedream and 2bw update each stage on its own");
    }
    return NormUse{};  // no global norm: each stage's update has its own group
  }
  if (absl::Status status = TraceNormPartials(step, by_parameter); !status.ok()) return status;
  NormUse use;
  if (!clips && !options.skip_nonfinite_updates) return use;
  Tensor total = TraceSquaredNorm(step, builder);
  if (clips) {
    Tensor coefficient = options.clip_grad_norm / (sqrt(total) + 1e-6);
    use.clip = -maximum(-coefficient, full(coefficient, {}, -1.0));
  }
  // x - x is 0 for a finite x, NaN for an infinity or a NaN.
  if (options.skip_nonfinite_updates) use.finite = equal(total - total, full(total, {}, 0.0));
  return use;
}

// Traces the update graph: per parameter, its averaged gradient (clipped
// when `clip_grad_norm` is above 0), and the optimizer's update (kept only
// when the norm is finite, when the step skips non-finite updates). A
// parameter with a version delay d also shifts its stashed versions:
// stash<k> takes stash<k-1> (stash0 being the parameter as it was), and
// the oldest drops.
absl::Status TraceUpdate(ir::TrainStep& step, const std::vector<ir::ParameterGradient>& gradients,
                         const Optimizer& optimizer, const TraceOptions& options) {
  ir::GraphBuilder builder(&step.update);
  builder.set_phase(ir::Phase::kUpdate);
  Tensor step_number(&builder, builder.AddInput("step", ir::InputRole::kStep, {ir::DType::kF32, {}}, {}));
  GradientParts by_parameter;
  for (const ir::ParameterGradient& g : gradients) by_parameter[g.parameter].push_back(&g);
  absl::StatusOr<NormUse> norm = TraceNormUse(step, by_parameter, options, builder);
  if (!norm.ok()) return norm.status();

  std::map<std::string, ir::SourceLocation> declared_at;
  for (ir::ValueId id : step.microbatch.Inputs()) {
    const ir::Node& node = step.microbatch.node(id);
    declared_at[node.attributes.GetString("name")] = node.location;
  }
  std::vector<ir::StateSpec> slots;
  for (const ir::StateSpec& parameter : std::vector<ir::StateSpec>(step.state)) {
    auto found = by_parameter.find(parameter.name);
    if (found == by_parameter.end()) continue;  // unused by the loss: not updated
    const std::vector<const ir::ParameterGradient*>& parts = found->second;
    const int32_t delay = step.VersionDelay(parts.front()->stage);
    for (const ir::ParameterGradient* part : parts) {
      if (step.VersionDelay(part->stage) != delay) {
        return absl::InvalidArgumentError(absl::StrCat(
            "parameter '", parameter.name, "' is used by stages ", parts.front()->stage, " and ", part->stage,
            ", which compute on different weight versions under pipedream; untie it, or use 2bw"));
      }
    }
    builder.set_stage(parts.front()->stage);
    const ir::SourceLocation location = declared_at[parameter.name];
    builder.set_location_override(location);
    Tensor p(&builder, builder.AddInput(parameter.name, ir::InputRole::kParameter, parameter.type, location));
    Tensor gradient = AveragedGradient(builder, step, parameter, parts, location);
    if (norm->clip.valid()) gradient = gradient * norm->clip;
    std::vector<Tensor> slot_values;
    std::vector<std::string> slot_names;
    for (const std::string& slot : optimizer.SlotNames()) {
      std::string name = absl::StrCat(optimizer.name(), ".", slot, ".", parameter.name);
      slots.push_back({name, parameter.type, ir::StateRole::kOptimizerState, {}, parameter.name});
      slot_names.push_back(name);
      slot_values.emplace_back(&builder, builder.AddInput(name, ir::InputRole::kOptimizerState, parameter.type, location));
    }
    std::vector<Tensor> updated = optimizer.Update({parameter.name, p, gradient, slot_values, step_number});
    if (norm->finite.valid()) {  // a step whose norm is not finite leaves the parameter and its slots as they were
      updated[0] = where(norm->finite, updated[0], p);
      for (size_t i = 0; i < slot_values.size(); ++i) updated[i + 1] = where(norm->finite, updated[i + 1], slot_values[i]);
    }
    if (!builder.ok()) return builder.status();
    step.update.AddOutput(parameter.name, updated[0].id());
    for (size_t i = 0; i < slot_names.size(); ++i) step.update.AddOutput(slot_names[i], updated[i + 1].id());
    Tensor newer = p;
    for (int32_t k = 1; k <= delay; ++k) {
      const std::string name = ir::StashName(parameter.name, k);
      slots.push_back({name, parameter.type, ir::StateRole::kOptimizerState, parameter.init, parameter.name});
      Tensor older(&builder, builder.AddInput(name, ir::InputRole::kOptimizerState, parameter.type, location));
      step.update.AddOutput(name, newer.id());
      newer = older;
    }
  }
  step.state.insert(step.state.end(), slots.begin(), slots.end());
  return builder.status();
}

// Traces the model's forward into a step whose microbatch graph outputs the
// model's result as `output_name`.
absl::StatusOr<ir::TrainStep> TraceForwardGraph(const std::string& name, const ModelFunction& model,
                                                const TraceOptions& options, const std::string& output_name) {
  Tracer tracer(options.seed);
  Tensor result;
  if (absl::Status status = TraceModel(model, tracer, options, result); !status.ok()) return status;
  ir::TrainStep step;
  step.name = name;
  step.num_stages = tracer.num_stages();
  step.stage_edges = tracer.stage_graph().StoredEdges();
  step.num_microbatches = options.num_microbatches;
  step.num_replicas = options.num_replicas;
  step.state = tracer.parameters();
  for (const Tracer::CacheUse& cache : tracer.caches()) {
    for (int32_t m = 0; m < options.num_microbatches; ++m) {
      step.state.push_back({ir::CacheStateName(cache.name, m), cache.type, ir::StateRole::kCache, ir::Initializer{}});
    }
  }
  step.microbatch = std::move(tracer.graph());
  step.microbatch.AddOutput(output_name, result.id());
  for (const Tracer::CacheUse& cache : tracer.caches()) {
    if (cache.written != ir::kInvalidValue) step.microbatch.AddOutput(cache.name, cache.written);
  }
  return step;
}

}  // namespace

absl::StatusOr<ir::TrainStep> TraceTrainStep(const std::string& name, const ModelFunction& model,
                                             const Optimizer& optimizer, const TraceOptions& options) {
  absl::StatusOr<ir::TrainStep> traced = TraceForwardGraph(name, model, options, "loss");
  if (!traced.ok()) return traced.status();
  ir::TrainStep& step = *traced;
  const ir::ValueId loss = *step.microbatch.FindOutput("loss");
  absl::StatusOr<std::vector<ir::ParameterGradient>> gradients = ir::AppendBackward(step.microbatch, loss);
  if (!gradients.ok()) return gradients.status();
  for (const ir::ParameterGradient& g : *gradients) {
    std::string output = ir::GradientName(g.parameter, g.stage);
    step.microbatch.AddOutput(output, g.value);
    step.accumulators.push_back({ir::AccumulatorName(g.parameter, g.stage), output});
  }
  if (absl::Status status = SetWeightUpdates(step, options.updates); !status.ok()) return status;
  if (absl::Status status = TraceUpdate(step, *gradients, optimizer, options); !status.ok()) {
    return status;
  }
  if (absl::Status status = ir::VerifyTrainStep(step); !status.ok()) return status;
  return traced;
}

absl::StatusOr<ir::TrainStep> TraceForwardStep(const std::string& name, const ModelFunction& model,
                                               const TraceOptions& options) {
  absl::StatusOr<ir::TrainStep> step = TraceForwardGraph(name, model, options, "output");
  if (!step.ok()) return step.status();
  if (absl::Status status = ir::VerifyTrainStep(*step); !status.ok()) return status;
  return step;
}

}  // namespace tandem
