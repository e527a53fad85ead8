// A discrete-event simulation of one training step of a Schedule under a
// cost model: when every task and transfer runs, the makespan, the bubble of
// each actor, the critical path and the live activations over time.
//
// The model (schedules/SIMULATION.md says it at length):
// - Each actor runs its program in order on one compute track; a slot starts
//   when the actor is free and every input of every task in it has arrived.
// - A fused slot (several tasks run as one, DualPipe-style) costs the MAX of
//   its tasks by default, because overlapping them is the point of fusing;
//   GroupCost::kSum models running them back to back instead.
// - Every dependency edge whose producer and consumer run on different actors
//   is a transfer, costing `link_alpha + link_beta * bytes`. Each actor has
//   one send track: its outgoing transfers run one at a time, in the order
//   their producers finished (FIFO). Receiving takes no extra resource.
//   Edges within one actor cost nothing.
// - Dependencies: F(s,m) after F(s-1,m); B or I (s,m) after F(s,m) and after
//   B or I (s+1,m); W(s,m) after I(s,m).
// - Activations: F(s,m) allocates 1 unit on its actor when it starts; B(s,m)
//   frees the whole unit when it ends; with a split backward, I(s,m) frees
//   `input_grad_frees` of it when it ends and W(s,m) the rest when it ends.
//   At equal times frees happen before allocations.
//
// Every resource is taken in a fixed order (compute in program order, sends
// in completion order, which is program order too), so the event times are
// found in one pass over the tasks: O(tasks + actors).
#ifndef TANDEM_SCHEDULES_SIMULATOR_H_
#define TANDEM_SCHEDULES_SIMULATOR_H_

#include <array>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "schedules/schedule.h"

namespace tandem::schedules {

// How a fused slot's cost follows from its tasks' costs.
enum class GroupCost : uint8_t {
  kMax,  // The tasks overlap (the default).
  kSum,  // The tasks run back to back.
};

// Costs in abstract time units. Plain value type.
struct CostModel {
  // Default compute cost per kind, indexed by TaskKind: F=1, B=2, I=1, W=1.
  std::array<double, 4> kind_cost = {1.0, 2.0, 1.0, 1.0};
  // Per-(kind, stage) overrides of kind_cost.
  std::map<std::pair<TaskKind, int32_t>, double> stage_cost;
  GroupCost group_cost = GroupCost::kMax;
  // A transfer of `bytes` takes link_alpha + link_beta * bytes.
  double link_alpha = 0.0;
  double link_beta = 0.0;
  double activation_bytes = 1.0;  // Sent along F -> F (and F -> B/I) edges.
  double gradient_bytes = 1.0;    // Sent along B/I -> B/I (and I -> W) edges.
  // The fraction of a forward's activations that I frees; W frees the rest.
  double input_grad_frees = 0.5;

  double& KindCost(TaskKind kind) { return kind_cost[static_cast<int>(kind)]; }
  // The cost of `kind` at `stage`: the override if any, else the kind's default.
  double Cost(TaskKind kind, StageId stage) const;
};

// When one slot of an actor's program ran.
struct SlotTiming {
  double start = 0.0;
  double end = 0.0;
};

// One cross-actor transfer: `producer`'s output sent to the actor that runs
// `consumer`.
struct Transfer {
  ActorId from;
  ActorId to;
  Task producer;
  Task consumer;
  double bytes = 0.0;
  double start = 0.0;
  double end = 0.0;
};

struct ActorStats {
  ActorId actor;
  double busy = 0.0;    // Sum of the durations of its slots.
  double idle = 0.0;    // makespan - busy: this actor's bubble time.
  double bubble = 0.0;  // idle / makespan.
  double peak_activations = 0.0;
};

// Live activation units on one actor from `time` on.
struct MemoryPoint {
  double time = 0.0;
  double live = 0.0;
};

// One link of the critical path: a slot (`actor`, `slot`) or a transfer
// (index into SimulationResult::transfers).
struct CriticalStep {
  enum class Kind : uint8_t { kCompute, kTransfer };
  Kind kind = Kind::kCompute;
  ActorId actor;         // kCompute: the actor.
  int32_t slot = -1;     // kCompute: index in the actor's program.
  int64_t transfer = -1;  // kTransfer: index in transfers.
  double start = 0.0;
  double end = 0.0;
};

struct SimulationResult {
  double makespan = 0.0;
  double bubble = 0.0;       // Total idle / (actors * makespan).
  double bubble_time = 0.0;  // Total idle over all actors.
  std::vector<ActorStats> per_actor;                // Ordered by actor.
  std::vector<std::vector<SlotTiming>> slot_times;  // [actor][slot].
  std::vector<Transfer> transfers;                  // In creation order.
  std::vector<std::vector<MemoryPoint>> memory;     // [actor], time-ordered.
  // From a slot that starts at time 0 to one that ends at the makespan; each
  // step's start is the end of the step before it.
  std::vector<CriticalStep> critical_path;
};

// Simulates `schedule` under `costs`. Does not require a validated schedule:
// a schedule whose tasks can never all run (a cycle, a missing producer, a
// task fused with its own input) is InvalidArgument naming the stuck tasks,
// as are out-of-range ids, duplicate tasks and negative costs. Pure function.
absl::StatusOr<SimulationResult> Simulate(const Schedule& schedule, const CostModel& costs);

}  // namespace tandem::schedules

#endif  // TANDEM_SCHEDULES_SIMULATOR_H_
