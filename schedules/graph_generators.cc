// The generators over a stage DAG: graph-gpipe and graph-1f1b.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <queue>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "schedules/generators.h"
#include "schedules/limits.h"

namespace tandem::schedules {
namespace {

// A generator's stage graph and placement, checked.
struct GraphLayout {
  int32_t actors = 0;
  int32_t stages = 0;
  int32_t microbatches = 0;
  ir::StageGraph graph;
  std::vector<ActorId> placement;
  std::vector<std::vector<int32_t>> actor_stages;  // [actor], increasing
};

absl::StatusOr<GraphLayout> Layout(absl::string_view name, const GeneratorOptions& options) {
  if (options.actors < 1 || options.microbatches < 1) {
    return absl::InvalidArgumentError(absl::StrCat(name, " needs at least 1 actor and 1 microbatch: got actors=",
                                                   options.actors, ", microbatches=", options.microbatches));
  }
  if (options.virtual_stages != 0 && options.virtual_stages != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, " takes its stages from the stage graph and the placement, not from virtual=", options.virtual_stages));
  }
  GraphLayout layout;
  layout.actors = options.actors;
  layout.microbatches = options.microbatches;
  const int64_t stages = options.stage_actors.empty() ? int64_t{options.actors}
                                                      : static_cast<int64_t>(options.stage_actors.size());
  if (absl::Status s = CheckScheduleSizes(options.actors, stages, options.microbatches); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": ", s.message()));
  }
  if (absl::Status s = CheckTaskCount(2 * stages * options.microbatches,
                                      absl::StrCat(name, " with ", stages, " stages and microbatches=",
                                                   options.microbatches));
      !s.ok()) {
    return s;
  }
  layout.stages = static_cast<int32_t>(stages);
  if (absl::Status s = ir::CheckStageEdges(layout.stages, options.stage_edges); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": ", s.message()));
  }
  layout.graph = ir::StageGraph(layout.stages, options.stage_edges);
  layout.actor_stages.resize(options.actors);
  for (int32_t s = 0; s < layout.stages; ++s) {
    const int32_t actor = options.stage_actors.empty() ? s : options.stage_actors[s];
    if (actor < 0 || actor >= options.actors) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": stage ", s, " is placed on actor ", actor,
                                                     ", outside 0..", options.actors - 1));
    }
    layout.placement.push_back(ActorId(actor));
    layout.actor_stages[actor].push_back(s);
  }
  return layout;
}

Schedule EmptySchedule(absl::string_view name, const GraphLayout& layout) {
  Schedule schedule;
  schedule.name = std::string(name);
  schedule.num_actors = layout.actors;
  schedule.num_stages = layout.stages;
  schedule.num_microbatches = layout.microbatches;
  schedule.stage_to_actor = layout.placement;
  schedule.stage_edges = layout.graph.StoredEdges();
  schedule.programs.resize(layout.actors);
  return schedule;
}

}  // namespace

absl::StatusOr<Schedule> GenerateGraphGPipe(const GeneratorOptions& options) {
  absl::StatusOr<GraphLayout> layout = Layout("graph-gpipe", options);
  if (!layout.ok()) return layout.status();
  Schedule schedule = EmptySchedule("graph-gpipe", *layout);
  // Forwards in (microbatch, stage) order and backwards in (microbatch,
  // reverse stage) order on every actor: every dataflow edge goes forward in
  // these orders, so no actor waits on one that waits on it.
  for (int32_t a = 0; a < layout->actors; ++a) {
    std::vector<Slot>& program = schedule.programs[a];
    const std::vector<int32_t>& stages = layout->actor_stages[a];
    for (int32_t m = 0; m < layout->microbatches; ++m) {
      for (int32_t s : stages) program.push_back(Slot{{Task{TaskKind::kForward, StageId(s), Microbatch(m)}}});
    }
    for (int32_t m = 0; m < layout->microbatches; ++m) {
      for (auto s = stages.rbegin(); s != stages.rend(); ++s) {
        program.push_back(Slot{{Task{TaskKind::kBackward, StageId(*s), Microbatch(m)}}});
      }
    }
  }
  return schedule;
}

absl::StatusOr<Schedule> GenerateGraphOneFOneB(const GeneratorOptions& options) {
  absl::StatusOr<GraphLayout> layout = Layout("graph-1f1b", options);
  if (!layout.ok()) return layout.status();
  const GraphLayout& g = *layout;
  Schedule schedule = EmptySchedule("graph-1f1b", g);
  const int32_t m_count = g.microbatches;
  constexpr double kInf = std::numeric_limits<double>::infinity();
  constexpr double kForwardCost = 1.0;
  constexpr double kBackwardCost = 2.0;
  auto at = [&](int32_t stage, int32_t microbatch) { return static_cast<size_t>(stage) * m_count + microbatch; };
  std::vector<double> forward_end(static_cast<size_t>(g.stages) * m_count, kInf);
  std::vector<double> backward_end(forward_end.size(), kInf);
  std::vector<int32_t> next_forward(g.stages, 0), next_backward(g.stages, 0), limit(g.stages);
  for (int32_t s = 0; s < g.stages; ++s) limit[s] = std::min(m_count, g.graph.StagesToSink(s));

  auto forward_ready = [&](int32_t s, int32_t m) {
    double ready = 0.0;
    for (int32_t p : g.graph.predecessors(s)) ready = std::max(ready, forward_end[at(p, m)]);
    return ready;
  };
  auto backward_ready = [&](int32_t s, int32_t m) {
    double ready = forward_end[at(s, m)];
    for (int32_t c : g.graph.successors(s)) ready = std::max(ready, backward_end[at(c, m)]);
    return ready;
  };

  // Actors try to start a task when they become free and when an input of
  // one of their tasks arrives; events in (time, actor) order.
  using Event = std::pair<double, int32_t>;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events;
  std::vector<double> free_at(g.actors, 0.0);
  for (int32_t a = 0; a < g.actors; ++a) events.push({0.0, a});
  int64_t remaining = int64_t{2} * g.stages * m_count;
  while (!events.empty()) {
    const auto [time, a] = events.top();
    events.pop();
    if (free_at[a] > time) continue;  // busy: it tries again when free
    // The best ready task: a backward (lowest microbatch, then the later
    // stage), else a forward its stage has room for (lowest microbatch, then
    // the earlier stage).
    int32_t best_stage = -1;
    bool best_backward = false;
    int32_t best_microbatch = std::numeric_limits<int32_t>::max();
    for (int32_t s : g.actor_stages[a]) {
      const int32_t b = next_backward[s];
      if (b < next_forward[s] && backward_ready(s, b) <= time &&
          (!best_backward || b < best_microbatch || (b == best_microbatch && s > best_stage))) {
        best_backward = true;
        best_stage = s;
        best_microbatch = b;
      }
    }
    if (!best_backward) {
      for (int32_t s : g.actor_stages[a]) {
        const int32_t f = next_forward[s];
        if (f < m_count && f - next_backward[s] < limit[s] && forward_ready(s, f) <= time && f < best_microbatch) {
          best_stage = s;
          best_microbatch = f;
        }
      }
    }
    if (best_stage < 0) continue;  // idle until an input arrives
    const int32_t s = best_stage, m = best_microbatch;
    const double end = time + (best_backward ? kBackwardCost : kForwardCost);
    free_at[a] = end;
    events.push({end, a});
    if (best_backward) {
      backward_end[at(s, m)] = end;
      ++next_backward[s];
      for (int32_t p : g.graph.predecessors(s)) events.push({end, g.placement[p].value});
    } else {
      forward_end[at(s, m)] = end;
      ++next_forward[s];
      for (int32_t c : g.graph.successors(s)) events.push({end, g.placement[c].value});
    }
    schedule.programs[a].push_back(
        Slot{{Task{best_backward ? TaskKind::kBackward : TaskKind::kForward, StageId(s), Microbatch(m)}}});
    --remaining;
  }
  if (remaining != 0) {
    // Cannot happen with one stage per actor; several stages on one actor
    // can starve each other under the in-flight limits.
    return absl::InvalidArgumentError(absl::StrCat(
        "graph-1f1b: the list schedule stalls with ", remaining,
        " tasks left under this placement (stages sharing an actor wait on each other): use graph-gpipe or "
        "another placement"));
  }
  return schedule;
}

}  // namespace tandem::schedules
