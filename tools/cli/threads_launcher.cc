#include "tools/cli/threads_launcher.h"

#include <optional>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tandem::cli {

absl::Status ThreadsLauncher::Start(const std::vector<ir::ActorProgram>& programs,
                                    const std::vector<ir::StateSources>& states) {
  absl::StatusOr<std::unique_ptr<actor::ThreadCluster>> cluster = actor::ThreadCluster::Create(programs, device_);
  if (!cluster.ok()) return cluster.status();
  cluster_ = *std::move(cluster);
  // One process: each tensor is made once, and the actors that hold it
  // share it.
  ir::TensorMap all;
  for (const ir::StateSources& sources : states) {
    for (const auto& [binding, source] : sources) {
      if (all.contains(binding)) continue;
      absl::StatusOr<ir::HostTensor> tensor = ir::MaterializeState(binding, source);
      if (!tensor.ok()) return tensor.status();
      all[binding] = *std::move(tensor);
    }
  }
  return cluster_->LoadState(all);
}

absl::Status ThreadsLauncher::UsePrograms(const std::vector<ir::ActorProgram>& programs) {
  if (cluster_ == nullptr) return absl::FailedPreconditionError("the threads launcher has not been started");
  if (static_cast<int32_t>(programs.size()) != cluster_->num_actors()) {
    return absl::InvalidArgumentError(absl::StrCat("programs for ", programs.size(), " actors, the cluster has ",
                                                   cluster_->num_actors()));
  }
  absl::StatusOr<ir::TensorMap> state = cluster_->State();
  if (!state.ok()) return state.status();
  absl::StatusOr<std::unique_ptr<actor::ThreadCluster>> cluster = actor::ThreadCluster::Create(programs, device_);
  if (!cluster.ok()) return cluster.status();
  if (absl::Status loaded = (*cluster)->LoadState(*state); !loaded.ok()) return loaded;
  cluster_ = *std::move(cluster);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<ir::StepOutputs>> ThreadsLauncher::RunStep(int64_t step,
                                                                      const std::vector<ir::StepInputs>& inputs,
                                                                      controller::Dispatch dispatch) {
  if (cluster_ == nullptr) return absl::FailedPreconditionError("the threads launcher has not been started");
  return dispatch == controller::Dispatch::kFused ? cluster_->RunStep(step, inputs, receive_timeout_)
                                                  : cluster_->RunStepPerTask(step, inputs, receive_timeout_);
}

absl::StatusOr<std::map<ActorId, ir::StepOutputs>> ThreadsLauncher::RunRanges(
    int64_t step, const std::map<ActorId, controller::InstructionRange>& ranges,
    const std::vector<ir::StepInputs>& inputs) {
  if (cluster_ == nullptr) return absl::FailedPreconditionError("the threads launcher has not been started");
  if (static_cast<int32_t>(inputs.size()) != cluster_->num_actors()) {
    return absl::InvalidArgumentError(absl::StrCat("step ", step, ": inputs for ", inputs.size(),
                                                   " actors, the cluster has ", cluster_->num_actors()));
  }
  for (const auto& [actor, range] : ranges) {
    if (actor.value < 0 || actor.value >= cluster_->num_actors()) {
      return absl::InvalidArgumentError(absl::StrCat("no actor ", actor.value));
    }
  }
  if (step != ranges_step_) {
    cluster_->network().Reset();
    ranges_step_ = step;
  }
  std::map<ActorId, absl::StatusOr<std::optional<ir::StepOutputs>>> done;
  for (const auto& [actor, range] : ranges) done.emplace(actor, std::nullopt);
  {
    std::vector<std::thread> threads;
    for (const auto& [actor, range] : ranges) {
      threads.emplace_back([&, actor_id = actor, range = range] {
        const int32_t actor = actor_id.value;
        actor::Executor& executor = cluster_->executor(actor);
        absl::StatusOr<std::optional<ir::StepOutputs>>& result = done.at(actor_id);
        absl::Status status;
        if (range.begin == 0) status = executor.BeginStep(step, inputs[actor]);
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
          absl::StatusOr<ir::StepOutputs> outputs = executor.FinishStep();
          if (!outputs.ok()) {
            result = outputs.status();
          } else {
            result = std::optional<ir::StepOutputs>(*std::move(outputs));
          }
        }
      });
    }
    for (std::thread& thread : threads) thread.join();
  }
  std::map<ActorId, ir::StepOutputs> results;
  for (auto& [actor, result] : done) {
    if (!result.ok()) return result.status();
    results[actor] = result->has_value() ? **std::move(result) : ir::StepOutputs{};
    results[actor].calls = 1;
  }
  return results;
}

absl::StatusOr<ir::HostTensor> ThreadsLauncher::ReadBuffer(ActorId actor_id, const std::string& name) {
  if (cluster_ == nullptr) return absl::FailedPreconditionError("the threads launcher has not been started");
  const int32_t actor = actor_id.value;
  if (actor < 0 || actor >= cluster_->num_actors()) {
    return absl::InvalidArgumentError(absl::StrCat("no actor ", actor, " (the job has ", cluster_->num_actors(), ")"));
  }
  return cluster_->executor(actor).ReadBuffer(name);
}

absl::StatusOr<std::vector<ir::TensorMap>> ThreadsLauncher::ReadState() {
  if (cluster_ == nullptr) return absl::FailedPreconditionError("the threads launcher has not been started");
  std::vector<ir::TensorMap> states;
  for (int32_t actor = 0; actor < cluster_->num_actors(); ++actor) {
    absl::StatusOr<ir::TensorMap> state = cluster_->executor(actor).State();
    if (!state.ok()) return state.status();
    states.push_back(*std::move(state));
  }
  return states;
}

}  // namespace tandem::cli
