// Checks that a schedule can run: complete, well placed and deadlock-free.
//
// Pure function over a Schedule; thread-safe. Runs in time linear in the
// number of tasks (a 390k-task schedule validates in milliseconds).
#ifndef TANDEM_SCHEDULES_VALIDATOR_H_
#define TANDEM_SCHEDULES_VALIDATOR_H_

#include "absl/status/status.h"
#include "schedules/schedule.h"

namespace tandem::schedules {

struct ValidateOptions {
  // false (the default, Tandem's runtime): sends are buffered and never
  // block; a receive blocks until its data has arrived. A deadlock is then
  // a cycle in the happens-before graph of program order and dataflow.
  //
  // true: every cross-actor dataflow edge is a blocking rendezvous: a send,
  // issued right after the producing slot, completes only together with its
  // receive, posted right before the consuming slot. Both actors stop at the
  // transfer until both reach it. Stricter: plain 1F1B deadlocks under it.
  bool rendezvous = false;
};

// Returns OK, or InvalidArgument whose message has one line per problem
// (at most 20, then a count of the rest), each naming the actor, the slot
// (0-based index in the actor's program) and the task. Checks, in order:
//  - sizes: actors, stages, microbatches >= 1; stage_to_actor has one entry
//    per stage, each a valid actor; programs has one entry per actor; no
//    empty slot;
//  - every task's stage and microbatch are in range, and the task runs on the
//    actor that holds its stage;
//  - every (kind, stage, microbatch) occurs at most once, every F occurs,
//    and each (stage, microbatch) has either one B, or one I and one W,
//    never a mix;
//  - every W comes after its I (on the same actor, in a later slot);
//  - no deadlock. A deadlock is reported as a slot that needs the output of
//    a later slot of its own actor, if any; else as the loop the actors get
//    stuck in, shortest over actors: each stuck actor's first slot that can never
//    run, the slot it waits for, and the program order behind that, e.g.
//    "deadlock: actor 0: B0.0 (slot 1) waits for actor 1: B1.0 (slot 2)
//    waits for actor 1: F1.1 (slot 1) waits for actor 0: F0.1 (slot 2)
//    waits for actor 0: B0.0 (slot 1)" ("waits for" a later slot of the same
//    actor means: that actor is stuck before it, at the slot named next).
// Structural problems are reported before the deadlock check, which only
// runs on a complete, well-placed schedule.
absl::Status Validate(const Schedule& schedule, ValidateOptions options = {});

}  // namespace tandem::schedules

#endif  // TANDEM_SCHEDULES_VALIDATOR_H_
