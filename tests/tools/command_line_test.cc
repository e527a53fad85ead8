// The `tandem` command line as a whole: every command and subcommand has
// --help, usage errors are reported the same way everywhere, and integer
// options refuse values their type cannot hold instead of narrowing them.
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/tools/command_run.h"
#include "tools/cli/commands.h"

namespace tandem::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// The path of every command under `app`, e.g. {"sched", "gen"}.
void CollectCommands(const CLI::App& app, std::vector<std::string> path, std::vector<std::vector<std::string>>& all) {
  for (const CLI::App* sub : app.get_subcommands({})) {
    std::vector<std::string> sub_path = path;
    sub_path.push_back(sub->get_name());
    all.push_back(sub_path);
    CollectCommands(*sub, sub_path, all);
  }
}

std::vector<std::vector<std::string>> AllCommands() {
  std::ostringstream out, err;
  std::istringstream in;
  CommandLine command_line({out, err, in});
  AddAllCommands(command_line);
  std::vector<std::vector<std::string>> all;
  CollectCommands(command_line.root(), {}, all);
  return all;
}

TEST(CommandLine, EveryCommandAndBenchmarkHasHelp) {
  const std::vector<std::vector<std::string>> commands = AllCommands();
  // ir dump; sched gen/check/convert/sim/draw; compile; train; repl; and
  // bench with its six benchmarks.
  ASSERT_GE(commands.size(), 17u);
  for (std::vector<std::string> args : commands) {
    const std::string path = "tandem " + absl::StrJoin(args, " ");
    for (const char* flag : {"--help", "-h"}) {
      std::vector<std::string> with_flag = args;
      with_flag.push_back(flag);
      const CommandRun run = RunCommand(AddAllCommands, with_flag);
      EXPECT_EQ(run.code, 0) << path << " " << flag << ": " << run.err;
      EXPECT_THAT(run.out, StartsWith("usage: " + path + " ")) << flag;
      EXPECT_EQ(run.err, "") << path;
    }
  }
  const CommandRun top = RunCommand(AddAllCommands, {"--help"});
  EXPECT_EQ(top.code, 0);
  EXPECT_THAT(top.out, HasSubstr("usage: tandem <command>"));
}

TEST(CommandLine, NoCommandPrintsTheHelpAndFails) {
  const CommandRun run = RunCommand(AddAllCommands, {});
  EXPECT_EQ(run.code, 2);
  EXPECT_THAT(run.err, HasSubstr("usage: tandem <command>"));
}

TEST(CommandLine, UnknownCommandsAndOptionsAreUsageErrorsNamingThem) {
  CommandRun run = RunCommand(AddAllCommands, {"frobnicate"});
  EXPECT_EQ(run.code, 2);
  EXPECT_THAT(run.err, HasSubstr("tandem: unknown subcommand 'frobnicate'"));
  run = RunCommand(AddAllCommands, {"bench", "warp-drive"});
  EXPECT_EQ(run.code, 2);
  EXPECT_THAT(run.err, HasSubstr("tandem bench: unknown subcommand 'warp-drive'"));
  run = RunCommand(AddAllCommands, {"train", "--actor", "4"});
  EXPECT_EQ(run.code, 2);
  EXPECT_THAT(run.err, HasSubstr("tandem train: "));
  EXPECT_THAT(run.err, HasSubstr("--actor"));
  EXPECT_THAT(run.err, HasSubstr("Run `tandem train --help` for usage."));
}

TEST(CommandLine, IntegerOptionsAreNeverNarrowed) {
  // 2^32 + 2 once ran with 2 actors; 2^31 once read as -2^31.
  CommandRun run = RunCommand(AddAllCommands, {"train", "--actors", "4294967298"});
  EXPECT_EQ(run.code, 2);
  EXPECT_THAT(run.err, HasSubstr("--actors: Value 4294967298 is not an integer from 1 to 2147483647"));
  run = RunCommand(AddAllCommands, {"train", "--microbatches", "2147483648"});
  EXPECT_EQ(run.code, 2);
  EXPECT_THAT(run.err, HasSubstr("--microbatches: Value 2147483648 is not an integer from 1 to 2147483647"));
  run = RunCommand(AddAllCommands, {"compile", "--layers", "99999999999999999999"});
  EXPECT_EQ(run.code, 2);
  EXPECT_THAT(run.err, HasSubstr("--layers: Value 99999999999999999999 is not an integer from 1 to 9223372036854775807"));
  run = RunCommand(AddAllCommands, {"sched", "gen", "1f1b", "--actors", "0", "--microbatches", "2"});
  EXPECT_EQ(run.code, 2);
  EXPECT_THAT(run.err, HasSubstr("--actors: Value 0 is not an integer from 1 to"));
  run = RunCommand(AddAllCommands, {"train", "--steps", "ten"});
  EXPECT_EQ(run.code, 2);
  EXPECT_THAT(run.err, HasSubstr("--steps: Value ten is not an integer from 1 to"));
}

TEST(CommandLine, AnOptionGivenTwiceIsAUsageError) {
  const CommandRun run = RunCommand(AddAllCommands, {"train", "--actors", "2", "--actors", "4"});
  EXPECT_EQ(run.code, 2);
  EXPECT_THAT(run.err, HasSubstr("--actors"));
}

}  // namespace
}  // namespace tandem::cli
