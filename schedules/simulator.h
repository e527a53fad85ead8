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
//   is a transfer, costing `link.Seconds(bytes)` (alpha + beta * bytes). Each actor has
//   one send track: its outgoing transfers run one at a time, in the order
//   their producers finished (FIFO); each arrives `link.latency` after it
//   leaves the track, in flight beside the transfers behind it. Receiving
//   takes no extra resource.
//   Edges within one actor cost nothing.
// - Dependencies (schedules/dataflow.h): F(s,m) after F(p,m) of every
//   predecessor p of s in the stage graph; B or I (s,m) after F(s,m) and
//   after B or I (c,m) of every successor c; W(s,m) after I(s,m). On a
//   chain: F(s-1,m) -> F(s,m) and B(s+1,m) -> B(s,m).
// - Activations: F(s,m) allocates 1 unit on its actor when it starts; B(s,m)
//   frees the whole unit when it ends; with a split backward, I(s,m) frees
//   `input_grad_frees` of it when it ends and W(s,m) the rest when it ends.
//   At equal times frees happen before allocations.
// - Data parallelism: with `data_parallel` D > 1 replicas of the pipeline,
//   each actor reduces the gradients of each of its stages across the D
//   replicas once that stage's last backward task (B, I or W) on it has
//   ended: a ring reduce-scatter then all-gather, costing
//   2(D-1) link.Seconds(G/D) for G gradient bytes. Each actor
//   has one reduce track: its reductions run one at a time, in the order
//   they were released (FIFO), overlapping its compute. The step ends when
//   the last slot or the last reduction does. One replica is simulated.
//   A reduction holds 2G bytes of staging (the bucket's copy and the D
//   shards of G/D its owner receives) from its release to its end; each
//   actor's peak of staging in flight is reported beside its activations.
//
// Every resource is taken in a fixed order (compute in program order, sends
// in completion order, which is program order too, reductions in release
// order), so the event times are found in one pass over the tasks:
// O(tasks + actors + stages).
#ifndef TANDEM_SCHEDULES_SIMULATOR_H_
#define TANDEM_SCHEDULES_SIMULATOR_H_

#include <array>
#include <cstdint>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "schedules/cost_model.h"
#include "schedules/schedule.h"

namespace tandem::schedules {

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

// One actor's reduction of one stage's gradients across the data-parallel
// replicas, on the actor's reduce track.
struct Reduction {
  ActorId actor;
  StageId stage;
  double bytes = 0.0;  // Sent by this actor: 2 (D - 1) / D * the stage's gradient bytes.
  double released = 0.0;  // The end of the stage's last backward task on the actor.
  double start = 0.0;     // released, or later when queued behind another reduction.
  double end = 0.0;
  // Held from `released` to `end`: 2 * the stage's gradient bytes.
  double staging_bytes = 0.0;
};

// Busy, idle and bubble count the compute track only; reductions are apart.
struct ActorStats {
  ActorId actor;
  double busy = 0.0;    // Sum of the durations of its slots.
  double idle = 0.0;    // makespan - busy: this actor's bubble time.
  double bubble = 0.0;  // idle / makespan.
  double peak_activations = 0.0;
  double reduce_busy = 0.0;  // Sum of the durations of its reductions.
  // The most staging bytes of its reductions in flight at once.
  double peak_reduce_staging = 0.0;
};

// Live activation units on one actor from `time` on.
struct MemoryPoint {
  double time = 0.0;
  double live = 0.0;
};

// One link of the critical path: a slot (`actor`, `slot`), a transfer
// (index into SimulationResult::transfers) or a reduction (index into
// SimulationResult::reductions).
struct CriticalStep {
  enum class Kind : uint8_t { kCompute, kTransfer, kReduction };
  Kind kind = Kind::kCompute;
  ActorId actor;          // kCompute, kReduction: the actor; kTransfer: the sender.
  int32_t slot = -1;      // kCompute: index in the actor's program.
  int64_t transfer = -1;  // kTransfer: index in transfers.
  int64_t reduction = -1;  // kReduction: index in reductions.
  double start = 0.0;
  double end = 0.0;
};

struct SimulationResult {
  double makespan = 0.0;     // The end of the last slot or reduction.
  double compute_end = 0.0;  // The end of the last slot.
  double bubble = 0.0;       // Total idle / (actors * makespan).
  double bubble_time = 0.0;  // Total idle over all actors.
  int32_t data_parallel = 1;  // CostModel::data_parallel of the simulation.
  std::vector<ActorStats> per_actor;                // Ordered by actor.
  std::vector<std::vector<SlotTiming>> slot_times;  // [actor][slot].
  std::vector<Transfer> transfers;                  // In creation order.
  // Empty when data_parallel is 1. Ordered by actor, then as they ran on the
  // actor's reduce track.
  std::vector<Reduction> reductions;
  std::vector<std::vector<MemoryPoint>> memory;     // [actor], time-ordered.
  // From a slot that starts at time 0 to the slot or reduction that ends at
  // the makespan (a reduction only when it ends strictly after every slot);
  // each step's start is the end of the step before it.
  std::vector<CriticalStep> critical_path;
};

// Simulates `schedule` under `costs`. Does not require a validated schedule:
// a schedule whose tasks can never all run (a cycle, a missing producer, a
// task fused with its own input) is InvalidArgument naming the stuck tasks,
// as are out-of-range ids, duplicate tasks, negative costs or sizes and a
// data_parallel outside [1, kMaxDataParallel]. Pure function.
absl::StatusOr<SimulationResult> Simulate(const Schedule& schedule, const CostModel& costs);

}  // namespace tandem::schedules

#endif  // TANDEM_SCHEDULES_SIMULATOR_H_
