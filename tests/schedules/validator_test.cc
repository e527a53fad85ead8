#include "schedules/validator.h"

#include <chrono>
#include <iostream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "schedules/generators.h"
#include "tests/schedules/test_schedules.h"

namespace tandem::schedules {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using testing::FromText;

constexpr char kHeader[] = "actors 2\nmicrobatches 2\n";

Task T(TaskKind kind, int stage, int mb) { return Task{kind, StageId(stage), Microbatch(mb)}; }

TEST(Validator, AcceptsAHandWrittenOneFOneB) {
  const Schedule schedule = FromText(std::string(kHeader) +
                                     "actor 0: F0.0 F0.1 B0.0 B0.1\n"
                                     "actor 1: F1.0 B1.0 F1.1 B1.1\n");
  EXPECT_TRUE(Validate(schedule).ok()) << Validate(schedule);
}

TEST(Validator, ReportsStageOutOfRange) {
  Schedule schedule = FromText(std::string(kHeader) +
                               "actor 0: F0.0 F0.1 B0.0 B0.1\n"
                               "actor 1: F1.0 B1.0 F1.1 B1.1\n");
  schedule.programs[0][1].tasks[0] = T(TaskKind::kForward, 5, 1);
  const absl::Status status = Validate(schedule);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("actor 0, slot 1: F5.1: stage 5 out of range [0, 2)"));
}

TEST(Validator, ReportsMicrobatchOutOfRange) {
  Schedule schedule = FromText(std::string(kHeader) +
                               "actor 0: F0.0 F0.1 B0.0 B0.1\n"
                               "actor 1: F1.0 B1.0 F1.1 B1.1\n");
  schedule.programs[1][2].tasks[0] = T(TaskKind::kForward, 1, -1);
  EXPECT_THAT(Validate(schedule).message(),
              HasSubstr("actor 1, slot 2: F1.-1: microbatch -1 out of range [0, 2)"));
}

TEST(Validator, ReportsDuplicateTaskWithBothPlaces) {
  const Schedule schedule = FromText(std::string(kHeader) +
                                     "actor 0: F0.0 F0.1 B0.0 B0.1 F0.1\n"
                                     "actor 1: F1.0 B1.0 F1.1 B1.1\n");
  EXPECT_THAT(Validate(schedule).message(),
              HasSubstr("actor 0, slot 4: F0.1: duplicate task, already at actor 0, slot 1"));
}

TEST(Validator, ReportsMissingTasksByName) {
  const Schedule schedule = FromText(std::string(kHeader) +
                                     "actor 0: F0.0 F0.1 B0.0 B0.1\n"
                                     "actor 1: F1.0 B1.0 F1.1\n");
  EXPECT_THAT(Validate(schedule).message(), HasSubstr("missing task B1.1 (or I1.1 and W1.1)"));
  const Schedule no_forward = FromText(std::string(kHeader) +
                                       "actor 0: F0.0 B0.0 B0.1\n"
                                       "actor 1: F1.0 B1.0 F1.1 B1.1\n");
  EXPECT_THAT(Validate(no_forward).message(), HasSubstr("missing task F0.1"));
}

TEST(Validator, ReportsMissingWeightHalf) {
  const Schedule schedule = FromText(std::string(kHeader) +
                                     "actor 0: F0.0 F0.1 I0.0 W0.0 I0.1\n"
                                     "actor 1: F1.0 B1.0 F1.1 B1.1\n");
  EXPECT_THAT(Validate(schedule).message(),
              HasSubstr("missing task W0.1 (the weight-gradient half of I0.1 at actor 0, slot 4)"));
}

TEST(Validator, ReportsTaskOnTheWrongActor) {
  const Schedule schedule = FromText(std::string(kHeader) +
                                     "actor 0: F0.0 B0.0 B0.1\n"
                                     "actor 1: F0.1 F1.0 B1.0 F1.1 B1.1\n");
  EXPECT_THAT(Validate(schedule).message(),
              HasSubstr("actor 1, slot 0: F0.1: stage 0 is placed on actor 0, so its tasks must "
                        "run there"));
}

TEST(Validator, ReportsWeightBeforeItsInput) {
  const Schedule schedule = FromText(std::string(kHeader) +
                                     "actor 0: F0.0 F0.1 I0.0 W0.1 W0.0 I0.1\n"
                                     "actor 1: F1.0 I1.0 W1.0 F1.1 I1.1 W1.1\n");
  EXPECT_THAT(Validate(schedule).message(),
              HasSubstr("actor 0, slot 3: W0.1 runs before its I0.1 (actor 0, slot 5)"));
}

TEST(Validator, ReportsBackwardMixedWithItsHalves) {
  const Schedule schedule = FromText(std::string(kHeader) +
                                     "actor 0: F0.0 F0.1 B0.0 I0.0 B0.1 W0.0\n"
                                     "actor 1: F1.0 B1.0 F1.1 B1.1\n");
  EXPECT_THAT(Validate(schedule).message(),
              HasSubstr("actor 0, slot 2: B0.0 mixes with I0.0 at actor 0, slot 3"));
}

TEST(Validator, ReportsSizeAndPlacementProblems) {
  Schedule schedule = FromText(std::string(kHeader) + "actor 0: F0.0\n");
  schedule.stage_to_actor[1] = ActorId(7);
  EXPECT_THAT(Validate(schedule).message(),
              HasSubstr("placement: stage 1 is placed on actor 7, out of range [0, 2)"));
  schedule.stage_to_actor.pop_back();
  EXPECT_THAT(Validate(schedule).message(),
              HasSubstr("placement has 1 entries but the schedule has 2 stages"));
}

// Actor 1 runs F1.1 before B1.0, but F1.1 needs F0.1, which actor 0 runs
// only after B0.0, which needs B1.0.
constexpr char kCrossActorDeadlock[] =
    "actors 2\nmicrobatches 2\n"
    "actor 0: F0.0 B0.0 F0.1 B0.1\n"
    "actor 1: F1.0 F1.1 B1.0 B1.1\n";

TEST(Validator, DeadlockWitnessNamesActorsAndTasksOnTheCycle) {
  const absl::Status status = Validate(FromText(kCrossActorDeadlock));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "deadlock: actor 0: B0.0 (slot 1) waits for actor 1: B1.0 (slot 2) waits for "
            "actor 1: F1.1 (slot 1) waits for actor 0: F0.1 (slot 2) waits for "
            "actor 0: B0.0 (slot 1)");
}

TEST(Validator, DeadlockWithinOneActorIsReportedAsTwoSlots) {
  const Schedule schedule = FromText(std::string(kHeader) +
                                     "actor 0: F0.0 B0.0 B0.1 F0.1\n"
                                     "actor 1: F1.0 B1.0 F1.1 B1.1\n");
  EXPECT_EQ(Validate(schedule).message(),
            "deadlock: actor 0: B0.1 (slot 2) waits for actor 0: F0.1 (slot 3) waits for "
            "actor 0: B0.1 (slot 2)");
}

TEST(Validator, GroupThatFeedsItselfDeadlocks) {
  const Schedule schedule = FromText(
      "actors 1\nstages 2\nmicrobatches 1\n"
      "actor 0: (F0.0;F1.0) B1.0 B0.0\n");
  EXPECT_EQ(Validate(schedule).message(),
            "deadlock: actor 0: (F0.0;F1.0) (slot 0) waits for actor 0: (F0.0;F1.0) (slot 0)");
}

TEST(Validator, GroupsOfIndependentTasksAreFine) {
  const Schedule schedule = FromText(
      "actors 1\nstages 2\nmicrobatches 2\n"
      "actor 0: F0.0 (F1.0;F0.1) (B1.0;F1.1) (B0.0;B1.1) B0.1\n");
  EXPECT_TRUE(Validate(schedule).ok()) << Validate(schedule);
}

TEST(Validator, LargeDeadlockWitnessIsShort) {
  absl::StatusOr<Schedule> schedule = GenerateOneFOneB({8, 32, 0});
  ASSERT_TRUE(schedule.ok());
  // Actor 5 runs its first backward before its last warm-up forward.
  std::swap(schedule->programs[5][1], schedule->programs[5][3]);
  const absl::Status status = Validate(*schedule);
  EXPECT_THAT(std::string(status.message()), StartsWith("deadlock: actor 5: "));
  EXPECT_THAT(status.message(), HasSubstr("B5.0 (slot 1) waits for actor 6: B6.0"));
}

TEST(Validator, BufferedSendsLetOneFOneBRunButRendezvousDeadlocks) {
  absl::StatusOr<Schedule> schedule = GenerateOneFOneB({2, 2, 0});
  ASSERT_TRUE(schedule.ok());
  EXPECT_TRUE(Validate(*schedule).ok());
  const absl::Status status = Validate(*schedule, {.rendezvous = true});
  EXPECT_EQ(status.message(),
            "deadlock: actor 0: send F0.1 -> F1.1 to actor 1 waits for actor 1: send B1.0 -> "
            "B0.0 to actor 0 waits for actor 0: send F0.1 -> F1.1 to actor 1");
}

TEST(Validator, GPipeRunsUnderRendezvous) {
  for (int p : {2, 3, 4}) {
    absl::StatusOr<Schedule> schedule = GenerateGPipe({p, 2 * p, 0});
    ASSERT_TRUE(schedule.ok());
    EXPECT_TRUE(Validate(*schedule, {.rendezvous = true}).ok());
  }
}

// 64 actors, 4 stages each, 512 microbatches: 262,144 tasks; with the
// backward split into I and W (each B replaced by I then W) 393,216.
TEST(Validator, LargeInterleavedScheduleValidatesQuickly) {
  absl::StatusOr<Schedule> schedule = GenerateInterleaved({64, 512, 4});
  ASSERT_TRUE(schedule.ok());
  Schedule split = *schedule;
  for (auto& program : split.programs) {
    std::vector<Slot> slots;
    for (const Slot& slot : program) {
      const Task& t = slot.tasks[0];
      if (t.kind != TaskKind::kBackward) {
        slots.push_back(slot);
        continue;
      }
      slots.push_back(Slot{{Task{TaskKind::kBackwardInput, t.stage, t.microbatch}}});
      slots.push_back(Slot{{Task{TaskKind::kBackwardWeight, t.stage, t.microbatch}}});
    }
    program = std::move(slots);
  }
  for (const Schedule* s : {&*schedule, &split}) {
    const auto start = std::chrono::steady_clock::now();
    const absl::Status status = Validate(*s);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count();
    EXPECT_TRUE(status.ok()) << status;
    std::cout << "validate " << s->NumTasks() << " tasks: " << ms << " ms\n";
    EXPECT_LT(ms, 5000);  // Generous for debug and sanitizer builds; ~0.1 s in Release.
  }
}

TEST(Validator, LargeDeadlockIsFoundAndExplained) {
  absl::StatusOr<Schedule> schedule = GenerateInterleaved({64, 512, 4});
  ASSERT_TRUE(schedule.ok());
  std::swap(schedule->programs[10][100], schedule->programs[10][900]);
  const absl::Status status = Validate(*schedule);
  EXPECT_THAT(std::string(status.message()), AllOf(StartsWith("deadlock: actor 10: "), HasSubstr("(slot 900)")));
}

}  // namespace
}  // namespace tandem::schedules
