// The data of a pipeline schedule: which actor holds which stage, and the
// ordered list of tasks each actor runs in one training step.
//
// A schedule is plain data. Built-in generators, the text format and the
// PyTorch CSV importer all produce this same struct, and everything
// downstream (validator, simulator, drawings, the compiler) reads only it:
// no built-in schedule has a private code path. Value types; not
// synchronized.
#ifndef TANDEM_SCHEDULES_SCHEDULE_H_
#define TANDEM_SCHEDULES_SCHEDULE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "ir/ids.h"
#include "ir/stage_graph.h"

namespace tandem::schedules {

enum class TaskKind : uint8_t {
  kForward,         // F: the stage's forward for one microbatch.
  kBackward,        // B: the whole backward (input and weight gradients).
  kBackwardInput,   // I: the input-gradient half of a split backward.
  kBackwardWeight,  // W: the weight-gradient half; runs after I.
};

// 'F', 'B', 'I' or 'W'.
char TaskKindLetter(TaskKind kind);

struct Task {
  TaskKind kind = TaskKind::kForward;
  StageId stage;
  Microbatch microbatch;
  friend bool operator==(const Task&, const Task&) = default;
};

// "F1.3": kind letter, stage, '.', microbatch.
std::string TaskName(const Task& task);

// One entry of an actor's program: usually one task; several tasks fused to
// run as one unit (e.g. a forward overlapped with a backward, DualPipe-style)
// form a group of two or more.
struct Slot {
  std::vector<Task> tasks;
  friend bool operator==(const Slot&, const Slot&) = default;
};

// "F1.3" for a one-task slot; "(F0.7;B7.3)" for a group, in its task order.
std::string SlotName(const Slot& slot);

struct Schedule {
  std::string name;  // e.g. "1f1b"; informational.
  int32_t num_actors = 0;
  int32_t num_stages = 0;
  int32_t num_microbatches = 0;
  // stage_to_actor[s] is the actor that holds stage s.
  std::vector<ActorId> stage_to_actor;
  // Which stages feed which (ir/stage_graph.h): a stage's forward reads its
  // predecessors' forwards, its backward its successors' backwards. Empty:
  // the chain 0 -> 1 -> ... (every schedule before stage graphs).
  std::vector<ir::StageEdge> stage_edges;
  // programs[a] is actor a's ordered program for one step.
  std::vector<std::vector<Slot>> programs;

  ActorId ActorOf(StageId stage) const { return stage_to_actor.at(stage.value); }
  // The stage graph; build it once per pass, not per task.
  ir::StageGraph stage_graph() const { return ir::StageGraph(num_stages, stage_edges); }
  // Whether the backward is split into I and W tasks anywhere.
  bool SplitsBackward() const;
  // Total number of tasks over all actors (a group counts each of its tasks).
  int64_t NumTasks() const;
  friend bool operator==(const Schedule&, const Schedule&) = default;
};

}  // namespace tandem::schedules

#endif  // TANDEM_SCHEDULES_SCHEDULE_H_
