// ThreadCluster: P actors in one process, one thread each, connected by an
// InMemoryNetwork: the `threads` launcher of `tandem train` and the proof of
// the compiler's lowering (results bit-identical to the reference).
//
// Each step starts P std::threads, one per actor, each running its
// Executor's whole instruction stream, and joins them all before returning.
// Nothing waits forever: every Receive has the step's receive timeout as its
// deadline, and an actor that fails aborts the network at once, so the
// others' waiting Receives return within moments instead of at their
// deadlines. The error returned is the one that started it (the first actor
// to fail), which names that actor, its step and its instruction.
//
// Ownership: owns its Executors and its network. Thread-safety: not
// thread-safe; one thread calls it. Its methods start and join the actor
// threads themselves; between calls no thread of its own runs.
#ifndef TANDEM_ACTOR_THREAD_CLUSTER_H_
#define TANDEM_ACTOR_THREAD_CLUSTER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "actor/collective.h"
#include "actor/executor.h"
#include "actor/in_memory_transport.h"
#include "ir/actor_program.h"
#include "ir/device_spec.h"

namespace tandem::actor {

class ThreadCluster {
 public:
  // Builds one Executor per program; programs[p] must be actor p of
  // programs.size() (InvalidArgument otherwise, or the verifier's error).
  // Programs that all-reduce (data-parallel replicas) get their replica
  // groups connected here, over loopback TCP (actor/tcp_collective.h),
  // within `connect_timeout`.
  // Sets OpenBLAS to one thread (process-wide) so that P actors computing at
  // once give the reference interpreter's bits.
  // Each actor computes on OpenDevice(device, actor).
  static absl::StatusOr<std::unique_ptr<ThreadCluster>> Create(std::vector<ir::ActorProgram> programs,
                                                               const ir::DeviceSpec& device = {},
                                                               absl::Duration connect_timeout = absl::Seconds(30));

  ThreadCluster(const ThreadCluster&) = delete;
  ThreadCluster& operator=(const ThreadCluster&) = delete;
  ~ThreadCluster();

  int32_t num_actors() const { return static_cast<int32_t>(executors_.size()); }
  Executor& executor(int32_t actor) { return *executors_.at(actor); }
  const Executor& executor(int32_t actor) const { return *executors_.at(actor); }
  // For tests and diagnostics between steps (e.g. PendingMessages).
  InMemoryNetwork& network() { return network_; }

  // Every executor takes its own state buffers from `state` (the whole
  // model's state, e.g. ir::InitialState(step) or a checkpoint). Also what
  // recovers the cluster after a failed step.
  absl::Status LoadState(const ir::TensorMap& state);

  // The union of every actor's state by name. Internal if two actors hold
  // the same name with different bits.
  absl::StatusOr<ir::TensorMap> State() const;

  // Runs step `step` on every actor at once; inputs[p] feeds actor p.
  // FailedPrecondition before LoadState and after a failed step (for good,
  // after a failed step that all-reduces: its groups may be half-way
  // through a collective).
  // Returns each actor's outputs, by actor. After a success, a message that
  // no one received is an Internal error naming sender, receiver and tag.
  absl::StatusOr<std::vector<ir::StepOutputs>> RunStep(int64_t step, const std::vector<ir::StepInputs>& inputs,
                                                   absl::Duration receive_timeout);
  // The same with one map of inputs for every actor (each takes what it binds).
  absl::StatusOr<std::vector<ir::StepOutputs>> RunStep(int64_t step, const ir::StepInputs& inputs,
                                                   absl::Duration receive_timeout);
  // Like RunStep, but each actor is handed its stream one schedule task at a
  // time (ActorProgram::task_starts): the per-task dispatch that fusion is
  // measured against. Same results.
  absl::StatusOr<std::vector<ir::StepOutputs>> RunStepPerTask(int64_t step, const std::vector<ir::StepInputs>& inputs,
                                                          absl::Duration receive_timeout);

 private:
  explicit ThreadCluster(std::vector<std::unique_ptr<Executor>> executors);
  // `shared_inputs`, when set, feeds every actor instead of inputs[p].
  absl::StatusOr<std::vector<ir::StepOutputs>> RunStep(int64_t step, const std::vector<ir::StepInputs>& inputs,
                                                   absl::Duration receive_timeout, const ir::StepInputs* shared_inputs,
                                                   bool per_task = false);
  // One actor's step, on the calling thread.
  absl::StatusOr<ir::StepOutputs> RunActor(int32_t actor, int64_t step, const ir::StepInputs& inputs,
                                       absl::Duration receive_timeout, bool per_task);

  // By actor; null for an actor without replicas. Declared before the
  // executors, which borrow them.
  std::vector<std::unique_ptr<Reducer>> reducers_;
  std::vector<std::unique_ptr<Executor>> executors_;  // by actor
  InMemoryNetwork network_;
  bool needs_state_ = true;  // until LoadState, and after a failed step
  bool groups_broken_ = false;  // a step that all-reduces failed
};

}  // namespace tandem::actor

#endif  // TANDEM_ACTOR_THREAD_CLUSTER_H_
