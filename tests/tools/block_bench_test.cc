// `tandem bench block`: one GPT block's forward and backward on a device;
// --profile prints the time of every op, and refuses the emulated GPU,
// whose kernels are the CPU's; --unfused is the GPU's alone.
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/tools/cli_process.h"

namespace tandem::cli {
namespace {

using ::testing::HasSubstr;

CliRun Bench(const std::vector<std::string>& args) {
  std::vector<std::string> command = {"bench", "block", "--dim", "32", "--heads", "2", "--seq", "8", "--batch", "2",
                                      "--repeats", "2", "--no-torch"};
  command.insert(command.end(), args.begin(), args.end());
  return RunCli(command);
}

TEST(BlockBench, TheProfileTimesEveryOpOnTheCpu) {
  CliRun run = Bench({"--profile"});
  ASSERT_EQ(run.code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("tandem (reference interpreter)"));
  EXPECT_THAT(run.out, HasSubstr("profile: mean over 2 runs"));
  EXPECT_THAT(run.out, HasSubstr("ms in kernels"));
  EXPECT_THAT(run.out, HasSubstr("matmul (F)"));
  EXPECT_THAT(run.out, HasSubstr("slowest nodes:"));
}

TEST(BlockBench, TheJsonSaysTheGoal) {
  CliRun run = Bench({"--json"});
  ASSERT_EQ(run.code, 0) << run.err;
  const nlohmann::json json = nlohmann::json::parse(run.out, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(json.is_object()) << run.out;
  EXPECT_EQ(json["device"], "cpu");
  EXPECT_EQ(json["goal_ratio"], 1.25);
  EXPECT_GT(json["tandem_ms"].get<double>(), 0.0);
  EXPECT_TRUE(json["torch_ms"].is_null());
  EXPECT_EQ(json["fused_elementwise"], true);
}

// --unfused turns a GPU's one kernel per run of elementwise nodes into one
// per node; the reference interpreter's runs are part of its kernels.
TEST(BlockBench, UnfusedIsRefusedOffTheGpu) {
  for (const char* device : {"cpu", "fake-cuda"}) {
    CliRun run = Bench({"--device", device, "--unfused"});
    EXPECT_EQ(run.code, 2) << device;
    EXPECT_THAT(run.err, HasSubstr("--unfused applies to --device cuda")) << device;
  }
}

TEST(BlockBench, TheEmulatedGpuHasNoProfileOfItsOwn) {
  CliRun run = Bench({"--device", "fake-cuda", "--profile"});
  EXPECT_EQ(run.code, 2);
  EXPECT_THAT(run.err, HasSubstr("--profile times the reference kernels (--device cpu) or the GPU's (cuda)"));
}

}  // namespace
}  // namespace tandem::cli
