// `tandem profile` as a user runs it: a cost file with one segment per
// block that the planner's reader accepts, and its usage errors.
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/stage_graph.h"
#include "schedules/cost_file.h"
#include "tests/tools/cli_process.h"

namespace tandem::cli {
namespace {

using ::testing::HasSubstr;

TEST(ProfileCommand, CutEveryLayerWritesACostFileWithASegmentPerBlock) {
  char dir_template[] = "/tmp/tandem-profile-XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::string path = absl::StrCat(dir_template, "/gpt.json");
  CliProcess profile({"profile", "--model", "gpt", "--layers", "3", "--cut-every-layer", "--microbatches", "2",
                      "--steps", "1", "--out", path});
  ASSERT_EQ(ExitCode(profile, absl::Seconds(120)), 0) << profile.out() << profile.err();
  EXPECT_THAT(profile.out(), HasSubstr("3 segments on cpu"));
  EXPECT_THAT(profile.out(), HasSubstr("wrote " + path));
  absl::StatusOr<schedules::CostFile> costs = schedules::ParseCostFile(ReadFile(path));
  ASSERT_TRUE(costs.ok()) << costs.status();
  EXPECT_EQ(costs->segments.size(), 3u);
  EXPECT_EQ(costs->device, "cpu");
  EXPECT_THAT(costs->model, HasSubstr("gpt: 3 layers"));
  std::filesystem::remove_all(dir_template);
}

TEST(ProfileCommand, ATwoTowersSegmentsCarryItsBranchesAsTheSegmentGraph) {
  char dir_template[] = "/tmp/tandem-profile-XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::string path = absl::StrCat(dir_template, "/two_tower.json");
  CliProcess profile({"profile", "--model", "two-tower", "--towers", "2,1", "--layers", "2", "--dim", "16",
                      "--cut-every-layer", "--microbatches", "2", "--steps", "1", "--out", path});
  ASSERT_EQ(ExitCode(profile, absl::Seconds(120)), 0) << profile.out() << profile.err();
  EXPECT_THAT(profile.out(), HasSubstr("5 segments on cpu"));
  absl::StatusOr<schedules::CostFile> costs = schedules::ParseCostFile(ReadFile(path));
  ASSERT_TRUE(costs.ok()) << costs.status();
  // Left tower 0 -> 1, right tower 2, both into the head 3 -> 4.
  EXPECT_EQ(ir::FormatStageEdges(costs->segment_edges), "0->1 1->3 2->3 3->4");
  std::filesystem::remove_all(dir_template);
}

TEST(ProfileCommand, AnUnwritableOutputIsAnErrorNamingIt) {
  CliProcess profile({"profile", "--model", "mlp", "--steps", "1", "--out", "/nonexistent-dir/costs.json"});
  EXPECT_EQ(ExitCode(profile, absl::Seconds(120)), 1);
  EXPECT_THAT(profile.err(), HasSubstr("cannot write /nonexistent-dir/costs.json"));
}

}  // namespace
}  // namespace tandem::cli
