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
// With data-parallel replicas (step().num_replicas > 1), the program is the
// one every replica runs (ir/actor_program.h), and the gradients of each
// stage are all-reduced across the replicas: the reduction starts right
// after the stage's last accumulation of the step and is waited for just
// before the update.
absl::StatusOr<ir::ActorProgram> LowerActor(const StepPlan& plan, int32_t actor);

// Inserts a kFree after the last use of every temporary and input buffer
// and computes the program's static peak (see ir/actor_program.h).
void AssignLifetimes(ir::ActorProgram& program);

}  // namespace tandem::controller

#endif  // TANDEM_CONTROLLER_ACTOR_LOWERING_H_
