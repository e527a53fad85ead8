// Which tasks of a schedule read which tasks' outputs: one definition over
// the stage graph, shared by the validator and the simulator.
//
// For one microbatch m:
// - F(s,m) reads F(p,m) of every predecessor p of s;
// - B(s,m) or I(s,m) reads F(s,m) and the input gradient of every
//   successor c of s, which B(c,m) produces, or I(c,m) when c's backward is
//   split;
// - W(s,m) reads I(s,m).
// On a chain this is F(s-1) -> F(s) and B(s+1) -> B(s). Header-only
// templates; pure.
#ifndef TANDEM_SCHEDULES_DATAFLOW_H_
#define TANDEM_SCHEDULES_DATAFLOW_H_

#include "ir/stage_graph.h"
#include "schedules/schedule.h"

namespace tandem::schedules {

// Calls visit(producer, is_gradient) for each task whose output `task`
// reads, in a fixed order. `gradient(stage, microbatch)` names the task
// producing a stage's input gradient (its B or its I).
template <typename GradientTask, typename Visit>
void ForEachProducer(const ir::StageGraph& stages, const Task& task, GradientTask&& gradient, Visit&& visit) {
  const int32_t s = task.stage.value;
  const Microbatch m = task.microbatch;
  switch (task.kind) {
    case TaskKind::kForward:
      for (int32_t p : stages.predecessors(s)) visit(Task{TaskKind::kForward, StageId(p), m}, false);
      break;
    case TaskKind::kBackward:
    case TaskKind::kBackwardInput:
      visit(Task{TaskKind::kForward, StageId(s), m}, false);
      for (int32_t c : stages.successors(s)) visit(gradient(c, m.value), true);
      break;
    case TaskKind::kBackwardWeight:
      visit(Task{TaskKind::kBackwardInput, StageId(s), m}, false);
      break;
  }
}

// Calls visit(consumer) for each task that reads `task`'s output: first
// those on other stages (in stage order), then those on its own stage.
template <typename GradientTask, typename Visit>
void ForEachConsumer(const ir::StageGraph& stages, const Task& task, GradientTask&& gradient, Visit&& visit) {
  const int32_t s = task.stage.value;
  const Microbatch m = task.microbatch;
  switch (task.kind) {
    case TaskKind::kForward:
      for (int32_t c : stages.successors(s)) visit(Task{TaskKind::kForward, StageId(c), m});
      visit(gradient(s, m.value));
      break;
    case TaskKind::kBackward:
    case TaskKind::kBackwardInput:
      for (int32_t p : stages.predecessors(s)) visit(gradient(p, m.value));
      if (task.kind == TaskKind::kBackwardInput) visit(Task{TaskKind::kBackwardWeight, StageId(s), m});
      break;
    case TaskKind::kBackwardWeight:
      break;
  }
}

// The stage edge along which `producer`'s output reaches `consumer`, for
// messages; nullopt-like {-1, -1} when both are on one stage.
inline ir::StageEdge DataflowEdge(const Task& producer, const Task& consumer) {
  if (producer.stage == consumer.stage) return {-1, -1};
  if (producer.kind == TaskKind::kForward) return {producer.stage.value, consumer.stage.value};
  return {consumer.stage.value, producer.stage.value};  // a gradient flows back along from -> to
}

}  // namespace tandem::schedules

#endif  // TANDEM_SCHEDULES_DATAFLOW_H_
