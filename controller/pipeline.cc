#include "controller/pipeline.h"

#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace tandem::controller {
namespace {

// The fill job's name of a binding kFillPrefix + name, or nullopt.
std::optional<std::string> FillName(const std::string& binding) {
  if (!absl::StartsWith(binding, kFillPrefix)) return std::nullopt;
  return binding.substr(sizeof(kFillPrefix) - 1);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Pipeline>> Pipeline::Create(ir::TrainStep step, const schedules::Schedule& schedule,
                                                           const ir::StateSources& state,
                                                           std::unique_ptr<Launcher> launcher,
                                                           int64_t steps_done, const CompileOptions& options,
                                                           PipelineFill fill) {
  if (steps_done < 0) return absl::InvalidArgumentError("steps_done must not be negative");
  absl::StatusOr<CompiledStep> compiled = Compile(step, schedule, options);
  if (!compiled.ok()) return compiled.status();
  if (fill.job != nullptr) {
    if (absl::Status status = AddFill(schedule, *fill.job, fill.slots, *compiled); !status.ok()) return status;
  } else if (!fill.slots.empty()) {
    return absl::InvalidArgumentError("fill slots without a fill job");
  }
  // Every actor's program and state; replicas share their position's
  // program (CompiledStep::ProgramOf).
  std::vector<ir::ActorProgram> programs;
  const ir::StateSources fill_state = fill.job != nullptr ? ir::TensorSources(fill.job->state) : ir::StateSources();
  std::vector<ir::StateSources> states;
  for (int32_t actor = 0; actor < compiled->num_actors; ++actor) {
    const ir::ActorProgram& program = compiled->ProgramOf(actor);
    programs.push_back(program);
    ir::StateSources actor_state;
    for (const ir::Buffer& buffer : program.buffers) {
      if (buffer.kind != ir::BufferKind::kState) continue;
      const std::optional<std::string> fill_name = FillName(buffer.binding);
      const ir::StateSources& sources = fill_name.has_value() ? fill_state : state;
      auto it = sources.find(fill_name.value_or(buffer.binding));
      if (it == sources.end()) {
        return absl::InvalidArgumentError(absl::StrCat("no value for state '", buffer.binding, "' of actor ",
                                                       actor));
      }
      if (it->second.type != buffer.type) {
        return absl::InvalidArgumentError(absl::StrCat("state '", buffer.binding, "' of actor ", actor, " is ",
                                                       ir::TypeToString(buffer.type), ", its source gives ",
                                                       ir::TypeToString(it->second.type)));
      }
      actor_state[buffer.binding] = it->second;
    }
    states.push_back(std::move(actor_state));
  }
  if (absl::Status status = CheckMemoryFit(programs, launcher->MemoryPools(compiled->num_actors)); !status.ok()) {
    return status;
  }
  if (absl::Status status = launcher->Start(programs, states); !status.ok()) return status;
  std::vector<std::set<std::string>> started_state;
  for (const ir::StateSources& actor_state : states) {
    std::set<std::string>& names = started_state.emplace_back();
    for (const auto& [binding, source] : actor_state) names.insert(binding);
  }
  return std::unique_ptr<Pipeline>(new Pipeline(std::move(step), *std::move(compiled), std::move(launcher), steps_done,
                                                std::move(fill), options, std::move(started_state)));
}

absl::StatusOr<int32_t> Pipeline::AddStep(ir::TrainStep step, const schedules::Schedule& schedule) {
  if (fill_.job != nullptr) return absl::FailedPreconditionError("a pipeline with a fill job runs one step");
  absl::StatusOr<CompiledStep> compiled = Compile(step, schedule, options_);
  if (!compiled.ok()) return compiled.status();
  if (compiled->num_actors != this->compiled().num_actors) {
    return absl::InvalidArgumentError(absl::StrCat("the added step runs on ", compiled->num_actors,
                                                   " actors, the pipeline's on ", this->compiled().num_actors));
  }
  for (int32_t actor = 0; actor < compiled->num_actors; ++actor) {
    for (const ir::Buffer& buffer : compiled->ProgramOf(actor).buffers) {
      if (buffer.kind != ir::BufferKind::kState || started_state_[actor].contains(buffer.binding)) continue;
      return absl::InvalidArgumentError(absl::StrCat("the added step '", step.name, "' needs state '", buffer.binding,
                                                     "' on actor ", actor, ", which the actor was not started with"));
    }
  }
  steps_.push_back({std::move(step), *std::move(compiled)});
  return static_cast<int32_t>(steps_.size() - 1);
}

absl::Status Pipeline::UseStep(int32_t index) {
  if (index < 0 || index >= static_cast<int32_t>(steps_.size())) {
    return absl::InvalidArgumentError(absl::StrCat("no step ", index, " (the pipeline has ", steps_.size(), ")"));
  }
  if (static_cast<size_t>(index) == current_) return absl::OkStatus();
  const CompiledStep& next = steps_[index].compiled;
  std::vector<ir::ActorProgram> programs;
  for (int32_t actor = 0; actor < next.num_actors; ++actor) programs.push_back(next.ProgramOf(actor));
  if (absl::Status status = launcher_->UsePrograms(programs); !status.ok()) return status;
  current_ = static_cast<size_t>(index);
  return absl::OkStatus();
}

absl::StatusOr<StepReport> Pipeline::Step(const std::vector<ir::TensorMap>& microbatches, Dispatch dispatch,
                                          const std::vector<ir::TensorMap>& fill_inputs) {
  absl::StatusOr<std::vector<ir::StepInputs>> inputs = NextInputs(microbatches, fill_inputs);
  if (!inputs.ok()) return inputs.status();
  absl::StatusOr<std::vector<ir::StepOutputs>> results = launcher_->RunStep(steps_run_ + 1, *inputs, dispatch);
  if (!results.ok()) return results.status();
  return FinishStep(*std::move(results));
}

absl::StatusOr<std::vector<ir::StepInputs>> Pipeline::NextInputs(const std::vector<ir::TensorMap>& microbatches,
                                                                 const std::vector<ir::TensorMap>& fill_inputs) const {
  if (static_cast<int64_t>(fill_inputs.size()) != fill_.pieces()) {
    return absl::InvalidArgumentError(absl::StrCat("the step runs ", fill_.pieces(), " fill pieces, got inputs for ",
                                                   fill_inputs.size()));
  }
  if (static_cast<int32_t>(microbatches.size()) != compiled().global_microbatches()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the step is compiled for ", compiled().global_microbatches(), " microbatches",
        compiled().num_replicas == 1 ? ""
                                     : absl::StrCat(" (", compiled().num_microbatches, " on each of ",
                                                    compiled().num_replicas, " replicas)"),
        ", got ", microbatches.size()));
  }
  const int64_t step_number = steps_run_ + 1;
  std::vector<ir::StepInputs> inputs(compiled().num_actors);
  for (int32_t actor = 0; actor < compiled().num_actors; ++actor) {
    for (const ir::Buffer& buffer : compiled().ProgramOf(actor).buffers) {
      if (buffer.kind != ir::BufferKind::kInput) continue;
      if (std::optional<std::string> name = FillName(buffer.binding); name.has_value()) {
        const ir::TensorMap& data = fill_inputs[buffer.microbatch];
        auto it = data.find(*name);
        if (it == data.end() || it->second.type() != buffer.type) {
          return absl::InvalidArgumentError(absl::StrCat("fill slot ", buffer.microbatch, " needs input '", *name,
                                                         "' of type ", ir::TypeToString(buffer.type)));
        }
        inputs[actor][{buffer.binding, buffer.microbatch}] = it->second;
        continue;
      }
      if (buffer.binding == "step") {  // the number of the step's update (of its group's, when it has several)
        const int64_t update = buffer.microbatch < 0
                                   ? step_number
                                   : (step_number - 1) * step().updates_per_step() + buffer.microbatch + 1;
        inputs[actor][{buffer.binding, buffer.microbatch}] = ir::HostTensor::Scalar(static_cast<float>(update));
        continue;
      }
      // Replica r's microbatch m is the global batch's r * M + m.
      const int32_t global = compiled().Replica(actor) * compiled().num_microbatches + buffer.microbatch;
      const ir::TensorMap& data = microbatches[global];
      auto it = data.find(buffer.binding);
      if (it == data.end()) {
        return absl::InvalidArgumentError(absl::StrCat("microbatch ", global, " has no input '",
                                                       buffer.binding, "'"));
      }
      if (it->second.type() != buffer.type) {
        return absl::InvalidArgumentError(absl::StrCat("input '", buffer.binding, "' must be ",
                                                       ir::TypeToString(buffer.type), ", got ",
                                                       ir::TypeToString(it->second.type())));
      }
      inputs[actor][{buffer.binding, buffer.microbatch}] = it->second;
    }
  }
  return inputs;
}

absl::StatusOr<StepReport> Pipeline::FinishStep(std::vector<ir::StepOutputs> results) {
  if (static_cast<int32_t>(results.size()) != compiled().num_actors) {
    return absl::InternalError(absl::StrCat("results of ", results.size(), " actors, the step has ",
                                            compiled().num_actors));
  }
  const int64_t step_number = steps_run_ + 1;
  steps_run_ = step_number;
  StepReport report;
  report.step = step_number;
  for (const ir::StepOutputs& result : results) report.rpcs += result.calls;
  const std::string result_name = step().forward_only() ? "output" : "loss";
  for (int32_t m = 0; m < compiled().global_microbatches(); ++m) {
    // Reported by an actor of its replica, under its number there.
    const int32_t replica = m / compiled().num_microbatches;
    const int32_t local = m % compiled().num_microbatches;
    const ir::HostTensor* found = nullptr;
    for (int32_t position = 0; position < compiled().actors_per_replica; ++position) {
      const ir::StepOutputs& result = results[replica * compiled().actors_per_replica + position];
      auto named = result.results.find(result_name);
      if (named == result.results.end()) continue;
      auto it = named->second.find(local);
      if (it != named->second.end()) found = &it->second;
    }
    if (found == nullptr) {
      return absl::InternalError(absl::StrCat("no actor reported the ", result_name, " of microbatch ", m));
    }
    if (step().forward_only()) {
      report.outputs.push_back(*found);
    } else {
      report.losses.push_back(found->f32()[0]);
    }
  }
  for (const ir::GraphOutput& output : step().norm.outputs()) {
    const int32_t stage = step().norm.node(output.value).stage;
    for (const ir::StepOutputs& result : results) {
      auto named = result.results.find(output.name);
      if (named == result.results.end() || named->second.empty()) continue;
      report.gradient_squares[stage] = named->second.begin()->second.f32()[0];
      break;
    }
    if (!report.gradient_squares.count(stage)) {
      return absl::InternalError(absl::StrCat("no actor reported ", output.name, ", stage ", stage,
                                              "'s gradient norm"));
    }
  }
  for (size_t actor = 0; actor < results.size(); ++actor) {
    ir::StepOutputs& result = results[actor];
    const std::vector<ir::Instruction>& instructions = compiled().ProgramOf(static_cast<int32_t>(actor)).instructions;
    int64_t busy = 0, fill_busy = 0;
    for (const ir::InstructionTiming& time : result.timings) {
      if (time.instruction < 0 || time.instruction >= static_cast<int32_t>(instructions.size())) continue;
      const ir::InstructionKind kind = instructions[time.instruction].kind;
      if (kind == ir::InstructionKind::kRun) busy += time.duration_ns;
      if (kind == ir::InstructionKind::kFill) fill_busy += time.duration_ns;
    }
    if (auto fill = result.results.find(kFillResult); fill != result.results.end()) {
      for (auto& [slot, tensor] : fill->second) report.fill_outputs.emplace(slot, tensor);
    }
    report.peak_live_bytes.push_back(result.peak_live_bytes);
    report.device_peak_bytes.push_back(result.device_peak_bytes);
    report.busy_ns.push_back(busy);
    report.fill_busy_ns.push_back(fill_busy);
    report.timings.push_back(std::move(result.timings));
    report.origin_ns.push_back(result.origin_ns);
    report.inputs_ns.push_back(result.inputs_ns);
    report.settle_ns.push_back(result.settle_ns);
  }
  return report;
}

absl::StatusOr<ir::TensorMap> Pipeline::State() {
  absl::StatusOr<std::vector<ir::TensorMap>> states = launcher_->ReadState();
  if (!states.ok()) return states.status();
  ir::TensorMap merged;
  for (size_t actor = 0; actor < states->size(); ++actor) {
    for (const auto& [name, tensor] : (*states)[actor]) {
      if (FillName(name).has_value()) continue;
      auto [it, inserted] = merged.emplace(name, tensor);
      if (!inserted && !it->second.BitwiseEquals(tensor)) {
        return absl::InternalError(absl::StrCat("state '", name, "' differs between its holders (actor ", actor,
                                                " and an earlier one)"));
      }
    }
  }
  return merged;
}

absl::StatusOr<std::vector<ir::TensorMap>> Pipeline::FillState() {
  absl::StatusOr<std::vector<ir::TensorMap>> states = launcher_->ReadState();
  if (!states.ok()) return states.status();
  std::vector<ir::TensorMap> fill(states->size());
  for (size_t actor = 0; actor < states->size(); ++actor) {
    for (const auto& [name, tensor] : (*states)[actor]) {
      if (std::optional<std::string> job_name = FillName(name); job_name.has_value()) fill[actor][*job_name] = tensor;
    }
  }
  return fill;
}

}  // namespace tandem::controller
