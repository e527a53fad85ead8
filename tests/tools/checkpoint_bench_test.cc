// `tandem bench checkpoint`: both kinds of checkpoint are taken in turn and
// costed, the checkpoints it wrote are real ones (a --dir it is given keeps
// them, complete), and a temporary directory goes with it.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/tools/cli_process.h"

namespace tandem::cli {
namespace {

TEST(CheckpointBench, TakesBothKindsInTurnAndCostsEach) {
  const std::string dir = ::testing::TempDir() + "/tandem-checkpoint-bench-" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  CliRun run = RunCli({"bench", "checkpoint", "--model", "gpt", "--dim", "32", "--layers", "2", "--actors", "2",
                       "--microbatches", "2", "--checkpoints", "2", "--gap", "3", "--every", "10", "--dir", dir,
                       "--json"});
  ASSERT_EQ(run.code, 0) << run.err;
  const nlohmann::json json = nlohmann::json::parse(run.out.substr(run.out.find('{')));
  ASSERT_EQ(json["checkpoints"].size(), 4u);
  EXPECT_FALSE(std::filesystem::exists(dir + "/.step-00000004.partial"));
  for (size_t i = 0; i < 4; ++i) {
    const nlohmann::json& checkpoint = json["checkpoints"][i];
    EXPECT_EQ(checkpoint["kind"], i % 2 == 0 ? "waited" : "behind") << i;
    EXPECT_EQ(checkpoint["after_step"], 1 + 3 * static_cast<int>(i)) << i;  // a warm-up step, then 3 apart
    EXPECT_GT(checkpoint["take_ms"].get<double>(), 0) << i;
    const double total = checkpoint["take_ms"].get<double>() + checkpoint["steps_extra_ms"].get<double>() +
                         checkpoint["finish_ms"].get<double>();
    EXPECT_DOUBLE_EQ(checkpoint["total_ms"].get<double>(), total) << i;
    if (i % 2 == 0) {
      EXPECT_EQ(checkpoint["steps_covered"], 0) << i;
    }
    // Each is a complete checkpoint of its step.
    char name[32];
    std::snprintf(name, sizeof(name), "step-%08d", checkpoint["after_step"].get<int>());
    EXPECT_TRUE(std::filesystem::exists(dir + "/" + name + "/MANIFEST")) << name;
  }
  EXPECT_GT(json["median_step_ms"].get<double>(), 0);
  // 13 steps: clean are all but the warm-up and those a checkpoint behind
  // the steps covered (1 to 3 each, as long as its write took).
  int covered = 0;
  for (const nlohmann::json& checkpoint : json["checkpoints"]) covered += checkpoint["steps_covered"].get<int>();
  EXPECT_GE(covered, 2);
  EXPECT_EQ(json["clean_steps"], 12 - covered);
  std::filesystem::remove_all(dir);
}

TEST(CheckpointBench, ATooSmallGapIsAUsageError) {
  CliRun run = RunCli({"bench", "checkpoint", "--model", "mlp", "--actors", "2", "--gap", "1"});
  EXPECT_EQ(run.code, 2);
  EXPECT_THAT(run.err, ::testing::HasSubstr("--gap"));
}

}  // namespace
}  // namespace tandem::cli
