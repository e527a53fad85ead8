// `tandem train --fill` as a user runs it: a fill job in the bubbles of a
// 1F1B pipeline on actor processes and on threads. The pipeline stays bit
// for bit the reference's and its twin's without fill, every fill output
// equals the fill job's reference, and the summary reports the work done,
// the step times side by side and the utilisation. Options that do not go
// with fill are usage errors.
#include <fstream>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/tools/cli_process.h"

namespace tandem::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;

class TrainFill : public ::testing::TestWithParam<std::string> {};

TEST_P(TrainFill, IsBitIdenticalAndReportsTheFillWork) {
  const std::string trace = ::testing::TempDir() + "train_fill_" + GetParam() + ".json";
  std::string out, err;
  const int code = RunTrain({"--model", "gpt", "--layers", "4", "--actors", "2", "--schedule", "1f1b",
                             "--microbatches", "8", "--steps", "4", "--fill", "infer:mlp,batch=64", "--verify",
                             "--eval-batches", "0", "--launcher", GetParam(), "--trace", trace},
                            out, err);
  ASSERT_EQ(code, 0) << out << err;
  EXPECT_THAT(out, HasSubstr("verify: losses of 4 steps and all"));
  EXPECT_THAT(out, HasSubstr("fill starts:"));
  EXPECT_THAT(out, MatchesRegex("(.|\n)*fill: [1-9][0-9]* pieces done in 2 steps(.|\n)*"));
  EXPECT_THAT(out, MatchesRegex("(.|\n)*fill: main step [0-9.]+ ms with fill, [0-9.]+ ms without(.|\n)*slowdown(.|\n)*"));
  EXPECT_THAT(out, MatchesRegex("(.|\n)*fill: utilisation \\(busy / wall\\) [0-9.]+% with fill(.|\n)*"));
  EXPECT_THAT(out, MatchesRegex("(.|\n)*verify: [1-9][0-9]* fill outputs bit-identical to the fill job's reference(.|\n)*"));
  // The measured trace draws the pieces on a "fill" track of their actor.
  std::ifstream file(trace);
  const nlohmann::json json = nlohmann::json::parse(file);
  int fill_slices = 0;
  bool named = false;
  for (const nlohmann::json& event : json["traceEvents"]) {
    if (event.value("cat", "") == "fill") ++fill_slices;
    if (event.value("ph", "") == "M" && event["args"].value("name", "") == "fill") named = true;
  }
  EXPECT_GT(fill_slices, 0);
  EXPECT_TRUE(named);
}

INSTANTIATE_TEST_SUITE_P(Launchers, TrainFill, ::testing::Values("local", "threads"));

// A training fill job: each filling actor's copy of the model learns, and
// --verify replays every actor's updates and checks the trained state.
TEST(TrainFillTraining, EachFillingActorTrainsACopyThatTheReferenceReproduces) {
  std::string out, err;
  const int code = RunTrain({"--model", "gpt", "--layers", "4", "--actors", "2", "--schedule", "1f1b",
                             "--microbatches", "8", "--steps", "6", "--fill", "train:mlp,batch=64,lr=0.01", "--verify",
                             "--eval-batches", "0"},
                            out, err);
  ASSERT_EQ(code, 0) << out << err;
  EXPECT_THAT(out, HasSubstr("verify: losses of 6 steps and all"));
  EXPECT_THAT(out, HasSubstr("mlp training (Adam, lr 0.01)"));
  EXPECT_THAT(out, MatchesRegex("(.|\n)*fill: actor [01] trained [1-9][0-9]* updates, loss [0-9.]+ -> [0-9.]+(.|\n)*"));
  EXPECT_THAT(out,
              MatchesRegex("(.|\n)*verify: [1-9][0-9]* fill outputs bit-identical to the fill job's reference(.|\n)*"));
  EXPECT_THAT(out, MatchesRegex("(.|\n)*verify: the fill job's final state, [1-9][0-9]* tensors on [12] actors, "
                                "bit-identical to its reference(.|\n)*"));
}

TEST(TrainFillOptions, WhatDoesNotGoWithFillIsAUsageError) {
  const struct {
    std::vector<std::string> args;
    std::string message;
  } cases[] = {
      {{"--fill", "infer:mlp", "--launcher", "reference"}, "--fill needs a pipeline"},
      {{"--fill", "infer:mlp", "--checkpoint-dir", ::testing::TempDir() + "fill_ck"}, "--fill does not go with checkpoints"},
      {{"--fill", "infer:mlp", "--data-parallel", "2"}, "--fill does not go with data-parallel replicas"},
      {{"--fill", "infer:mlp", "--max-restarts", "1"}, "--fill does not go with --max-restarts"},
      {{"--fill", "serve:mlp"}, "expected infer:MODEL or train:MODEL"},
      {{"--fill", "train:mlp,items=4"}, "items= is for infer:"},
      {{"--fill", "train:mlp,lr=2"}, "'lr=2' is not one of batch=N, layers=N, dim=N, items=N, lr=X (in (0, 1])"},
      {{"--fill", "infer:mlp,lr=0.1"}, "'lr=0.1' is not one of batch=N, layers=N, dim=N, items=N"},
      {{"--fill", "infer:gpt"}, "unknown model 'gpt'"},
      {{"--fill", "infer:mlp,rows=3"}, "'rows=3' is not one of batch=N"},
      {{"--fill", "infer:mlp,batch=0"}, "batch=0 is outside [1, 65536]"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> args = {"--model", "mlp", "--actors", "2", "--microbatches", "2", "--steps", "1"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    std::string out, err;
    EXPECT_EQ(RunTrain(args, out, err), 2) << c.message << "\n" << out << err;
    EXPECT_THAT(err, HasSubstr(c.message));
  }
}

}  // namespace
}  // namespace tandem::cli
