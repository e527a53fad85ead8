// The one memory model of a stage's tasks (schedules/task_memory.h), and the
// three places that use it agreeing: the planner's sweep over a schedule
// peaks where the partitioner's closed form says, rematerialising or not.
#include "schedules/task_memory.h"

#include <vector>

#include "gtest/gtest.h"
#include "schedules/cost_file.h"
#include "schedules/generators.h"
#include "schedules/partition.h"
#include "schedules/planner.h"

namespace tandem::schedules {
namespace {

TEST(TaskMemory, EveryMicrobatchsTasksFreeWhatTheyAllocate) {
  for (const StageMemory stage : {StageMemory{.stash = 100, .kept = 100, .working = 7},
                                  StageMemory{.stash = 100, .kept = 8, .working = 7}}) {
    const TaskMemory f = MemoryOf(TaskKind::kForward, stage, 0.25);
    const TaskMemory b = MemoryOf(TaskKind::kBackward, stage, 0.25);
    const TaskMemory i = MemoryOf(TaskKind::kBackwardInput, stage, 0.25);
    const TaskMemory w = MemoryOf(TaskKind::kBackwardWeight, stage, 0.25);
    EXPECT_DOUBLE_EQ(f.allocated + b.allocated - b.freed, 0.0);
    EXPECT_DOUBLE_EQ(f.allocated + i.allocated + w.allocated - i.freed - w.freed, 0.0);
    EXPECT_DOUBLE_EQ(f.allocated, stage.kept);
    EXPECT_DOUBLE_EQ(b.allocated, stage.stash - stage.kept);  // the recomputed rest
    EXPECT_DOUBLE_EQ(i.freed, 25.0);                          // input_grad_frees of the stash
    for (const TaskMemory& task : {f, b, i, w}) EXPECT_DOUBLE_EQ(task.working, 7.0);
  }
}

TEST(TaskMemory, ASweepPeaksWhileATaskRunsAndEndsWhereItBegan) {
  const StageMemory stage{.stash = 100, .kept = 10, .working = 5};
  MemorySweep sweep(/*resident=*/1000);
  const std::vector<TaskKind> order = {TaskKind::kForward, TaskKind::kForward, TaskKind::kBackward,
                                       TaskKind::kBackward};
  for (TaskKind kind : order) {
    const TaskMemory task = MemoryOf(kind, stage, 0.5);
    sweep.Start(task);
    sweep.End(task);
  }
  // Two kept forwards, then the first backward's recomputed 90 and its
  // working set: the steady state with two in flight.
  EXPECT_DOUBLE_EQ(sweep.peak(), 1000 + 2 * 10 + 90 + 5);
  EXPECT_DOUBLE_EQ(sweep.peak(), 1000 + SteadyPeak(stage, 2));
  EXPECT_DOUBLE_EQ(sweep.live(), 1000);
}

CostFile Uniform(int segments) {
  CostFile costs;
  for (int i = 0; i < segments; ++i) {
    costs.segments.push_back({.forward_s = 1.0, .backward_s = 2.0, .backward_input_s = 1.0,
                              .backward_weight_s = 1.0, .recompute_s = 1.0, .activation_bytes = 50,
                              .stash_bytes = 100, .remat_stash_bytes = 30, .parameter_bytes = 7,
                              .optimizer_bytes = 14, .working_bytes = 20 + i});
  }
  return costs;
}

// 1F1B holds min(M, P - s) microbatches at stage s, which is what the
// partitioner assumes: the planner's sweep of the real schedule and the
// partitioner's closed form give every actor the same peak.
TEST(TaskMemory, ThePlannersSweepOfOneFOneBPeaksWhereThePartitionerSays) {
  const CostFile costs = Uniform(8);
  for (const bool remat : {false, true}) {
    for (const int32_t microbatches : {2, 8}) {
      const PartitionOptions options{.stages = 4, .microbatches = microbatches};
      Candidate candidate;
      candidate.plan.microbatches = microbatches;
      for (int32_t s = 0; s < 4; ++s) {
        candidate.plan.stages.push_back(EvaluateStage(costs, options, s, 2 * s, 2 * s + 2, remat));
      }
      absl::StatusOr<Schedule> schedule = GenerateOneFOneB({.actors = 4, .microbatches = microbatches});
      ASSERT_TRUE(schedule.ok()) << schedule.status();
      const std::vector<int64_t> peaks = CostModelPeaks(costs, candidate, *schedule, 0.5);
      ASSERT_EQ(peaks.size(), 4u);
      for (int32_t s = 0; s < 4; ++s) {
        EXPECT_EQ(peaks[s], candidate.plan.stages[s].peak_bytes)
            << "stage " << s << (remat ? " rematerialised" : "") << ", " << microbatches << " microbatches";
      }
    }
  }
}

}  // namespace
}  // namespace tandem::schedules
