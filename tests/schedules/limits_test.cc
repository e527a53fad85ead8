// Bad input to every schedule reader: a size over its bound is a clear
// error naming the bound, found before anything is allocated from it (each
// case runs under a 1 GiB address-space cap, so a regression fails instead
// of eating the machine), and messages quote only a short excerpt.
#include "schedules/limits.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "schedules/generators.h"
#include "schedules/pytorch_csv.h"
#include "schedules/resolve.h"
#include "schedules/text_format.h"
#include "schedules/validator.h"
#include "tests/testing/memory_limit.h"

namespace tandem::schedules {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using test::ExpectWithinMemory;

// True when `result` failed with InvalidArgument containing `expected`;
// prints what it got otherwise (the child's stderr reaches the test log).
template <typename T>
bool FailsWith(const absl::StatusOr<T>& result, const std::string& expected) {
  if (!result.ok() && result.status().code() == absl::StatusCode::kInvalidArgument &&
      absl::StrContains(result.status().message(), expected)) {
    return true;
  }
  fprintf(stderr, "expected InvalidArgument with '%s', got: %s\n", expected.c_str(),
          result.ok() ? "OK" : std::string(result.status().message()).c_str());
  return false;
}

TEST(ScheduleLimits, CheckNamesTheFirstSizeOverItsBound) {
  EXPECT_TRUE(CheckScheduleSizes(kMaxActors, kMaxStages / 2, 2).ok());
  EXPECT_EQ(CheckScheduleSizes(999999999, 1, 1).message(),
            "actors 999999999 is more than the 4096 a schedule may have");
  EXPECT_THAT(CheckScheduleSizes(1, kMaxStages + 1, 1).message(), HasSubstr("stages 65537 is more than the 65536"));
  EXPECT_THAT(CheckScheduleSizes(1, 1, kMaxMicrobatches + 1).message(),
              HasSubstr("microbatches 65537 is more than the 65536"));
  EXPECT_THAT(CheckScheduleSizes(1, 4096, 4096).message(),
              HasSubstr("stages x microbatches = 4096 x 4096 = 16777216 is more than the 8388608"));
}

TEST(ScheduleLimits, TheLargestPlannedPipelineFits) {
  // A later issue compiles and simulates 1,024 actors x 256 microbatches.
  for (const char* name : {"1f1b", "zb-h1"}) {
    absl::StatusOr<Schedule> schedule = Generate(name, {.actors = 1024, .microbatches = 256});
    ASSERT_TRUE(schedule.ok()) << name << ": " << schedule.status();
    EXPECT_TRUE(Validate(*schedule).ok()) << name;
  }
}

TEST(ScheduleTextLimits, HugeActorCountIsRefusedBeforeAnyAllocation) {
  ExpectWithinMemory([] {
    return FailsWith(ParseScheduleText("actors 999999999\nmicrobatches 1\n", "a.sched"),
                     "a.sched:1:8: error: actors 999999999 is more than the 4096 a schedule may have");
  });
}

TEST(ScheduleTextLimits, HugeStageAndMicrobatchCountsAreRefused) {
  ExpectWithinMemory([] {
    return FailsWith(ParseScheduleText("actors 2\nstages 999999999\nmicrobatches 1\n", "a.sched"),
                     "a.sched:2:8: error: stages 999999999 is more than the 65536 a schedule may have") &&
           FailsWith(ParseScheduleText("actors 2\nmicrobatches 999999999\n", "a.sched"),
                     "microbatches 999999999 is more than the 65536") &&
           FailsWith(ParseScheduleText("actors 12345678901234567890\nmicrobatches 1\n", "a.sched"),
                     "actors 12345678901234567890 is more than the 4096") &&
           FailsWith(ParseScheduleText("actors 4096\nstages 65536\nmicrobatches 65536\n", "a.sched"),
                     "a.sched:3:14: error: stages x microbatches = 65536 x 65536");
  });
}

TEST(ScheduleTextLimits, TooManyPlacementEntriesAreRefused) {
  std::string text = "actors 1\nmicrobatches 1\nplacement";
  for (int64_t s = 0; s <= kMaxStages; ++s) text += " 0";
  EXPECT_THAT(ParseScheduleText(text, "p.sched").status().message(),
              HasSubstr("more than the 65536 stages a schedule may have"));
}

TEST(ScheduleTextLimits, AMegabyteTokenIsQuotedShortly) {
  const std::string token(1 << 20, 'x');
  for (const std::string& text :
       {token + "\n", absl::StrCat("actors ", token, "\n"), absl::StrCat("actors 1\nmicrobatches 1\nactor 0: F", token),
        absl::StrCat("actors 1\nmicrobatches 1\nactor ", token, ": F0.0"), absl::StrCat("schedule ", token, "\n")}) {
    absl::StatusOr<Schedule> parsed = ParseScheduleText(text, "big.sched");
    ASSERT_FALSE(parsed.ok());
    EXPECT_LT(parsed.status().message().size(), 300u) << parsed.status().message().substr(0, 300);
  }
  EXPECT_THAT(ParseScheduleText(token, "big.sched").status().message(),
              HasSubstr("unknown statement 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...'"));
}

TEST(ScheduleCsvLimits, HugeStageFromATenByteFileIsRefusedBeforeAnyAllocation) {
  ExpectWithinMemory([] {
    return FailsWith(ParsePytorchCsv("999999999F0\n", "x.csv"),
                     "x.csv:1:1: error: rank 0, cell 0: stage 999999999 in '999999999F0' is beyond the 65536 "
                     "stages a schedule may have") &&
           FailsWith(ParsePytorchCsv("0F999999999\n", "x.csv"), "microbatch 999999999 in '0F999999999' is beyond") &&
           FailsWith(ParsePytorchCsv("0F0,0SEND_F999999999\n", "x.csv"), "microbatch 999999999");
  });
}

TEST(ScheduleCsvLimits, FewActionsNamingManyPairsAreRefusedBeforeTheTables) {
  // 4,000 x 2,000 pairs would be 1.4 GB of import tables for two actions.
  ExpectWithinMemory([] {
    return FailsWith(ParsePytorchCsv("3999F0,0F1999\n", "x.csv"),
                     "the file's 2 compute actions are far fewer than its 4000 stages x 2000 microbatches need");
  });
  EXPECT_THAT(ParsePytorchCsv("65535F0,0F65535\n", "x.csv").status().message(),
              HasSubstr("stages x microbatches = 65536 x 65536"));
}

TEST(ScheduleCsvLimits, TooManyRowsAreRefusedWithoutKeepingThemAll) {
  std::string text;
  for (int64_t r = 0; r <= kMaxActors; ++r) text += "0F0\n";
  EXPECT_THAT(ParsePytorchCsv(text, "x.csv").status().message(),
              HasSubstr("x.csv:4097: error: more than the 4096 ranks (rows) a schedule may have"));
  // Blank lines at the end are not ranks.
  EXPECT_TRUE(ParsePytorchCsv("0F0,0B0\n" + std::string(100000, '\n'), "x.csv").ok());
}

TEST(ScheduleCsvLimits, AMegabyteCellIsQuotedShortly) {
  const std::string cell(1 << 20, 'F');
  for (const std::string& text : {"0" + cell + "0\n", cell + "\n", "(" + cell + ")OVERLAP_F_B\n", "(0F0;1F0)" + cell}) {
    absl::StatusOr<Schedule> parsed = ParsePytorchCsv(text, "big.csv");
    ASSERT_FALSE(parsed.ok());
    EXPECT_LT(parsed.status().message().size(), 400u) << parsed.status().message().substr(0, 400);
  }
}

TEST(GeneratorLimits, SizesOverTheBoundsAreRefused) {
  ExpectWithinMemory([] {
    return FailsWith(Generate("1f1b", {.actors = 999999999, .microbatches = 1}),
                     "1f1b: actors 999999999 is more than the 4096 a schedule may have") &&
           FailsWith(Generate("interleaved", {.actors = 4, .microbatches = 4, .virtual_stages = 100000}),
                     "interleaved 1F1B: virtual 100000 is more than the 64 stages per actor") &&
           FailsWith(Generate("gpipe", {.actors = 4096, .microbatches = 65536}),
                     "gpipe: stages x microbatches = 4096 x 65536") &&
           FailsWith(Generate("looped-bfs", {.actors = 4096, .microbatches = 800, .virtual_stages = 2}),
                     "more than the 16777216 tasks a schedule may have");
  });
}

TEST(ValidatorLimits, FewTasksOverManyPairsAreRefusedBeforeTheTable) {
  Schedule schedule;
  schedule.num_actors = 1;
  schedule.num_stages = 4096;
  schedule.num_microbatches = 2048;
  schedule.stage_to_actor.assign(4096, ActorId(0));
  schedule.programs = {{Slot{{Task{TaskKind::kForward, StageId(0), Microbatch(0)}}}}};
  ExpectWithinMemory([&] {
    const absl::Status status = Validate(schedule);
    return absl::StrContains(status.message(), "the schedule lists 1 tasks, far fewer than its 4096 stages x 2048");
  });
}

TEST(ScheduleFileLimits, ADirectoryIsNotASchedule) {
  const std::string dir = ::testing::TempDir() + "/sched-dir-" + std::to_string(getpid()) + ".sched";
  std::filesystem::create_directories(dir);
  absl::StatusOr<Schedule> schedule = ReadScheduleFile(dir);
  EXPECT_EQ(schedule.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(schedule.status().message(), dir + ": error: the file is a directory");
  EXPECT_THAT(ResolveSchedule(dir, 2, 2).status().message(), HasSubstr("is a directory"));
  std::filesystem::remove_all(dir);
  EXPECT_EQ(ReadScheduleFile(dir).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace tandem::schedules
