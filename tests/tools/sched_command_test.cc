#include <fstream>
#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "schedules/generators.h"
#include "schedules/text_format.h"
#include "tests/testing/test_data.h"
#include "tests/tools/command_run.h"
#include "tools/cli/commands.h"
#include "tools/cli/sched_commands.h"

namespace tandem::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

using Outcome = CommandRun;

// `tandem sched args...`, reading `stdin_text`.
Outcome Sched(std::vector<std::string> args, const std::string& stdin_text = "") {
  args.insert(args.begin(), "sched");
  return RunCommand(AddSchedCommand, args, stdin_text);
}

std::string WriteTemp(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

std::string Fixture(const std::string& name) {
  return ::tandem::test::TestDataPath("pytorch-pipelining/" + name);
}

TEST(SchedCommand, GenPrintsTheTextFormat) {
  const Outcome run = Sched({"gen", "1f1b", "--actors", "2", "--microbatches", "4"});
  EXPECT_EQ(run.code, 0) << run.err;
  absl::StatusOr<schedules::Schedule> expected = schedules::GenerateOneFOneB({2, 4, 0});
  ASSERT_TRUE(expected.ok());
  EXPECT_EQ(run.out, schedules::PrintScheduleText(*expected));
}

TEST(SchedCommand, GenPrintsAScheduleOverAStageGraph) {
  const Outcome run = Sched({"gen", "graph-1f1b", "--actors", "3", "--microbatches", "2", "--stage-graph", "0->2,1->2"});
  EXPECT_EQ(run.code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("stage-graph 0->2 1->2\nactor 0: F0.0 F0.1 B0.0 B0.1\n"));
  EXPECT_THAT(run.out, HasSubstr("actor 2: F2.0 B2.0 F2.1 B2.1\n"));
  const Outcome placed = Sched({"gen", "graph-gpipe", "--actors", "2", "--microbatches", "1", "--stage-graph",
                                "0->2 1->2", "--placement", "0,1,0"});
  EXPECT_EQ(placed.code, 0) << placed.err;
  EXPECT_THAT(placed.out, HasSubstr("placement loop\nstage-graph 0->2 1->2\nactor 0: F0.0 F2.0 B2.0 B0.0\n"));
  // The checker reads it back and names the graph.
  const Outcome check = Sched({"check", "-"}, run.out);
  EXPECT_EQ(check.code, 0) << check.err;
  EXPECT_THAT(check.out, HasSubstr("(placement loop, stage graph 0->2 1->2)"));
}

TEST(SchedCommand, GenRefusesAMalformedOrMisplacedStageGraph) {
  Outcome run = Sched({"gen", "graph-1f1b", "--actors", "3", "--microbatches", "2", "--stage-graph", "0=>2"});
  EXPECT_EQ(run.code, 2);
  EXPECT_THAT(run.err, HasSubstr("--stage-graph: '0=>2' is not a stage edge"));
  run = Sched({"gen", "graph-1f1b", "--actors", "3", "--microbatches", "2", "--stage-graph", "2->0"});
  EXPECT_EQ(run.code, 2);
  EXPECT_THAT(run.err, HasSubstr("stage edge 2->0 does not go from a lower stage to a higher one"));
  run = Sched({"gen", "1f1b", "--actors", "3", "--microbatches", "2", "--stage-graph", "0->2"});
  EXPECT_EQ(run.code, 2);
  EXPECT_THAT(run.err, HasSubstr("--stage-graph and --placement are for graph-gpipe and graph-1f1b"));
  run = Sched({"gen", "graph-1f1b", "--actors", "3", "--microbatches", "2", "--stage-graph", "0->2 1->2", "--to",
               "pytorch-csv"});
  EXPECT_EQ(run.code, 2);
  EXPECT_THAT(run.err, HasSubstr("PyTorch's pipelining CSV has no stage graph"));
}

TEST(SchedCommand, GenExplainsAViolatedConstraintAsAUsageError) {
  const Outcome run =
      Sched({"gen", "interleaved", "--actors", "4", "--microbatches", "6", "--virtual", "2"});
  EXPECT_EQ(run.code, 2);
  EXPECT_THAT(run.err, HasSubstr("multiple of actors (Megatron's order"));
  EXPECT_THAT(run.err, HasSubstr("got M=6, P=4"));
}

TEST(SchedCommand, GenNeedsItsOptions) {
  EXPECT_EQ(Sched({"gen", "1f1b", "--actors", "2"}).code, 2);
  EXPECT_THAT(Sched({"gen", "1f1b", "--actors", "2"}).err,
              HasSubstr("--microbatches is required"));
  EXPECT_EQ(Sched({"gen", "1f1b", "--actors", "two", "--microbatches", "2"}).code, 2);
  EXPECT_EQ(Sched({"gen", "--actors", "2", "--microbatches", "2"}).code, 2);
  EXPECT_EQ(Sched({"gen", "1f1b", "--actors", "2", "--microbatches", "2", "--bogus"}).code, 2);
}

TEST(SchedCommand, CheckAcceptsAValidFileWithASummary) {
  const std::string path = WriteTemp("ok.sched", Sched({"gen", "zb-v", "--actors", "2",
                                                        "--microbatches", "4"}).out);
  const Outcome run = Sched({"check", path});
  EXPECT_EQ(run.code, 0) << run.err;
  EXPECT_EQ(run.out, path + ": ok: zb-v, 2 actors, 4 stages (placement v), 4 microbatches, "
                            "48 tasks, no deadlock\n");
}

TEST(SchedCommand, CheckReportsSyntaxErrorsWithLineAndColumn) {
  const std::string path = WriteTemp("bad.sched", "actors 2\nmicrobatches 2\nactor 0: F0.0 Q\n");
  const Outcome run = Sched({"check", path});
  EXPECT_EQ(run.code, 1);
  EXPECT_THAT(run.err, StartsWith(path + ":3:15: error: unknown task 'Q'"));
}

TEST(SchedCommand, CheckPrintsTheDeadlockCycle) {
  const std::string path = WriteTemp("deadlock.sched",
                                     "actors 2\nmicrobatches 2\n"
                                     "actor 0: F0.0 B0.0 F0.1 B0.1\n"
                                     "actor 1: F1.0 F1.1 B1.0 B1.1\n");
  const Outcome run = Sched({"check", path});
  EXPECT_EQ(run.code, 1);
  EXPECT_EQ(run.err, path + ": error: deadlock: actor 0: B0.0 (slot 1) waits for actor 1: B1.0 "
                            "(slot 2) waits for actor 1: F1.1 (slot 1) waits for actor 0: F0.1 "
                            "(slot 2) waits for actor 0: B0.0 (slot 1)\n");
}

TEST(SchedCommand, CheckReportsEverySemanticProblemOnItsOwnLine) {
  const Outcome run = Sched({"check", "-"}, "actors 2\nmicrobatches 1\nactor 0: F0.0 F0.0\n");
  EXPECT_EQ(run.code, 1);
  EXPECT_THAT(run.err, HasSubstr("<stdin>: error: actor 0, slot 1: F0.0: duplicate task"));
  EXPECT_THAT(run.err, HasSubstr("\n<stdin>: error: missing task F1.0\n"));
}

TEST(SchedCommand, CheckRendezvousRejectsPlainOneFOneB) {
  const std::string text =
      Sched({"gen", "1f1b", "--actors", "2", "--microbatches", "2"}).out;
  EXPECT_EQ(Sched({"check", "-"}, text).code, 0);
  const Outcome run = Sched({"check", "-", "--rendezvous"}, text);
  EXPECT_EQ(run.code, 1);
  EXPECT_THAT(run.err, HasSubstr("deadlock: actor 0: send F0.1 -> F1.1 to actor 1"));
}

TEST(SchedCommand, CheckReadsCsvByExtensionOrByFlag) {
  const Outcome run = Sched({"check", Fixture("zb1p_2rank_2stagep_comms.csv")});
  EXPECT_EQ(run.code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("2 actors, 4 stages (placement loop), 8 microbatches, 80 tasks"));
  const std::string csv = "0F0,0B0\n";
  EXPECT_EQ(Sched({"check", "-", "--from", "pytorch-csv"}, csv).code, 0);
  EXPECT_EQ(Sched({"check", "-"}, csv).code, 1);  // Read as Tandem's format by default.
  EXPECT_EQ(Sched({"check", "-", "--from", "yaml"}, csv).code, 2);
}

TEST(SchedCommand, CheckMissingFileFails) {
  const Outcome run = Sched({"check", "/nonexistent/x.sched"});
  EXPECT_EQ(run.code, 1);
  EXPECT_THAT(run.err, HasSubstr("/nonexistent/x.sched: error: cannot open the file: No such file or directory"));
}

TEST(SchedCommand, ConvertsPytorchCsvToTandemAndBack) {
  const Outcome to_tandem = Sched({"convert", Fixture("dualpipev_4rank_10mb.csv"), "--to", "tandem"});
  ASSERT_EQ(to_tandem.code, 0) << to_tandem.err;
  EXPECT_THAT(to_tandem.out, HasSubstr("placement v\n"));
  const Outcome back = Sched({"convert", "-", "--to", "pytorch-csv"}, to_tandem.out);
  ASSERT_EQ(back.code, 0) << back.err;
  std::ifstream file(Fixture("dualpipev_4rank_10mb.csv"));
  std::stringstream original;
  original << file.rdbuf();
  EXPECT_EQ(back.out, original.str());
  EXPECT_EQ(Sched({"convert", "-"}, to_tandem.out).code, 2);  // --to is required
}

TEST(SchedCommand, HelpAndUnknownSubcommands) {
  const Outcome help = Sched({"--help"});
  EXPECT_EQ(help.code, 0);
  EXPECT_THAT(help.out, HasSubstr("usage: tandem sched"));
  const Outcome gen_help = Sched({"gen", "--help"});
  EXPECT_EQ(gen_help.code, 0);
  EXPECT_THAT(gen_help.out, HasSubstr("--microbatches"));
  EXPECT_EQ(Sched({}).code, 2);
  const Outcome unknown = Sched({"frobnicate"});
  EXPECT_EQ(unknown.code, 2);
  EXPECT_THAT(unknown.err, HasSubstr("unknown subcommand 'frobnicate'"));
}

TEST(SchedCommand, LoadScheduleReadsStdinAsTandemText) {
  std::istringstream in("actors 1\nmicrobatches 1\nactor 0: F0.0 B0.0\n");
  absl::StatusOr<schedules::Schedule> schedule = LoadSchedule("-", std::nullopt, in);
  ASSERT_TRUE(schedule.ok()) << schedule.status();
  EXPECT_EQ(schedule->NumTasks(), 2);
  std::istringstream bad("actors 1\nactor 0: F0.0\n");
  EXPECT_THAT(std::string(LoadSchedule("-", std::nullopt, bad).status().message()),
              StartsWith("<stdin>:2:1: error:"));
}

}  // namespace
}  // namespace tandem::cli
