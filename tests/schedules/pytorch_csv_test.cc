#include "schedules/pytorch_csv.h"

#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "schedules/generators.h"
#include "schedules/placement.h"
#include "schedules/text_format.h"
#include "schedules/validator.h"
#include "tests/testing/test_data.h"

namespace tandem::schedules {
namespace {

using ::testing::HasSubstr;

std::string Fixture(const std::string& name) {
  return ::tandem::test::ReadTestData("pytorch-pipelining/" + name);
}

// `text` with its one occurrence of `from` replaced by `to`.
std::string Replaced(const std::string& text, const std::string& from, const std::string& to) {
  EXPECT_EQ(text.find(from), text.rfind(from)) << from << " occurs more than once";
  const std::string result = absl::StrReplaceAll(text, {{from, to}});
  EXPECT_NE(result, text) << from << " not found";
  return result;
}

int CountKind(const Schedule& schedule, TaskKind kind) {
  int n = 0;
  for (const auto& program : schedule.programs) {
    for (const Slot& slot : program) {
      for (const Task& task : slot.tasks) n += task.kind == kind;
    }
  }
  return n;
}

TEST(PytorchCsv, ImportsZeroBubbleComputeFileInLegacyDialect) {
  PytorchCsvStats stats;
  absl::StatusOr<Schedule> schedule =
      ParsePytorchCsv(Fixture("zb1p_2rank_2stagep_compute.csv"), "zb1p.csv", &stats);
  ASSERT_TRUE(schedule.ok()) << schedule.status();
  EXPECT_EQ(schedule->num_actors, 2);
  EXPECT_EQ(schedule->num_stages, 4);
  EXPECT_EQ(schedule->num_microbatches, 8);
  EXPECT_EQ(schedule->stage_to_actor, LoopPlacement(2, 4));
  EXPECT_EQ(schedule->NumTasks(), 96);
  EXPECT_EQ(CountKind(*schedule, TaskKind::kBackwardInput), 32);
  EXPECT_EQ(CountKind(*schedule, TaskKind::kBackward), 0);
  EXPECT_EQ(stats.legacy_input_backwards, 32);
  EXPECT_EQ(schedule->programs[0].size(), 48u);  // 49 cells, one idle
  EXPECT_TRUE(Validate(*schedule).ok()) << Validate(*schedule);
}

TEST(PytorchCsv, ImportsDualPipeVWithOverlappedGroupsAndVPlacement) {
  absl::StatusOr<Schedule> schedule =
      ParsePytorchCsv(Fixture("dualpipev_4rank_10mb.csv"), "dualpipev.csv");
  ASSERT_TRUE(schedule.ok()) << schedule.status();
  EXPECT_EQ(schedule->num_actors, 4);
  EXPECT_EQ(schedule->num_stages, 8);
  EXPECT_EQ(schedule->num_microbatches, 10);
  EXPECT_EQ(schedule->stage_to_actor, VPlacement(4, 8));
  EXPECT_EQ(schedule->NumTasks(), 182);
  EXPECT_EQ(CountKind(*schedule, TaskKind::kForward), 80);
  EXPECT_EQ(CountKind(*schedule, TaskKind::kBackward), 58);
  EXPECT_EQ(CountKind(*schedule, TaskKind::kBackwardInput), 22);
  EXPECT_EQ(SlotName(schedule->programs[0][17]), "(F0.7;B7.3)");
  EXPECT_TRUE(Validate(*schedule).ok()) << Validate(*schedule);
}

TEST(PytorchCsv, DualPipeVGeneratorReproducesPytorchsFixture) {
  absl::StatusOr<Schedule> imported =
      ParsePytorchCsv(Fixture("dualpipev_4rank_10mb.csv"), "dualpipev.csv");
  absl::StatusOr<Schedule> generated = GenerateDualPipeV({4, 10, 0});
  ASSERT_TRUE(imported.ok() && generated.ok());
  generated->name.clear();
  EXPECT_EQ(PrintScheduleText(*generated), PrintScheduleText(*imported));
}

TEST(PytorchCsv, ModernFileRoundTripsByteForByte) {
  const std::string text = Fixture("dualpipev_4rank_10mb.csv");
  absl::StatusOr<Schedule> schedule = ParsePytorchCsv(text, "dualpipev.csv");
  ASSERT_TRUE(schedule.ok());
  EXPECT_EQ(PrintPytorchCsv(*schedule), text);
}

TEST(PytorchCsv, LegacyFileRoundTripKeepsEveryTaskAndItsOrder) {
  absl::StatusOr<Schedule> first =
      ParsePytorchCsv(Fixture("zb1p_2rank_2stagep_compute.csv"), "zb1p.csv");
  ASSERT_TRUE(first.ok());
  // Through Tandem's text format and back to CSV (now with I for the
  // input-gradient half and without the idle cell).
  absl::StatusOr<Schedule> via_text = ParseScheduleText(PrintScheduleText(*first));
  ASSERT_TRUE(via_text.ok());
  const std::string exported = PrintPytorchCsv(*via_text);
  EXPECT_THAT(exported, HasSubstr("0F0,0F1,2F0,2F1,2I0,2W0,0F2"));
  absl::StatusOr<Schedule> second = ParsePytorchCsv(exported, "exported.csv");
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->programs, first->programs);
  EXPECT_EQ(second->stage_to_actor, first->stage_to_actor);
  EXPECT_EQ(PrintPytorchCsv(*second), exported);
}

TEST(PytorchCsv, GeneratedSchedulesRoundTrip) {
  for (const std::string& name : GeneratorNames()) {
    absl::StatusOr<Schedule> schedule = Generate(name, {4, 8, 0});
    ASSERT_TRUE(schedule.ok());
    const std::string csv = PrintPytorchCsv(*schedule);
    absl::StatusOr<Schedule> back = ParsePytorchCsv(csv, "gen.csv");
    ASSERT_TRUE(back.ok()) << name << ": " << back.status();
    EXPECT_EQ(back->programs, schedule->programs) << name;
    EXPECT_EQ(back->stage_to_actor, schedule->stage_to_actor) << name;
  }
}

TEST(PytorchCsv, CommsFileImportsWithEveryTransferPaired) {
  PytorchCsvStats stats;
  absl::StatusOr<Schedule> schedule =
      ParsePytorchCsv(Fixture("zb1p_2rank_2stagep_comms.csv"), "comms.csv", &stats);
  ASSERT_TRUE(schedule.ok()) << schedule.status();
  EXPECT_EQ(stats.transfers_checked, 96);
  EXPECT_EQ(schedule->num_actors, 2);
  EXPECT_EQ(schedule->num_stages, 4);
  EXPECT_EQ(schedule->num_microbatches, 8);
  EXPECT_EQ(schedule->stage_to_actor, LoopPlacement(2, 4));
  EXPECT_EQ(schedule->NumTasks(), 80);  // BW is one full backward
  EXPECT_EQ(CountKind(*schedule, TaskKind::kBackward), 16);
  EXPECT_TRUE(Validate(*schedule).ok()) << Validate(*schedule);
}

TEST(PytorchCsv, CommsFileWithoutOneRecvIsRejectedNamingRankAndAction) {
  const std::string text = Replaced(Fixture("zb1p_2rank_2stagep_comms.csv"), ",1RECV_F2,", ",");
  absl::StatusOr<Schedule> schedule = ParsePytorchCsv(text, "comms.csv");
  EXPECT_EQ(schedule.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(schedule.status().message(),
              HasSubstr("rank 1, cell 18: missing 1RECV_F2 before 1F2 on rank 1"));
}

TEST(PytorchCsv, CommsFileWithAnExtraOrMisplacedSendIsRejected) {
  const std::string text = Fixture("zb1p_2rank_2stagep_comms.csv");
  const std::string duplicated = Replaced(text, "0F1,0SEND_F1", "0F1,0SEND_F1,0SEND_F1");
  EXPECT_THAT(ParsePytorchCsv(duplicated, "comms.csv").status().message(),
              HasSubstr("rank 0, cell 5: duplicate 0SEND_F1 (first at cell 4)"));
  const std::string early = Replaced(text, "0F1,0SEND_F1", "0SEND_F1,0F1");
  EXPECT_THAT(ParsePytorchCsv(early, "comms.csv").status().message(),
              HasSubstr("rank 0, cell 3: 0SEND_F1 comes before 0F1 (cell 4), which produces "
                        "what it sends"));
  const std::string last_stage = Replaced(text, "3F7,3B7", "3F7,3SEND_F7,3B7");
  EXPECT_THAT(ParsePytorchCsv(last_stage, "comms.csv").status().message(),
              HasSubstr("extra 3SEND_F7: no cross-rank dataflow edge leaves stage 3"));
}

TEST(PytorchCsv, StageOnTwoRanksIsRejected) {
  absl::StatusOr<Schedule> schedule = ParsePytorchCsv("0F0,1F0,1B0,0B0\n1F1\n", "bad.csv");
  EXPECT_THAT(schedule.status().message(),
              HasSubstr("bad.csv:2:1: error: rank 1, cell 0: stage 1 runs here on rank 1 but also "
                        "on rank 0 (line 1, cell 1): a stage belongs to one rank"));
}

// Found by fuzz_pytorch_csv: a rank of idle cells imported as an actor with
// no stage, which exporting wrote as an empty row that imports as no rank.
TEST(PytorchCsv, ARankWithoutComputeIsRejected) {
  EXPECT_THAT(ParsePytorchCsv("0F0,0B0\n,\n", "idle.csv").status().message(),
              HasSubstr("idle.csv:2: error: rank 1 has no compute action (every rank runs a stage)"));
}

TEST(PytorchCsv, MalformedAndUnsupportedActionsAreRejected) {
  EXPECT_THAT(ParsePytorchCsv("0F0,F1\n", "bad.csv").status().message(),
              HasSubstr("bad.csv:1:5: error: rank 0, cell 1: malformed action 'F1'"));
  EXPECT_THAT(ParsePytorchCsv("0F0,0UNSHARD0\n", "bad.csv").status().message(),
              HasSubstr("unsupported action type 'UNSHARD' in '0UNSHARD0'"));
  EXPECT_THAT(ParsePytorchCsv("(0F0;1B0)OVERLAP\n", "bad.csv").status().message(),
              HasSubstr("unsupported group '(0F0;1B0)OVERLAP': expected (a;b)OVERLAP_F_B"));
}

}  // namespace
}  // namespace tandem::schedules
