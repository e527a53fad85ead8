// `tandem bench fidelity`: the measured step time of a pipelined MLP beside
// the simulator's prediction from costs calibrated on the same steps (task
// costs, the link's latency), per schedule, and the span of the step's
// instructions, which the prediction models and the measured step contains.
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/tools/cli_process.h"

namespace tandem::cli {
namespace {

using ::testing::HasSubstr;

CliRun Fidelity(const std::vector<std::string>& args) {
  std::vector<std::string> command = {"bench", "fidelity", "--width", "16", "--batch", "2",
                                      "--microbatches", "4", "--steps", "2"};
  command.insert(command.end(), args.begin(), args.end());
  return RunCli(command);
}

TEST(FidelityBench, EachScheduleIsMeasuredBesideItsPredictionAndTheSpanOfItsInstructions) {
  CliRun run = Fidelity({"--schedules", "gpipe,1f1b", "--json"});
  ASSERT_EQ(run.code, 0) << run.err;
  const nlohmann::json json = nlohmann::json::parse(run.out, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(json.is_object()) << run.out;
  EXPECT_EQ(json["actors"], 2);
  EXPECT_EQ(json["microbatches"], 4);
  ASSERT_EQ(json["rows"].size(), 2u) << run.out;
  EXPECT_EQ(json["rows"][0]["schedule"], "gpipe");
  EXPECT_EQ(json["rows"][1]["schedule"], "1f1b");
  for (const nlohmann::json& row : json["rows"]) {
    const double measured = row["measured_ms"].get<double>(), span = row["span_ms"].get<double>();
    const double predicted = row["predicted_ms"].get<double>();
    EXPECT_GT(span, 0.0) << row;
    // The step's wall time holds its instructions' span (by the same clock).
    EXPECT_LE(span, measured * 1.001 + 0.01) << row;
    EXPECT_GT(row["simulated_ms"].get<double>(), 0.0) << row;
    EXPECT_GE(row["update_ms"].get<double>(), 0.0) << row;
    EXPECT_DOUBLE_EQ(predicted, row["simulated_ms"].get<double>() + row["update_ms"].get<double>()) << row;
    EXPECT_DOUBLE_EQ(row["ratio"].get<double>(), measured / predicted) << row;
  }
}

TEST(FidelityBench, TheTableNamesItsColumnsAndTheGoal) {
  CliRun run = Fidelity({"--schedules", "1f1b"});
  ASSERT_EQ(run.code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("measured ms   span ms   predicted ms"));
  EXPECT_THAT(run.out, HasSubstr("goal: measured/predicted <= 1.05"));
}

TEST(FidelityBench, AnUnknownScheduleIsAnErrorNamingIt) {
  CliRun run = Fidelity({"--schedules", "1f1b,sideways"});
  EXPECT_NE(run.code, 0);
  EXPECT_THAT(run.err, HasSubstr("sideways"));
}

}  // namespace
}  // namespace tandem::cli
