// Issue 35's acceptance 1: `tandem train --model llama` with grouped-query
// attention (--kv-heads below --heads) on 4 actor processes is bit-identical
// to the single-process reference under every built-in schedule, in f32 and
// in bf16 mixed precision; and so is an LLM recipe's optimizer (AdamW,
// warmup, cosine decay, clipping by the global norm) on 2 x 2 data
// parallel. And bf16's saving shows in what `tandem compile` plans.
#include <cstdint>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "schedules/generators.h"
#include "tests/tools/cli_process.h"

namespace tandem::cli {
namespace {

using ::testing::HasSubstr;

// A test name part: "zb-v" -> "zb_v".
std::string NamePart(std::string text) {
  for (char& c : text) {
    if (c == '-') c = '_';
  }
  return text;
}

class TrainLlama : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(TrainLlama, WithGroupedQueryAttentionOnFourActorsIsBitIdenticalToTheReference) {
  const auto& [schedule, precision] = GetParam();
  // interleaved, zb-v and dualpipev place 2 stages per actor: 8 blocks.
  std::vector<std::string> args = {"--model", "llama", "--layers", "8", "--dim", "32", "--heads", "4", "--kv-heads",
                                   "2", "--seq", "16", "--batch", "2", "--actors", "4", "--schedule", schedule,
                                   "--microbatches", "8", "--steps", "2", "--verify", "--eval-batches", "0",
                                   "--precision", precision};
  if (schedule == "2bw") args.insert(args.end(), {"--update-every", "4"});
  std::string out, err;
  ASSERT_EQ(RunTrain(args, out, err), 0) << out << err;
  EXPECT_THAT(out, HasSubstr("llama: 8 layers, d=32, 4 heads (2 kv)"));
  if (precision == "bf16") {
    EXPECT_THAT(out, HasSubstr("bf16 mixed precision"));
  }
  EXPECT_THAT(out, HasSubstr("verify: losses of 2 steps and all"));
  EXPECT_THAT(out, HasSubstr("bit-identical to the reference"));
}

INSTANTIATE_TEST_SUITE_P(EveryBuiltInSchedule, TrainLlama,
                         ::testing::Combine(::testing::ValuesIn(schedules::GeneratorNames()),
                                            ::testing::Values("f32", "bf16")),
                         [](const ::testing::TestParamInfo<std::tuple<std::string, std::string>>& info) {
                           return NamePart(std::get<0>(info.param)) + "_" + std::get<1>(info.param);
                         });

class TrainLlamaRecipe : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(TrainLlamaRecipe, AdamWWarmupCosineAndClippingOnTwoByTwoDataParallelAreBitIdentical) {
  const auto& [schedule, precision] = GetParam();
  std::vector<std::string> args = {"--model", "llama", "--layers", "4", "--dim", "32", "--heads", "4", "--kv-heads",
                                   "2", "--seq", "16", "--batch", "2", "--actors", "2", "--data-parallel", "2",
                                   "--schedule", schedule, "--microbatches", "4", "--steps", "5",
                                   "--weight-decay", "0.1", "--warmup-steps", "2", "--lr-schedule", "cosine",
                                   "--clip-grad-norm", "0.5", "--verify", "--eval-batches", "0",
                                   "--precision", precision};
  std::string out, err;
  ASSERT_EQ(RunTrain(args, out, err), 0) << out << err;
  EXPECT_THAT(out, HasSubstr("verify: losses of 5 steps and all"));
  EXPECT_THAT(out, HasSubstr("bit-identical to the reference"));
}

INSTANTIATE_TEST_SUITE_P(Schedules, TrainLlamaRecipe,
                         ::testing::Combine(::testing::Values("1f1b", "interleaved", "zb-v"),
                                            ::testing::Values("f32", "bf16")),
                         [](const ::testing::TestParamInfo<std::tuple<std::string, std::string>>& info) {
                           return NamePart(std::get<0>(info.param)) + "_" + std::get<1>(info.param);
                         });

// One actor's row of `tandem compile`'s table: bytes sent and static peak.
struct ActorPlan {
  int64_t bytes_sent = 0;
  int64_t static_peak = 0;
};

std::vector<ActorPlan> CompiledPlan(const std::string& precision) {
  CliRun run = RunCli({"compile", "--model", "llama", "--layers", "4", "--dim", "64", "--seq", "32", "--actors",
                       "4", "--precision", precision});
  EXPECT_EQ(run.code, 0) << run.out << run.err;
  std::vector<ActorPlan> plan;
  std::istringstream lines(run.out.substr(run.out.find("static peak bytes")));
  std::string header;
  std::getline(lines, header);
  // The row's first seven columns; later ones (GFLOP/step) are not read.
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    int64_t actor, instructions, runs, sends, receives;
    ActorPlan row;
    if (!(fields >> actor >> instructions >> runs >> sends >> receives >> row.bytes_sent >> row.static_peak)) break;
    plan.push_back(row);
  }
  return plan;
}

// Every value crossing between stages is a bf16 activation or its bf16
// gradient, so bf16 sends exactly half the bytes; each actor's peak holds
// bf16 activations beside the same f32 state, so it is lower.
TEST(TrainLlamaBf16, HalvesTheBytesSentAndLowersEveryActorsStaticPeak) {
  const std::vector<ActorPlan> f32 = CompiledPlan("f32");
  const std::vector<ActorPlan> bf16 = CompiledPlan("bf16");
  ASSERT_EQ(f32.size(), 4u);
  ASSERT_EQ(bf16.size(), 4u);
  for (size_t actor = 0; actor < 4; ++actor) {
    EXPECT_EQ(2 * bf16[actor].bytes_sent, f32[actor].bytes_sent) << "actor " << actor;
    EXPECT_LT(bf16[actor].static_peak, f32[actor].static_peak) << "actor " << actor;
  }
}

TEST(TrainLlamaBf16, APrecisionOnAModelThatComputesInF32IsAnErrorThatSaysSo) {
  std::string out, err;
  EXPECT_NE(RunTrain({"--model", "mlp", "--steps", "1", "--precision", "bf16"}, out, err), 0);
  EXPECT_THAT(err, HasSubstr("precision bf16 applies to the gpt and llama models; mlp computes in f32"));
}

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
