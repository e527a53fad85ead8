#include "schedules/text_format.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "schedules/generators.h"
#include "schedules/placement.h"
#include "schedules/validator.h"

namespace tandem::schedules {
namespace {

using ::testing::HasSubstr;

std::string ParseError(const std::string& text) {
  absl::StatusOr<Schedule> schedule = ParseScheduleText(text, "pipe.sched");
  EXPECT_FALSE(schedule.ok());
  EXPECT_EQ(schedule.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(schedule.status().message());
}

TEST(TextFormat, RoundTripsEveryBuiltIn) {
  for (const std::string& name : GeneratorNames()) {
    for (int p : {1, 2, 4}) {
      for (int m : {8, 16}) {
        absl::StatusOr<Schedule> schedule = Generate(name, {p, m, 0});
        ASSERT_TRUE(schedule.ok()) << name << ": " << schedule.status();
        const std::string text = PrintScheduleText(*schedule);
        absl::StatusOr<Schedule> parsed = ParseScheduleText(text, "gen.sched");
        ASSERT_TRUE(parsed.ok()) << name << ": " << parsed.status();
        EXPECT_EQ(*parsed, *schedule) << name;
        EXPECT_EQ(PrintScheduleText(*parsed), text) << name;
      }
    }
  }
}

TEST(TextFormat, MinimalHeaderDefaultsToOneStagePerActorInLoopPlacement) {
  absl::StatusOr<Schedule> schedule = ParseScheduleText(
      "# two actors\n"
      "actors 2   # P\n"
      "microbatches 1\n"
      "\n"
      "actor 0: F0.0 B0.0\n"
      "actor 1: F1.0 B1.0  # the last stage\n");
  ASSERT_TRUE(schedule.ok()) << schedule.status();
  EXPECT_EQ(schedule->num_stages, 2);
  EXPECT_EQ(schedule->stage_to_actor, LoopPlacement(2, 2));
  EXPECT_TRUE(schedule->name.empty());
  EXPECT_TRUE(Validate(*schedule).ok());
}

TEST(TextFormat, VPlacementDefaultsToTwoStagesPerActor) {
  absl::StatusOr<Schedule> schedule =
      ParseScheduleText("actors 2\nmicrobatches 1\nplacement v\n");
  ASSERT_TRUE(schedule.ok()) << schedule.status();
  EXPECT_EQ(schedule->num_stages, 4);
  EXPECT_EQ(schedule->stage_to_actor,
            (std::vector<ActorId>{ActorId(0), ActorId(1), ActorId(1), ActorId(0)}));
}

TEST(TextFormat, ExplicitPlacementGroupsAndContinuedActorLines) {
  absl::StatusOr<Schedule> schedule = ParseScheduleText(
      "schedule my custom one\n"
      "actors 2\nmicrobatches 2\nplacement 1 0\n"
      "actor 1: F0.0 ( F0.1 ; B0.0 )\n"
      "actor 0: F1.0 B1.0 F1.1 B1.1\n"
      "actor 1: B0.1\n");
  ASSERT_TRUE(schedule.ok()) << schedule.status();
  EXPECT_EQ(schedule->name, "my custom one");
  EXPECT_EQ(schedule->stage_to_actor, (std::vector<ActorId>{ActorId(1), ActorId(0)}));
  ASSERT_EQ(schedule->programs[1].size(), 3u);
  EXPECT_EQ(SlotName(schedule->programs[1][1]), "(F0.1;B0.0)");
  EXPECT_TRUE(Validate(*schedule).ok()) << Validate(*schedule);
  EXPECT_EQ(PrintScheduleText(*schedule),
            "schedule my custom one\nactors 2\nstages 2\nmicrobatches 2\nplacement 1 0\n"
            "actor 0: F1.0 B1.0 F1.1 B1.1\n"
            "actor 1: F0.0 (F0.1;B0.0) B0.1\n");
}

TEST(TextFormat, SyntaxErrorPointsAtLineAndColumn) {
  EXPECT_EQ(ParseError("actors 2\nmicrobatches 2\nactor 0 F0.0\n"),
            "pipe.sched:3:9: error: expected ':' after 'actor 0'");
}

TEST(TextFormat, UnknownTokenPointsAtTheToken) {
  EXPECT_EQ(ParseError("actors 2\nmicrobatches 2\nactor 0: F0.0 X0.1 B0.0\n"),
            "pipe.sched:3:15: error: unknown task 'X0.1': expected F, B, I or W, a stage, '.' "
            "and a microbatch, e.g. F0.3");
  EXPECT_THAT(ParseError("actors 2\nmicrobatches 2\nactor 0: F0\n"),
              HasSubstr("pipe.sched:3:10: error: unknown task 'F0'"));
}

TEST(TextFormat, StageOutOfRange) {
  EXPECT_EQ(ParseError("actors 2\nmicrobatches 2\nactor 1:  F1.0 F2.0\n"),
            "pipe.sched:3:16: error: stage 2 out of range in 'F2.0': the schedule has 2 stages "
            "(0 to 1)");
}

TEST(TextFormat, MicrobatchOutOfRange) {
  EXPECT_EQ(ParseError("actors 2\nmicrobatches 2\nactor 1: (F1.0;B1.2)\n"),
            "pipe.sched:3:16: error: microbatch 2 out of range in 'B1.2': the schedule has 2 "
            "microbatches (0 to 1)");
}

TEST(TextFormat, ActorOutOfRange) {
  EXPECT_EQ(ParseError("actors 2\nmicrobatches 2\nactor 2: F1.0\n"),
            "pipe.sched:3:7: error: actor 2 out of range: the schedule has 2 actors (0 to 1)");
  EXPECT_EQ(ParseError("actors 2\nmicrobatches 2\nplacement 0 1 2\n"),
            "pipe.sched:3:15: error: actor 2 out of range: the schedule has 2 actors (0 to 1)");
}

TEST(TextFormat, HeaderMistakes) {
  EXPECT_EQ(ParseError("actors 2\nactor 0: F0.0\n"),
            "pipe.sched:2:1: error: 'microbatches N' must be set before the first actor line");
  EXPECT_EQ(ParseError("actors 2\nactors 3\n"),
            "pipe.sched:2:1: error: 'actors' is already set on line 1");
  EXPECT_EQ(ParseError("actors two\n"),
            "pipe.sched:1:8: error: expected a positive number after 'actors', got 'two'");
  EXPECT_EQ(ParseError("actors 2\nmicrobatches 1\nactor 0:\nstages 2\n"),
            "pipe.sched:4:1: error: 'stages' must come before the first actor line");
  EXPECT_EQ(ParseError("actors 2\nmicrobatches 1\nplacement 0 1 1\nstages 2\n"),
            "pipe.sched:3:11: error: placement lists 3 stages but 'stages' is 2");
  EXPECT_THAT(ParseError("  actros 2\n"),
              HasSubstr("pipe.sched:1:3: error: unknown statement 'actros': expected schedule, "
                        "actors, stages, microbatches, placement, stage-graph or actor"));
}

TEST(TextFormat, GroupMistakes) {
  EXPECT_EQ(ParseError("actors 1\nmicrobatches 1\nactor 0: (F0.0;B0.0\n"),
            "pipe.sched:3:10: error: unclosed group: missing ')'");
  EXPECT_EQ(ParseError("actors 1\nmicrobatches 1\nactor 0: (F0.0)\n"),
            "pipe.sched:3:10: error: a group needs at least two tasks; write one task without "
            "parentheses");
  EXPECT_EQ(ParseError("actors 1\nmicrobatches 1\nactor 0: (F0.0;;B0.0)\n"),
            "pipe.sched:3:16: error: expected a task in the group");
}

TEST(TextFormat, AcceptsWindowsLineEndings) {
  absl::StatusOr<Schedule> schedule =
      ParseScheduleText("actors 1\r\nmicrobatches 1\r\nactor 0: F0.0 B0.0\r\n");
  ASSERT_TRUE(schedule.ok()) << schedule.status();
  EXPECT_TRUE(Validate(*schedule).ok());
}

}  // namespace
}  // namespace tandem::schedules
