#include "tools/cli/threads_launcher.h"

#include <optional>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tandem::cli {
namespace {

actor::StepInputs ToStepInputs(const controller::ActorInputs& inputs) {
  actor::StepInputs converted;
  for (const auto& [key, tensor] : inputs) converted[{key.first, key.second}] = tensor;
  return converted;
}

// An executor's step outputs as an actor process reports them: timings
// relative to the actor's first instruction.
controller::ActorStepResult ToResult(actor::StepOutputs output) {
  controller::ActorStepResult result{std::move(output.results), output.peak_live_bytes, {}, 0};
  int64_t origin = -1;
  for (const actor::InstructionTiming& timing : output.timings) {
    if (timing.start_ns >= 0 && (origin < 0 || timing.start_ns < origin)) origin = timing.start_ns;
  }
  for (size_t i = 0; i < output.timings.size(); ++i) {
    const actor::InstructionTiming& timing = output.timings[i];
    if (timing.start_ns < 0) continue;
    result.timings.push_back({static_cast<int32_t>(i), timing.start_ns - origin, timing.end_ns - timing.start_ns});
  }
  result.origin_ns = origin;
  return result;
}

}  // namespace

absl::Status ThreadsLauncher::Start(const std::vector<ir::ActorProgram>& programs,
                                    const std::vector<ir::TensorMap>& states) {
  absl::StatusOr<std::unique_ptr<actor::ThreadCluster>> cluster = actor::ThreadCluster::Create(programs, device_);
  if (!cluster.ok()) return cluster.status();
  cluster_ = *std::move(cluster);
  ir::TensorMap all;
  for (const ir::TensorMap& state : states) all.insert(state.begin(), state.end());
  return cluster_->LoadState(all);
}

absl::StatusOr<std::vector<controller::ActorStepResult>> ThreadsLauncher::RunStep(
    int64_t step, const std::vector<controller::ActorInputs>& inputs, controller::Dispatch dispatch) {
  if (cluster_ == nullptr) return absl::FailedPreconditionError("the threads launcher has not been started");
  std::vector<actor::StepInputs> actor_inputs;
  for (const controller::ActorInputs& mine : inputs) actor_inputs.push_back(ToStepInputs(mine));
  absl::StatusOr<std::vector<actor::StepOutputs>> outputs =
      dispatch == controller::Dispatch::kFused ? cluster_->RunStep(step, actor_inputs, receive_timeout_)
                                               : cluster_->RunStepPerTask(step, actor_inputs, receive_timeout_);
  if (!outputs.ok()) return outputs.status();
  std::vector<controller::ActorStepResult> results;
  for (actor::StepOutputs& output : *outputs) results.push_back(ToResult(std::move(output)));
  return results;
}

absl::StatusOr<std::map<int32_t, controller::ActorStepResult>> ThreadsLauncher::RunRanges(
    int64_t step, const std::map<int32_t, controller::InstructionRange>& ranges,
    const std::vector<controller::ActorInputs>& inputs) {
  if (cluster_ == nullptr) return absl::FailedPreconditionError("the threads launcher has not been started");
  if (static_cast<int32_t>(inputs.size()) != cluster_->num_actors()) {
    return absl::InvalidArgumentError(absl::StrCat("step ", step, ": inputs for ", inputs.size(),
                                                   " actors, the cluster has ", cluster_->num_actors()));
  }
  for (const auto& [actor, range] : ranges) {
    if (actor < 0 || actor >= cluster_->num_actors()) return absl::InvalidArgumentError(absl::StrCat("no actor ", actor));
  }
  if (step != ranges_step_) {
    cluster_->network().Reset();
    ranges_step_ = step;
  }
  std::map<int32_t, absl::StatusOr<std::optional<actor::StepOutputs>>> done;
  for (const auto& [actor, range] : ranges) done.emplace(actor, std::nullopt);
  {
    std::vector<std::thread> threads;
    for (const auto& [actor, range] : ranges) {
      threads.emplace_back([&, actor = actor, range = range] {
        actor::Executor& executor = cluster_->executor(actor);
        absl::StatusOr<std::optional<actor::StepOutputs>>& result = done.at(actor);
        absl::Status status;
        if (range.begin == 0) status = executor.BeginStep(step, ToStepInputs(inputs[actor]));
        if (status.ok()) {
          status = executor.RunRange(range.begin, range.end, cluster_->network().Endpoint(actor), receive_timeout_);
        }
        if (!status.ok()) {
          cluster_->network().Endpoint(actor).Abort(
              absl::AbortedError(absl::StrCat("actor ", actor, " failed: ", status.message())));
          result = status;
          return;
        }
        if (range.end == static_cast<int32_t>(executor.program().instructions.size())) {
          absl::StatusOr<actor::StepOutputs> outputs = executor.FinishStep();
          if (!outputs.ok()) {
            result = outputs.status();
          } else {
            result = std::optional<actor::StepOutputs>(*std::move(outputs));
          }
        }
      });
    }
    for (std::thread& thread : threads) thread.join();
  }
  std::map<int32_t, controller::ActorStepResult> results;
  for (auto& [actor, result] : done) {
    if (!result.ok()) return result.status();
    results[actor] = result->has_value() ? ToResult(**std::move(result)) : controller::ActorStepResult{};
  }
  return results;
}

absl::StatusOr<ir::HostTensor> ThreadsLauncher::ReadBuffer(int32_t actor, const std::string& name) {
  if (cluster_ == nullptr) return absl::FailedPreconditionError("the threads launcher has not been started");
  if (actor < 0 || actor >= cluster_->num_actors()) {
    return absl::InvalidArgumentError(absl::StrCat("no actor ", actor, " (the job has ", cluster_->num_actors(), ")"));
  }
  return cluster_->executor(actor).ReadBuffer(name);
}

absl::StatusOr<std::vector<ir::TensorMap>> ThreadsLauncher::ReadState() {
  if (cluster_ == nullptr) return absl::FailedPreconditionError("the threads launcher has not been started");
  std::vector<ir::TensorMap> states;
  for (int32_t actor = 0; actor < cluster_->num_actors(); ++actor) states.push_back(cluster_->executor(actor).State());
  return states;
}

}  // namespace tandem::cli
