// Bubble slots: where, for how long and with how much memory to spare each
// actor of a simulated step waits with nothing to run; and PipeFill's
// greedy packing of a fill job's pieces into them (SIMULATION.md, "Bubble
// slots and fill work").
//
// A bubble is a gap on an actor's compute track: before its first slot
// (from time 0), between two slots, or after its last slot until the step's
// makespan (the tail). Its memory is the simulator's activation units: the
// units live on the actor during the gap (nothing starts or ends there, so
// the count is constant), and what is free of the actor's capacity — by
// default its own peak, so that work packed there never raises it.
// Pure functions.
#ifndef TANDEM_SCHEDULES_BUBBLES_H_
#define TANDEM_SCHEDULES_BUBBLES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "schedules/schedule.h"
#include "schedules/simulator.h"

namespace tandem::schedules {

// The most fill pieces one packing may place, over all bubbles.
inline constexpr int64_t kMaxFillPieces = 1'000'000;

struct BubbleSlot {
  ActorId actor;
  // The slot of the actor's program it precedes; the program's size for the
  // tail after its last slot.
  int32_t before_slot = 0;
  double start = 0.0;
  double end = 0.0;
  double live = 0.0;  // activation units live on the actor during the bubble
  double free = 0.0;  // its capacity minus `live`
  double duration() const { return end - start; }
  bool tail(const Schedule& schedule) const {
    return before_slot == static_cast<int32_t>(schedule.programs[actor.value].size());
  }
};

struct BubbleOptions {
  // Gaps shorter than this are not bubbles.
  double min_duration = 1e-9;
  // Per actor, the activation units it may hold; empty: each actor's own
  // simulated peak. A shorter list is InvalidArgument.
  std::vector<double> capacity;
};

// Every bubble of `result` (from Simulate(schedule, ...)), ordered by actor,
// then by time. InvalidArgument for a capacity list of the wrong length or a
// negative or non-finite entry.
absl::StatusOr<std::vector<BubbleSlot>> FindBubbles(const Schedule& schedule, const SimulationResult& result,
                                                    const BubbleOptions& options = {});

// A fill job as the packer sees it: pieces of equal cost and memory.
struct FillPacking {
  double piece_cost = 1.0;    // > 0, in the simulation's time units
  double piece_memory = 0.0;  // >= 0, activation units a piece holds while it runs
  // The share of a bubble's predicted length that pieces may take, in
  // (0, 1]: below 1 leaves slack for predictions that run short.
  double share = 1.0;
  // The most pieces to place in all (the fill job's remaining work); -1: no
  // limit but kMaxFillPieces.
  int64_t max_pieces = -1;
};

// PipeFill's greedy packing: bubbles in order of their start time (ties by
// actor) each take as many whole pieces as fit in share * duration, when a
// piece fits in the bubble's free memory, until max_pieces are placed.
// Pieces per bubble, in the order of `bubbles`. InvalidArgument for a bad
// FillPacking, or when more than kMaxFillPieces pieces would fit (use larger
// pieces).
absl::StatusOr<std::vector<int64_t>> PackFill(const std::vector<BubbleSlot>& bubbles, const FillPacking& packing);

// What filling does to the simulated step: per actor, the time filled and
// busy + filled over the makespan; overall, the same over all actors.
struct FillSummary {
  std::vector<double> filled;       // by actor
  std::vector<double> utilisation;  // by actor, with fill
  double total_filled = 0.0;
  double utilisation_before = 0.0;  // busy / (actors * makespan)
  double utilisation_after = 0.0;   // (busy + filled) / (actors * makespan)
  int64_t pieces = 0;
};
FillSummary SummarizeFill(const SimulationResult& result, const std::vector<BubbleSlot>& bubbles,
                          const std::vector<int64_t>& pieces, const FillPacking& packing);

// A packing and its result, PackFill's pieces per bubble.
struct PackedFill {
  FillPacking packing;
  std::vector<int64_t> pieces;
};

// `tandem sched sim --bubbles`: a table of the bubbles (actor, the slot each
// precedes, start, end, duration, live and free memory), and with `fill`
// the pieces and filled time of each and the utilisation without and with
// fill.
std::string BubbleTable(const Schedule& schedule, const SimulationResult& result,
                        const std::vector<BubbleSlot>& bubbles, const PackedFill* fill = nullptr);
// The same as JSON: {"bubbles": [{"actor", "before_slot", "before" (the
// slot's name, or "end"), "start", "end", "duration", "live", "free"
// [, "pieces", "filled"]}] [, "fill": {"piece_cost", "piece_memory", "share",
// "pieces", "filled", "utilisation", "utilisation_with_fill", "per_actor":
// [{"actor", "filled", "utilisation"}]}]}.
std::string BubbleJson(const Schedule& schedule, const SimulationResult& result,
                       const std::vector<BubbleSlot>& bubbles, const PackedFill* fill = nullptr);

}  // namespace tandem::schedules

#endif  // TANDEM_SCHEDULES_BUBBLES_H_
