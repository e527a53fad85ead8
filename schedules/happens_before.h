// The happens-before graph of a schedule and its deadlock search; an
// implementation detail of the validator, not a public API.
//
// Pure functions; thread-safe.
#ifndef TANDEM_SCHEDULES_HAPPENS_BEFORE_H_
#define TANDEM_SCHEDULES_HAPPENS_BEFORE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "schedules/schedule.h"

namespace tandem::schedules::internal {

// Dense numbering of a schedule's slots (graph nodes) and tasks. Slot i of
// actor a is node first_node[a] + i; first_node has num_actors + 1 entries.
struct SlotTable {
  int32_t num_stages = 0;
  int32_t num_microbatches = 0;
  std::vector<int32_t> first_node;
  // The node that runs each (kind, stage, microbatch), or -1; see Index().
  std::vector<int32_t> node_of_task;

  int64_t Index(TaskKind kind, int32_t stage, int32_t microbatch) const {
    return (static_cast<int64_t>(kind) * num_stages + stage) * num_microbatches + microbatch;
  }
  int32_t NodeOf(TaskKind kind, int32_t stage, int32_t microbatch) const {
    return node_of_task[Index(kind, stage, microbatch)];
  }
  int32_t ActorOfNode(int32_t node) const;
};

// Searches a complete, well-placed schedule (every task exactly once, each
// on its stage's actor) for a deadlock. Returns nullopt when there is none,
// otherwise the witness: "deadlock: actor 0: B0.0 (slot 1) waits for ...".
// The witness is a slot that needs the output of a later slot of its own
// actor, when there is one; otherwise the state the actors get stuck in: each stuck actor's
// first task that can never run, what it waits for on another actor, and so
// on around a shortest loop of actors. `rendezvous` selects blocking
// send/recv pairs (see ValidateOptions). Linear in the number of slots plus
// transfers (the loop search is bounded by the stuck actors); iterative.
std::optional<std::string> FindDeadlock(const Schedule& schedule, const SlotTable& table,
                                        bool rendezvous);

}  // namespace tandem::schedules::internal

#endif  // TANDEM_SCHEDULES_HAPPENS_BEFORE_H_
