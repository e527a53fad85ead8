// The one memory model of a stage's tasks, in whatever unit the caller
// counts (bytes for the partitioner and the planner, microbatch activations
// for the simulator):
//
// - A forward keeps `kept` until its microbatch's backward: the stage's
//   whole stash, or, when the stage rematerialises, only what the backward
//   recomputes the rest from.
// - A backward (B, or I with a split backward) first recomputes what a
//   rematerialising forward dropped (stash - kept), then frees the stash:
//   B all of it as it ends; I `input_grad_frees` of it, W the rest.
// - Every task needs the stage's `working` set while it runs, and returns
//   it as it ends.
//
// Who uses it:
// - MemorySweep follows one actor's tasks in order (the planner: one task
//   at a time, by bytes; the simulator: a slot's tasks together, over
//   simulated time, by activations);
// - SteadyPeak is the sweep's peak in closed form for a stage that holds
//   `in_flight` forwards, for the partitioner, which has no schedule yet.
#ifndef TANDEM_SCHEDULES_TASK_MEMORY_H_
#define TANDEM_SCHEDULES_TASK_MEMORY_H_

#include <algorithm>
#include <cstdint>

#include "schedules/schedule.h"

namespace tandem::schedules {

struct StageMemory {
  double stash = 0.0;    // what a microbatch's backward needs of its forward
  double kept = 0.0;     // what the forward keeps of it until then (stash unless rematerialised)
  double working = 0.0;  // what any of its tasks needs while it runs
};

// What one task does to its actor's live memory.
struct TaskMemory {
  double allocated = 0.0;  // as it starts, and held after it
  double working = 0.0;    // while it runs only
  double freed = 0.0;      // as it ends

  TaskMemory& operator+=(const TaskMemory& other) {
    allocated += other.allocated;
    working += other.working;
    freed += other.freed;
    return *this;
  }
};

TaskMemory MemoryOf(TaskKind kind, const StageMemory& stage, double input_grad_frees);

// The live memory of one actor over its tasks, and its peak.
class MemorySweep {
 public:
  // `resident`: held all along (the actor's parameters and optimizer state).
  explicit MemorySweep(double resident = 0.0) : live_(resident), peak_(resident) {}

  // A task (or a slot's tasks together) starts, then ends.
  void Start(const TaskMemory& task) {
    live_ += task.allocated;
    peak_ = std::max(peak_, live_ + task.working);
  }
  void End(const TaskMemory& task) { live_ -= task.freed; }

  double live() const { return live_; }
  double peak() const { return peak_; }

 private:
  double live_;
  double peak_;
};

// The sweep's peak for a stage holding `in_flight` forwards, whatever the
// schedule's order: their kept activations, plus the largest a task adds
// while it runs (a rematerialising backward's recomputed stash, the
// working set).
double SteadyPeak(const StageMemory& stage, int64_t in_flight);

}  // namespace tandem::schedules

#endif  // TANDEM_SCHEDULES_TASK_MEMORY_H_
