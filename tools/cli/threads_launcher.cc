#include "tools/cli/threads_launcher.h"

#include "absl/strings/str_cat.h"

namespace tandem::cli {

absl::Status ThreadsLauncher::Start(const std::vector<ir::ActorProgram>& programs,
                                    const std::vector<ir::TensorMap>& states) {
  absl::StatusOr<std::unique_ptr<actor::ThreadCluster>> cluster = actor::ThreadCluster::Create(programs);
  if (!cluster.ok()) return cluster.status();
  cluster_ = *std::move(cluster);
  ir::TensorMap all;
  for (const ir::TensorMap& state : states) all.insert(state.begin(), state.end());
  return cluster_->LoadState(all);
}

absl::StatusOr<std::vector<controller::ActorStepResult>> ThreadsLauncher::RunStep(
    int64_t step, const std::vector<controller::ActorInputs>& inputs, controller::Dispatch dispatch) {
  if (cluster_ == nullptr) return absl::FailedPreconditionError("the threads launcher has not been started");
  std::vector<actor::StepInputs> actor_inputs(inputs.size());
  for (size_t actor = 0; actor < inputs.size(); ++actor) {
    for (const auto& [key, tensor] : inputs[actor]) actor_inputs[actor][{key.first, key.second}] = tensor;
  }
  absl::StatusOr<std::vector<actor::StepOutputs>> outputs =
      dispatch == controller::Dispatch::kFused ? cluster_->RunStep(step, actor_inputs, receive_timeout_)
                                               : cluster_->RunStepPerTask(step, actor_inputs, receive_timeout_);
  if (!outputs.ok()) return outputs.status();
  std::vector<controller::ActorStepResult> results;
  for (actor::StepOutputs& output : *outputs) {
    controller::ActorStepResult result{std::move(output.results), output.peak_live_bytes, {}, 0};
    // Times relative to the actor's first instruction, as an actor process reports them.
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
    results.push_back(std::move(result));
  }
  return results;
}

absl::StatusOr<std::vector<ir::TensorMap>> ThreadsLauncher::ReadState() {
  if (cluster_ == nullptr) return absl::FailedPreconditionError("the threads launcher has not been started");
  std::vector<ir::TensorMap> states;
  for (int32_t actor = 0; actor < cluster_->num_actors(); ++actor) states.push_back(cluster_->executor(actor).State());
  return states;
}

}  // namespace tandem::cli
