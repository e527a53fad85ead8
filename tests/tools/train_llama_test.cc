// Issue 35's acceptance 1: `tandem train --model llama` with grouped-query
// attention (--kv-heads below --heads) on 4 actor processes is bit-identical
// to the single-process reference under every built-in schedule; and so is
// an LLM recipe's optimizer (AdamW, warmup, cosine decay, clipping by the
// global norm) on 2 x 2 data parallel.
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "schedules/generators.h"
#include "tests/tools/cli_process.h"

namespace tandem::cli {
namespace {

using ::testing::HasSubstr;

class TrainLlama : public ::testing::TestWithParam<std::string> {};

TEST_P(TrainLlama, WithGroupedQueryAttentionOnFourActorsIsBitIdenticalToTheReference) {
  const std::string& schedule = GetParam();
  // interleaved, zb-v and dualpipev place 2 stages per actor: 8 blocks.
  std::vector<std::string> args = {"--model", "llama", "--layers", "8", "--dim", "32", "--heads", "4", "--kv-heads",
                                   "2", "--seq", "16", "--batch", "2", "--actors", "4", "--schedule", schedule,
                                   "--microbatches", "8", "--steps", "2", "--verify", "--eval-batches", "0"};
  if (schedule == "2bw") args.insert(args.end(), {"--update-every", "4"});
  std::string out, err;
  ASSERT_EQ(RunTrain(args, out, err), 0) << out << err;
  EXPECT_THAT(out, HasSubstr("llama: 8 layers, d=32, 4 heads (2 kv)"));
  EXPECT_THAT(out, HasSubstr("verify: losses of 2 steps and all"));
  EXPECT_THAT(out, HasSubstr("bit-identical to the reference"));
}

INSTANTIATE_TEST_SUITE_P(EveryBuiltInSchedule, TrainLlama, ::testing::ValuesIn(schedules::GeneratorNames()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           for (char& c : name) {
                             if (c == '-') c = '_';
                           }
                           return name;
                         });

class TrainLlamaRecipe : public ::testing::TestWithParam<std::string> {};

TEST_P(TrainLlamaRecipe, AdamWWarmupCosineAndClippingOnTwoByTwoDataParallelAreBitIdentical) {
  std::vector<std::string> args = {"--model", "llama", "--layers", "4", "--dim", "32", "--heads", "4", "--kv-heads",
                                   "2", "--seq", "16", "--batch", "2", "--actors", "2", "--data-parallel", "2",
                                   "--schedule", GetParam(), "--microbatches", "4", "--steps", "5",
                                   "--weight-decay", "0.1", "--warmup-steps", "2", "--lr-schedule", "cosine",
                                   "--clip-grad-norm", "0.5", "--verify", "--eval-batches", "0"};
  std::string out, err;
  ASSERT_EQ(RunTrain(args, out, err), 0) << out << err;
  EXPECT_THAT(out, HasSubstr("verify: losses of 5 steps and all"));
  EXPECT_THAT(out, HasSubstr("bit-identical to the reference"));
}

INSTANTIATE_TEST_SUITE_P(Schedules, TrainLlamaRecipe, ::testing::Values("1f1b", "interleaved", "zb-v"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param == "zb-v" ? std::string("zb_v") : info.param;
                         });

TEST(TrainLlamaRecipe, ClippingAnAsynchronousScheduleIsAnErrorThatSaysWhy) {
  std::string out, err;
  EXPECT_NE(RunTrain({"--model", "llama", "--layers", "2", "--actors", "2", "--schedule", "pipedream",
                      "--microbatches", "4", "--steps", "1", "--clip-grad-norm", "1"},
                     out, err),
            0);
  EXPECT_THAT(err, HasSubstr("clipping by the global norm needs a synchronous step"));
}

}  // namespace
}  // namespace tandem::cli
