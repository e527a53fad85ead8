#include "tools/cli/arguments.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::cli {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

Arguments MakeArguments() {
  Arguments arguments;
  arguments.AddOption("actors", "number of actors");
  arguments.AddOption("schedule", "schedule name", "1f1b");
  arguments.AddFlag("json", "print JSON");
  return arguments;
}

TEST(Arguments, SplitsOptionsFlagsAndPositionals) {
  Arguments arguments = MakeArguments();
  ASSERT_TRUE(arguments.Parse({"file.sched", "--actors", "4", "--json", "-"}).ok());
  EXPECT_EQ(arguments.GetInt("actors").value(), 4);
  EXPECT_TRUE(arguments.Flag("json"));
  EXPECT_EQ(arguments.Get("schedule").value(), "1f1b");
  EXPECT_THAT(arguments.positionals(), ElementsAre("file.sched", "-"));
}

TEST(Arguments, AcceptsInlineValues) {
  Arguments arguments = MakeArguments();
  ASSERT_TRUE(arguments.Parse({"--schedule=zb-h1"}).ok());
  EXPECT_EQ(arguments.Get("schedule").value(), "zb-h1");
}

TEST(Arguments, RejectsUnknownOptionByName) {
  Arguments arguments = MakeArguments();
  absl::Status status = arguments.Parse({"--actor", "4"});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("--actor"));
}

TEST(Arguments, RejectsMissingValueAndRepeats) {
  Arguments missing = MakeArguments();
  EXPECT_THAT(missing.Parse({"--actors"}).message(), HasSubstr("needs a value"));
  Arguments repeated = MakeArguments();
  EXPECT_THAT(repeated.Parse({"--json", "--json"}).message(), HasSubstr("given twice"));
}

TEST(Arguments, RejectsNonIntegerAndMissingRequired) {
  Arguments arguments = MakeArguments();
  ASSERT_TRUE(arguments.Parse({"--actors", "four"}).ok());
  EXPECT_THAT(arguments.GetInt("actors").status().message(), HasSubstr("'four'"));
  Arguments empty = MakeArguments();
  ASSERT_TRUE(empty.Parse({}).ok());
  EXPECT_THAT(empty.GetInt("actors").status().message(), HasSubstr("missing required option --actors"));
}

}  // namespace
}  // namespace tandem::cli
