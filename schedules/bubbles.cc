#include "schedules/bubbles.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "schedules/json_text.h"

namespace tandem::schedules {
namespace {

// The live units on `actor` at `time`: the value of the last timeline point
// at or before it (frees come before allocations at one time, and nothing
// on the actor changes inside a bubble).
double LiveAt(const std::vector<MemoryPoint>& timeline, double time) {
  double live = 0.0;
  for (const MemoryPoint& point : timeline) {
    if (point.time > time) break;
    live = point.live;
  }
  return live;
}

std::string BeforeName(const Schedule& schedule, const BubbleSlot& bubble) {
  if (bubble.tail(schedule)) return "end";
  return SlotName(schedule.programs[bubble.actor.value][bubble.before_slot]);
}

std::string Format(double value) { return absl::StrFormat("%.6g", value); }

}  // namespace

absl::StatusOr<std::vector<BubbleSlot>> FindBubbles(const Schedule& schedule, const SimulationResult& result,
                                                    const BubbleOptions& options) {
  const auto actors = static_cast<size_t>(schedule.num_actors);
  if (!options.capacity.empty() && options.capacity.size() != actors) {
    return absl::InvalidArgumentError(absl::StrCat("a memory capacity for each of ", actors, " actors, got ",
                                                   options.capacity.size()));
  }
  for (double capacity : options.capacity) {
    if (!std::isfinite(capacity) || capacity < 0) {
      return absl::InvalidArgumentError(absl::StrCat("memory capacity ", capacity, " is not a non-negative number"));
    }
  }
  std::vector<BubbleSlot> bubbles;
  for (size_t a = 0; a < actors && a < result.slot_times.size(); ++a) {
    const std::vector<SlotTiming>& times = result.slot_times[a];
    const double capacity = options.capacity.empty() ? result.per_actor[a].peak_activations : options.capacity[a];
    auto add = [&](int32_t before_slot, double start, double end) {
      if (end - start < options.min_duration) return;
      BubbleSlot bubble{.actor = ActorId{static_cast<int32_t>(a)}, .before_slot = before_slot, .start = start,
                        .end = end};
      bubble.live = a < result.memory.size() ? LiveAt(result.memory[a], start) : 0.0;
      bubble.free = std::max(0.0, capacity - bubble.live);
      bubbles.push_back(bubble);
    };
    double free_from = 0.0;
    for (size_t slot = 0; slot < times.size(); ++slot) {
      add(static_cast<int32_t>(slot), free_from, times[slot].start);
      free_from = times[slot].end;
    }
    add(static_cast<int32_t>(times.size()), free_from, result.makespan);
  }
  return bubbles;
}

absl::StatusOr<std::vector<int64_t>> PackFill(const std::vector<BubbleSlot>& bubbles, const FillPacking& packing) {
  if (!std::isfinite(packing.piece_cost) || packing.piece_cost <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("a fill piece's cost must be above 0, got ", packing.piece_cost));
  }
  if (!std::isfinite(packing.piece_memory) || packing.piece_memory < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("a fill piece's memory must be a non-negative number, got ", packing.piece_memory));
  }
  if (!(packing.share > 0 && packing.share <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat("the share of a bubble to fill must be in (0, 1], got ",
                                                   packing.share));
  }
  if (packing.max_pieces < -1) {
    return absl::InvalidArgumentError(absl::StrCat("max_pieces must be -1 or more, got ", packing.max_pieces));
  }
  std::vector<size_t> order(bubbles.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (bubbles[a].start != bubbles[b].start) return bubbles[a].start < bubbles[b].start;
    return bubbles[a].actor.value < bubbles[b].actor.value;
  });
  const int64_t limit = packing.max_pieces < 0 ? kMaxFillPieces : packing.max_pieces;
  std::vector<int64_t> pieces(bubbles.size(), 0);
  int64_t placed = 0;
  for (size_t index : order) {
    const BubbleSlot& bubble = bubbles[index];
    if (packing.piece_memory > bubble.free) continue;
    // In double: a tiny piece in a long bubble must not overflow.
    const double fit = std::floor(bubble.duration() * packing.share / packing.piece_cost);
    if (fit <= 0) continue;
    if (packing.max_pieces < 0 && fit > static_cast<double>(kMaxFillPieces - placed)) {
      return absl::InvalidArgumentError(absl::StrCat("pieces of cost ", packing.piece_cost, " fill more than ",
                                                     kMaxFillPieces, " slots; use larger pieces"));
    }
    const int64_t take = static_cast<int64_t>(std::min(fit, static_cast<double>(limit - placed)));
    pieces[index] = take;
    placed += take;
    if (placed >= limit) break;
  }
  return pieces;
}

FillSummary SummarizeFill(const SimulationResult& result, const std::vector<BubbleSlot>& bubbles,
                          const std::vector<int64_t>& pieces, const FillPacking& packing) {
  FillSummary summary;
  const size_t actors = result.per_actor.size();
  summary.filled.assign(actors, 0.0);
  for (size_t i = 0; i < bubbles.size() && i < pieces.size(); ++i) {
    summary.filled[bubbles[i].actor.value] += static_cast<double>(pieces[i]) * packing.piece_cost;
    summary.pieces += pieces[i];
  }
  double busy = 0.0;
  for (size_t a = 0; a < actors; ++a) {
    busy += result.per_actor[a].busy;
    summary.total_filled += summary.filled[a];
    summary.utilisation.push_back(
        result.makespan > 0 ? (result.per_actor[a].busy + summary.filled[a]) / result.makespan : 0.0);
  }
  const double capacity = static_cast<double>(actors) * result.makespan;
  if (capacity > 0) {
    summary.utilisation_before = busy / capacity;
    summary.utilisation_after = (busy + summary.total_filled) / capacity;
  }
  return summary;
}

std::string BubbleTable(const Schedule& schedule, const SimulationResult& result,
                        const std::vector<BubbleSlot>& bubbles, const PackedFill* packed) {
  const bool fill = packed != nullptr;
  const std::vector<int64_t> pieces = fill ? packed->pieces : std::vector<int64_t>(bubbles.size(), 0);
  const FillPacking packing = fill ? packed->packing : FillPacking{};
  std::string out = absl::StrCat("bubble slots (", bubbles.size(), "):\n");
  absl::StrAppend(&out, "actor  before      start        end   duration       live       free",
                  fill ? "  pieces     filled" : "", "\n");
  for (size_t i = 0; i < bubbles.size(); ++i) {
    const BubbleSlot& bubble = bubbles[i];
    absl::StrAppend(&out, absl::StrFormat("%5d  %-8s %10s %10s %10s %10s %10s", bubble.actor.value,
                                          BeforeName(schedule, bubble), Format(bubble.start), Format(bubble.end),
                                          Format(bubble.duration()), Format(bubble.live), Format(bubble.free)));
    if (fill) {
      absl::StrAppend(&out, absl::StrFormat("  %6d %10s", pieces[i],
                                            Format(static_cast<double>(pieces[i]) * packing.piece_cost)));
    }
    absl::StrAppend(&out, "\n");
  }
  if (!fill) return out;
  const FillSummary summary = SummarizeFill(result, bubbles, pieces, packing);
  absl::StrAppend(&out, absl::StrFormat("fill: %d pieces of cost %s (memory %s, share %s), filled %s of %s idle\n",
                                        summary.pieces, Format(packing.piece_cost), Format(packing.piece_memory),
                                        Format(packing.share), Format(summary.total_filled),
                                        Format(result.bubble_time)));
  absl::StrAppend(&out, absl::StrFormat("utilisation: %.2f%% without fill, %.2f%% with fill\n",
                                        100 * summary.utilisation_before, 100 * summary.utilisation_after));
  return out;
}

std::string BubbleJson(const Schedule& schedule, const SimulationResult& result,
                       const std::vector<BubbleSlot>& bubbles, const PackedFill* packed) {
  using Json = nlohmann::ordered_json;
  const bool fill = packed != nullptr;
  const std::vector<int64_t> pieces = fill ? packed->pieces : std::vector<int64_t>(bubbles.size(), 0);
  const FillPacking packing = fill ? packed->packing : FillPacking{};
  Json json;
  Json& list = json["bubbles"] = Json::array();
  for (size_t i = 0; i < bubbles.size(); ++i) {
    const BubbleSlot& bubble = bubbles[i];
    Json& entry = list.emplace_back(Json{{"actor", bubble.actor.value},
                                         {"before_slot", bubble.before_slot},
                                         {"before", BeforeName(schedule, bubble)},
                                         {"start", JsonNumber(bubble.start)},
                                         {"end", JsonNumber(bubble.end)},
                                         {"duration", JsonNumber(bubble.duration())},
                                         {"live", JsonNumber(bubble.live)},
                                         {"free", JsonNumber(bubble.free)}});
    if (fill) {
      entry["pieces"] = pieces[i];
      entry["filled"] = JsonNumber(static_cast<double>(pieces[i]) * packing.piece_cost);
    }
  }
  if (fill) {
    const FillSummary summary = SummarizeFill(result, bubbles, pieces, packing);
    Json per_actor = Json::array();
    for (size_t a = 0; a < summary.filled.size(); ++a) {
      per_actor.push_back({{"actor", static_cast<int64_t>(a)},
                           {"filled", JsonNumber(summary.filled[a])},
                           {"utilisation", JsonNumber(summary.utilisation[a])}});
    }
    json["fill"] = {{"piece_cost", JsonNumber(packing.piece_cost)},
                    {"piece_memory", JsonNumber(packing.piece_memory)},
                    {"share", JsonNumber(packing.share)},
                    {"pieces", summary.pieces},
                    {"filled", JsonNumber(summary.total_filled)},
                    {"utilisation", JsonNumber(summary.utilisation_before)},
                    {"utilisation_with_fill", JsonNumber(summary.utilisation_after)},
                    {"per_actor", std::move(per_actor)}};
  }
  return JsonText(json) + "\n";
}

}  // namespace tandem::schedules
