#include "schedules/generators.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "schedules/placement.h"
#include "schedules/text_format.h"
#include "schedules/validator.h"

namespace tandem::schedules {
namespace {

using ::testing::HasSubstr;

// Whether `name` accepts (P, M, V) by its documented constraints.
bool Accepts(const std::string& name, int p, int m, int v) {
  if (name == "gpipe" || name == "1f1b" || name == "zb-h1" || name == "graph-gpipe" || name == "graph-1f1b" ||
      name == "pipedream" || name == "2bw") {
    return v == 0 || v == 1;
  }
  if (name == "interleaved") return m % p == 0;
  if (name == "looped-bfs") return true;
  if (name == "zb-v") return (v == 0 || v == 2) && m >= 2 * p - 1;
  if (name == "dualpipev") return (v == 0 || v == 2) && m >= 2 * p;
  return false;
}

// The traits table says what each generator does: its default virtual
// stages are what it generates, and only the graph-* ones take a graph.
TEST(Generators, TheTraitsTableDescribesEveryGenerator) {
  ASSERT_EQ(BuiltInSchedules().size(), GeneratorNames().size());
  for (const ScheduleTraits& traits : BuiltInSchedules()) {
    EXPECT_EQ(FindSchedule(traits.name), &traits);
    absl::StatusOr<Schedule> schedule = Generate(traits.name, {.actors = 2, .microbatches = 8});
    ASSERT_TRUE(schedule.ok()) << traits.name << ": " << schedule.status();
    EXPECT_EQ(schedule->num_stages, traits.virtual_stages * schedule->num_actors) << traits.name;
    EXPECT_EQ(TakesStageGraph(traits.name), absl::StartsWith(traits.name, "graph-")) << traits.name;
    EXPECT_EQ(IsAsynchronous(traits.name), traits.weight_updates != WeightUpdateMode::kFlush) << traits.name;
  }
  EXPECT_EQ(FindSchedule("no-such-schedule"), nullptr);
  EXPECT_EQ(WeightUpdateModeOf("pipedream"), WeightUpdateMode::kPipeDream);
  EXPECT_EQ(WeightUpdateModeOf("2bw"), WeightUpdateMode::kTwoBuffer);
  EXPECT_EQ(WeightUpdateModeOf("my-schedule.sched"), WeightUpdateMode::kFlush);
}

TEST(Generators, EveryBuiltInValidatesAcrossSizes) {
  int validated = 0;
  for (const std::string& name : GeneratorNames()) {
    for (int p : {1, 2, 3, 4, 5, 8}) {
      for (int m : {1, 2, 3, 4, 7, 8, 12, 16, 17, 32}) {
        for (int v : {0, 1, 2, 3, 4}) {
          absl::StatusOr<Schedule> schedule = Generate(name, {p, m, v});
          if (!Accepts(name, p, m, v)) {
            EXPECT_EQ(schedule.status().code(), absl::StatusCode::kInvalidArgument)
                << name << " P=" << p << " M=" << m << " V=" << v;
            continue;
          }
          ASSERT_TRUE(schedule.ok()) << name << " P=" << p << " M=" << m << " V=" << v << ": "
                                     << schedule.status();
          const absl::Status status = Validate(*schedule);
          EXPECT_TRUE(status.ok()) << name << " P=" << p << " M=" << m << " V=" << v << ": "
                                   << status;
          EXPECT_EQ(schedule->num_actors, p);
          EXPECT_EQ(schedule->num_microbatches, m);
          EXPECT_EQ(schedule->name, name);
          ++validated;
        }
      }
    }
  }
  EXPECT_GT(validated, 500);
}

TEST(Generators, PipeDreamAnd2bwRun1f1bsOrderUnderTheirOwnName) {
  for (const char* name : {"pipedream", "2bw"}) {
    absl::StatusOr<Schedule> schedule = Generate(name, {3, 6, 0});
    absl::StatusOr<Schedule> one_f_one_b = Generate("1f1b", {3, 6, 0});
    ASSERT_TRUE(schedule.ok() && one_f_one_b.ok());
    EXPECT_EQ(schedule->name, name);
    EXPECT_EQ(schedule->programs, one_f_one_b->programs);
    EXPECT_TRUE(IsAsynchronous(name));
  }
  EXPECT_FALSE(IsAsynchronous("1f1b"));
}

TEST(Generators, UnknownNameListsTheKnownOnes) {
  absl::StatusOr<Schedule> schedule = Generate("2f2b", {2, 4, 0});
  EXPECT_EQ(schedule.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(schedule.status().message(), HasSubstr("unknown schedule '2f2b'"));
  EXPECT_THAT(schedule.status().message(), HasSubstr("gpipe, 1f1b, interleaved, looped-bfs"));
}

TEST(Generators, RejectsNonPositiveSizes) {
  EXPECT_THAT(Generate("1f1b", {0, 4, 0}).status().message(),
              HasSubstr("needs at least 1 actor: got actors=0"));
  EXPECT_THAT(Generate("gpipe", {2, 0, 0}).status().message(),
              HasSubstr("needs at least 1 microbatch: got microbatches=0"));
}

TEST(OneFOneB, GoldenTwoActorsFourMicrobatches) {
  absl::StatusOr<Schedule> schedule = GenerateOneFOneB({2, 4, 0});
  ASSERT_TRUE(schedule.ok()) << schedule.status();
  EXPECT_EQ(PrintScheduleText(*schedule),
            "schedule 1f1b\n"
            "actors 2\n"
            "stages 2\n"
            "microbatches 4\n"
            "placement loop\n"
            "actor 0: F0.0 F0.1 B0.0 F0.2 B0.1 F0.3 B0.2 B0.3\n"
            "actor 1: F1.0 B1.0 F1.1 B1.1 F1.2 B1.2 F1.3 B1.3\n");
}

// Position of each task in its actor's program.
int PositionOf(const Schedule& schedule, const Task& task) {
  const auto& program = schedule.programs[schedule.ActorOf(task.stage).value];
  for (size_t i = 0; i < program.size(); ++i) {
    for (const Task& t : program[i].tasks) {
      if (t == task) return static_cast<int>(i);
    }
  }
  return -1;
}

TEST(OneFOneB, BackwardFollowsForwardPerMicrobatch) {
  absl::StatusOr<Schedule> schedule = GenerateOneFOneB({4, 8, 0});
  ASSERT_TRUE(schedule.ok());
  for (int s = 0; s < 4; ++s) {
    for (int m = 0; m < 8; ++m) {
      EXPECT_LT(PositionOf(*schedule, {TaskKind::kForward, StageId(s), Microbatch(m)}),
                PositionOf(*schedule, {TaskKind::kBackward, StageId(s), Microbatch(m)}));
    }
  }
}

TEST(OneFOneB, LiveMicrobatchesOnActorRAreAtMostPMinusR) {
  const int p = 4, m = 8;
  absl::StatusOr<Schedule> schedule = GenerateOneFOneB({p, m, 0});
  ASSERT_TRUE(schedule.ok());
  for (int r = 0; r < p; ++r) {
    int live = 0, peak = 0;
    for (const Slot& slot : schedule->programs[r]) {
      live += slot.tasks[0].kind == TaskKind::kForward ? 1 : -1;
      peak = std::max(peak, live);
    }
    EXPECT_EQ(peak, std::min(p - r, m)) << "actor " << r;
  }
}

TEST(GPipe, AllForwardsBeforeAnyBackward) {
  absl::StatusOr<Schedule> schedule = GenerateGPipe({2, 3, 0});
  ASSERT_TRUE(schedule.ok());
  EXPECT_EQ(PrintScheduleText(*schedule),
            "schedule gpipe\nactors 2\nstages 2\nmicrobatches 3\nplacement loop\n"
            "actor 0: F0.0 F0.1 F0.2 B0.0 B0.1 B0.2\n"
            "actor 1: F1.0 F1.1 F1.2 B1.0 B1.1 B1.2\n");
  EXPECT_THAT(GenerateGPipe({2, 3, 2}).status().message(),
              HasSubstr("gpipe places exactly 1 stage per actor: got virtual=2"));
}

TEST(ZeroBubbleH1, GoldenTwoActorsFourMicrobatches) {
  absl::StatusOr<Schedule> schedule = GenerateZeroBubbleH1({2, 4, 0});
  ASSERT_TRUE(schedule.ok());
  EXPECT_EQ(PrintScheduleText(*schedule),
            "schedule zb-h1\nactors 2\nstages 2\nmicrobatches 4\nplacement loop\n"
            "actor 0: F0.0 F0.1 I0.0 W0.0 F0.2 I0.1 W0.1 F0.3 I0.2 W0.2 I0.3 W0.3\n"
            "actor 1: F1.0 I1.0 F1.1 I1.1 W1.0 F1.2 I1.2 W1.1 F1.3 I1.3 W1.2 W1.3\n");
}

TEST(ZeroBubbleH1, KeepsOneFOneBMemoryOfAtMostPLiveMicrobatches) {
  const int p = 4, m = 12;
  absl::StatusOr<Schedule> schedule = GenerateZeroBubbleH1({p, m, 0});
  ASSERT_TRUE(schedule.ok());
  for (int r = 0; r < p; ++r) {
    int live = 0, peak = 0;  // F done and W not yet done
    for (const Slot& slot : schedule->programs[r]) {
      if (slot.tasks[0].kind == TaskKind::kForward) ++live;
      if (slot.tasks[0].kind == TaskKind::kBackwardWeight) --live;
      peak = std::max(peak, live);
    }
    EXPECT_LE(peak, p) << "actor " << r;
  }
}

TEST(Interleaved, GoldenTwoActorsFourMicrobatchesTwoStagesEach) {
  absl::StatusOr<Schedule> schedule = GenerateInterleaved({2, 4, 2});
  ASSERT_TRUE(schedule.ok());
  EXPECT_EQ(PrintScheduleText(*schedule),
            "schedule interleaved\nactors 2\nstages 4\nmicrobatches 4\nplacement loop\n"
            "actor 0: F0.0 F0.1 F2.0 F2.1 F0.2 B2.0 F0.3 B2.1 F2.2 B0.0 F2.3 B0.1 B2.2 B2.3 "
            "B0.2 B0.3\n"
            "actor 1: F1.0 F1.1 F3.0 B3.0 F3.1 B3.1 F1.2 B1.0 F1.3 B1.1 F3.2 B3.2 F3.3 B3.3 "
            "B1.2 B1.3\n");
}

TEST(Interleaved, ExplainsTheMicrobatchMultipleConstraint) {
  absl::StatusOr<Schedule> schedule = GenerateInterleaved({4, 6, 2});
  EXPECT_EQ(schedule.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(schedule.status().message(),
              HasSubstr("interleaved 1F1B needs microbatches to be a multiple of actors "
                        "(Megatron's order"));
  EXPECT_THAT(schedule.status().message(), HasSubstr("got M=6, P=4"));
}

TEST(Interleaved, UsesLoopPlacement) {
  absl::StatusOr<Schedule> schedule = GenerateInterleaved({4, 8, 3});
  ASSERT_TRUE(schedule.ok());
  EXPECT_EQ(schedule->num_stages, 12);
  for (int s = 0; s < 12; ++s) EXPECT_EQ(schedule->stage_to_actor[s].value, s % 4);
}

TEST(LoopedBfs, RunsEveryMicrobatchThroughALocalStageBeforeTheNext) {
  absl::StatusOr<Schedule> schedule = GenerateLoopedBfs({2, 3, 2});
  ASSERT_TRUE(schedule.ok());
  EXPECT_EQ(PrintScheduleText(*schedule),
            "schedule looped-bfs\nactors 2\nstages 4\nmicrobatches 3\nplacement loop\n"
            "actor 0: F0.0 F0.1 F0.2 F2.0 F2.1 F2.2 B2.0 B2.1 B2.2 B0.0 B0.1 B0.2\n"
            "actor 1: F1.0 F1.1 F1.2 F3.0 F3.1 F3.2 B3.0 B3.1 B3.2 B1.0 B1.1 B1.2\n");
}

TEST(ZeroBubbleV, PlacesStagesRAndTwoPMinusOneMinusROnActorR) {
  absl::StatusOr<Schedule> schedule = GenerateZeroBubbleV({4, 8, 0});
  ASSERT_TRUE(schedule.ok());
  EXPECT_EQ(schedule->num_stages, 8);
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(schedule->stage_to_actor[r].value, r);
    EXPECT_EQ(schedule->stage_to_actor[7 - r].value, r);
  }
  EXPECT_TRUE(schedule->SplitsBackward());
  EXPECT_EQ(schedule->NumTasks(), 3 * 8 * 8);
}

TEST(ZeroBubbleV, GoldenTwoActorsFourMicrobatches) {
  absl::StatusOr<Schedule> schedule = GenerateZeroBubbleV({2, 4, 0});
  ASSERT_TRUE(schedule.ok());
  EXPECT_EQ(PrintScheduleText(*schedule),
            "schedule zb-v\nactors 2\nstages 4\nmicrobatches 4\nplacement v\n"
            "actor 0: F0.0 F0.1 F0.2 F3.0 I3.0 W3.0 F3.1 I3.1 W3.1 F0.3 I0.0 W0.0 F3.2 I3.2 "
            "W3.2 I0.1 W0.1 F3.3 I3.3 W3.3 I0.2 W0.2 I0.3 W0.3\n"
            "actor 1: F1.0 F2.0 F1.1 F2.1 I2.0 W2.0 F1.2 I1.0 W1.0 F2.2 I2.1 W2.1 F1.3 I1.1 "
            "W1.1 F2.3 I2.2 W2.2 I1.2 I2.3 I1.3 W1.2 W2.3 W1.3\n");
}

TEST(ZeroBubbleV, ExplainsTheMinimumMicrobatches) {
  EXPECT_THAT(GenerateZeroBubbleV({4, 6, 0}).status().message(),
              HasSubstr("zb-v needs at least 2P-1 microbatches"));
  EXPECT_THAT(GenerateZeroBubbleV({4, 8, 3}).status().message(),
              HasSubstr("zb-v places exactly 2 stages per actor: got virtual=3"));
}

TEST(DualPipeV, OverlapsForwardAndBackwardInOneSlot) {
  absl::StatusOr<Schedule> schedule = GenerateDualPipeV({4, 10, 0});
  ASSERT_TRUE(schedule.ok());
  int groups = 0;
  for (const auto& program : schedule->programs) {
    for (const Slot& slot : program) {
      if (slot.tasks.size() == 2) {
        ++groups;
        EXPECT_EQ(slot.tasks[0].kind, TaskKind::kForward);
        EXPECT_EQ(slot.tasks[1].kind, TaskKind::kBackward);
      }
    }
  }
  EXPECT_GT(groups, 0);
  EXPECT_EQ(schedule->stage_to_actor, VPlacement(4, 8));
  EXPECT_THAT(GenerateDualPipeV({4, 7, 0}).status().message(),
              HasSubstr("dualpipev needs at least 2P microbatches"));
}

}  // namespace
}  // namespace tandem::schedules
