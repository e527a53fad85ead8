#include "actor/thread_cluster.h"

#include <atomic>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "actor/tcp_collective.h"
#include "backends/cpu/kernels.h"
#include "backends/open_device.h"
#include "ir/device_spec.h"

namespace tandem::actor {

absl::StatusOr<std::unique_ptr<ThreadCluster>> ThreadCluster::Create(std::vector<ir::ActorProgram> programs,
                                                                     const ir::DeviceSpec& device,
                                                                     absl::Duration connect_timeout) {
  const auto num_actors = static_cast<int32_t>(programs.size());
  if (num_actors == 0) return absl::InvalidArgumentError("a cluster needs at least one actor program");
  std::vector<std::unique_ptr<Executor>> executors;
  for (int32_t a = 0; a < num_actors; ++a) {
    absl::StatusOr<int32_t> replica = ir::ReplicaOf(programs[a], a, num_actors);
    if (!replica.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("program ", a, " ", replica.status().message()));
    }
    absl::StatusOr<std::shared_ptr<backends::Device>> opened = backends::OpenDevice(device, a);
    if (!opened.ok()) return opened.status();
    absl::StatusOr<std::unique_ptr<Executor>> executor =
        Executor::Create(std::move(programs[a]), *std::move(opened), *replica);
    if (!executor.ok()) return executor.status();
    executors.push_back(*std::move(executor));
  }
  cpu::SetBlasThreads(1);
  auto cluster = std::unique_ptr<ThreadCluster>(new ThreadCluster(std::move(executors)));
  // Each replica group once, from its first member.
  cluster->reducers_.resize(num_actors);
  for (int32_t a = 0; a < num_actors; ++a) {
    const std::vector<int32_t> group = ir::ReplicaGroupOf(cluster->executors_[a]->program());
    if (group.empty() || group.front() != a) continue;
    for (int32_t member : group) {
      if (ir::ReplicaGroupOf(cluster->executors_[member]->program()) != group) {
        return absl::InvalidArgumentError(absl::StrCat("actor ", a, " reduces over ", DescribeGroup(group),
                                                       " but actor ", member, "'s program does not"));
      }
    }
    // One process plays every member: no token to prove.
    absl::StatusOr<std::vector<std::unique_ptr<TcpCollectiveGroup>>> members =
        ConnectGroupInProcess(group, {.host = "127.0.0.1"}, connect_timeout);
    if (!members.ok()) return members.status();
    for (size_t rank = 0; rank < group.size(); ++rank) {
      cluster->reducers_[group[rank]] = std::make_unique<Reducer>(std::move((*members)[rank]));
      cluster->executors_[group[rank]]->UseReducer(cluster->reducers_[group[rank]].get());
    }
  }
  return cluster;
}

ThreadCluster::ThreadCluster(std::vector<std::unique_ptr<Executor>> executors)
    : executors_(std::move(executors)), network_(static_cast<int32_t>(executors_.size())) {}

ThreadCluster::~ThreadCluster() = default;

absl::Status ThreadCluster::LoadState(const ir::TensorMap& state) {
  for (auto& executor : executors_) {
    if (absl::Status status = executor->LoadState(state); !status.ok()) {
      needs_state_ = true;
      return status;
    }
  }
  needs_state_ = false;
  return absl::OkStatus();
}

absl::StatusOr<ir::TensorMap> ThreadCluster::State() const {
  ir::TensorMap state;
  std::map<std::string, int32_t> owner;
  for (int32_t a = 0; a < num_actors(); ++a) {
    absl::StatusOr<ir::TensorMap> actor_state = executors_[a]->State();
    if (!actor_state.ok()) return actor_state.status();
    for (auto& [name, tensor] : *actor_state) {
      auto [it, inserted] = state.emplace(name, tensor);
      if (inserted) {
        owner[name] = a;
      } else if (!it->second.BitwiseEquals(tensor)) {
        return absl::InternalError(absl::StrCat("state '", name, "' differs between actor ", owner[name],
                                                " and actor ", a));
      }
    }
  }
  return state;
}

absl::StatusOr<std::vector<ir::StepOutputs>> ThreadCluster::RunStep(int64_t step, const ir::StepInputs& inputs,
                                                                absl::Duration receive_timeout) {
  return RunStep(step, std::vector<ir::StepInputs>(), receive_timeout, &inputs);
}

absl::StatusOr<std::vector<ir::StepOutputs>> ThreadCluster::RunStep(int64_t step, const std::vector<ir::StepInputs>& inputs,
                                                                absl::Duration receive_timeout) {
  if (static_cast<int32_t>(inputs.size()) != num_actors()) {
    return absl::InvalidArgumentError(
        absl::StrCat("step ", step, ": inputs for ", inputs.size(), " actors, the cluster has ", num_actors()));
  }
  return RunStep(step, inputs, receive_timeout, nullptr);
}

absl::StatusOr<std::vector<ir::StepOutputs>> ThreadCluster::RunStepPerTask(int64_t step,
                                                                       const std::vector<ir::StepInputs>& inputs,
                                                                       absl::Duration receive_timeout) {
  if (static_cast<int32_t>(inputs.size()) != num_actors()) {
    return absl::InvalidArgumentError(
        absl::StrCat("step ", step, ": inputs for ", inputs.size(), " actors, the cluster has ", num_actors()));
  }
  return RunStep(step, inputs, receive_timeout, nullptr, /*per_task=*/true);
}

absl::StatusOr<ir::StepOutputs> ThreadCluster::RunActor(int32_t actor, int64_t step, const ir::StepInputs& inputs,
                                                    absl::Duration receive_timeout, bool per_task) {
  Executor& executor = *executors_[actor];
  Transport& transport = network_.Endpoint(actor);
  if (!per_task) {
    absl::StatusOr<ir::StepOutputs> outputs = executor.RunStep(step, inputs, transport, receive_timeout);
    if (outputs.ok()) outputs->calls = 1;
    return outputs;
  }
  if (absl::Status status = executor.BeginStep(step, inputs); !status.ok()) return status;
  // One dispatch per task.
  const std::vector<int32_t> bounds = ir::DispatchBounds(executor.program());
  for (size_t i = 0; i + 1 < bounds.size(); ++i) {
    if (absl::Status status = executor.RunRange(bounds[i], bounds[i + 1], transport, receive_timeout); !status.ok()) {
      return status;
    }
  }
  absl::StatusOr<ir::StepOutputs> outputs = executor.FinishStep();
  if (outputs.ok()) outputs->calls = static_cast<int32_t>(bounds.size() - 1);
  return outputs;
}

absl::StatusOr<std::vector<ir::StepOutputs>> ThreadCluster::RunStep(int64_t step, const std::vector<ir::StepInputs>& inputs,
                                                                absl::Duration receive_timeout,
                                                                const ir::StepInputs* shared_inputs, bool per_task) {
  if (groups_broken_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "step ", step, ": an earlier step failed while replicas all-reduce; start a new cluster"));
  }
  if (needs_state_) {
    return absl::FailedPreconditionError(
        absl::StrCat("step ", step, ": the cluster needs LoadState (none yet, or a step failed)"));
  }
  network_.Reset();
  const int32_t n = num_actors();
  std::vector<std::optional<absl::StatusOr<ir::StepOutputs>>> results(n);
  std::atomic<int32_t> first_failed{-1};
  {
    std::vector<std::thread> threads;
    threads.reserve(n);
    for (int32_t a = 0; a < n; ++a) {
      threads.emplace_back([&, a] {
        const ir::StepInputs& mine = shared_inputs != nullptr ? *shared_inputs : inputs[a];
        absl::StatusOr<ir::StepOutputs> result = RunActor(a, step, mine, receive_timeout, per_task);
        if (!result.ok()) {
          int32_t none = -1;
          first_failed.compare_exchange_strong(none, a);
          const absl::Status aborted =
              absl::AbortedError(absl::StrCat("actor ", a, " failed: ", result.status().message()));
          network_.Endpoint(a).Abort(aborted);
          for (const std::unique_ptr<Reducer>& reducer : reducers_) {
            if (reducer != nullptr) reducer->Abort(aborted);
          }
        }
        results[a] = std::move(result);
      });
    }
    for (std::thread& thread : threads) thread.join();
  }
  if (const int32_t failed = first_failed.load(); failed >= 0) {
    // Some actors may have finished the step and others not: the cluster's
    // state is inconsistent until LoadState.
    needs_state_ = true;
    for (const std::unique_ptr<Reducer>& reducer : reducers_) groups_broken_ = groups_broken_ || reducer != nullptr;
    return results[failed]->status();
  }
  std::vector<PendingMessage> pending = network_.PendingMessages();
  if (!pending.empty()) {
    std::vector<std::string> lines;
    for (const PendingMessage& message : pending) lines.push_back(message.ToString());
    return absl::InternalError(absl::StrCat("step ", step, ": messages sent but never received: ",
                                            absl::StrJoin(lines, "; ")));
  }
  std::vector<ir::StepOutputs> outputs;
  outputs.reserve(n);
  for (int32_t a = 0; a < n; ++a) outputs.push_back(*std::move(*results[a]));
  return outputs;
}

}  // namespace tandem::actor
