// Lowering one actor's share of a planned step to its ActorProgram.
#ifndef TANDEM_CONTROLLER_ACTOR_LOWERING_H_
#define TANDEM_CONTROLLER_ACTOR_LOWERING_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "controller/step_plan.h"
#include "ir/actor_program.h"

namespace tandem::controller {

// The instruction stream of `actor`: its tasks in program order with their
// receives, runs, sends, emitted losses and gradient accumulation (in
// microbatch order), then the update of the parameters it holds; frees after
// last uses, and the static peak of live bytes.
//
// With data-parallel replicas, `replica_group` lists the actors that hold
// this actor's stages in the other replicas, in replica order (this actor
// among them), and `num_actors` counts the actors of all replicas. The
// gradients of each stage are then all-reduced across the group: the
// reduction starts right after the stage's last accumulation of the step and
// is waited for just before the update. Without replicas, the group is
// empty and num_actors is the schedule's.
struct ReplicaGroup {
  std::vector<int32_t> actors;
  int32_t num_actors = 0;
};
absl::StatusOr<ir::ActorProgram> LowerActor(const StepPlan& plan, int32_t actor, const ReplicaGroup& replicas = {});

// Inserts a kFree after the last use of every temporary and input buffer
// and computes the program's static peak (see ir/actor_program.h).
void AssignLifetimes(ir::ActorProgram& program);

}  // namespace tandem::controller

#endif  // TANDEM_CONTROLLER_ACTOR_LOWERING_H_
