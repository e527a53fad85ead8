#include "schedules/task_memory.h"

namespace tandem::schedules {

TaskMemory MemoryOf(TaskKind kind, const StageMemory& stage, double input_grad_frees) {
  const double recomputed = stage.stash - stage.kept;
  switch (kind) {
    case TaskKind::kForward:
      return {.allocated = stage.kept, .working = stage.working};
    case TaskKind::kBackward:
      return {.allocated = recomputed, .working = stage.working, .freed = stage.stash};
    case TaskKind::kBackwardInput:
      return {.allocated = recomputed, .working = stage.working, .freed = stage.stash * input_grad_frees};
    case TaskKind::kBackwardWeight:
      return {.working = stage.working, .freed = stage.stash * (1.0 - input_grad_frees)};
  }
  return {};
}

double SteadyPeak(const StageMemory& stage, int64_t in_flight) {
  // The last forward in flight adds its kept part with the working set; a
  // backward then adds the recomputed rest (nothing without remat).
  return static_cast<double>(in_flight) * stage.kept + stage.working + (stage.stash - stage.kept);
}

}  // namespace tandem::schedules
