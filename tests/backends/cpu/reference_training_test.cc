// The reference interpreter as a trainer: deterministic, accumulating in
// microbatch order, learning; and the example models' text round trip.
#include <sys/resource.h>

#include <numeric>

#include "backends/cpu/interpreter.h"
#include "backends/cpu/kernels.h"
#include "examples/data/char_corpus.h"
#include "examples/data/synthetic.h"
#include "examples/models/gpt.h"
#include "examples/models/mlp.h"
#include "gtest/gtest.h"
#include "ir/host_tensor.h"
#include "ir/initial_state.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/trace.h"
#include "ir/verifier.h"
#include "tests/testing/memory_limit.h"

namespace tandem {
namespace {

examples::GptConfig SmallGpt() {
  examples::GptConfig config;
  config.vocab_size = 17;
  config.sequence_length = 8;
  config.model_dim = 16;
  config.num_heads = 2;
  config.num_layers = 2;
  config.batch_size = 2;
  config.num_stages = 2;
  return config;
}

std::vector<ir::TensorMap> TokenBatches(const examples::GptConfig& config, int count, int offset) {
  std::vector<ir::TensorMap> batches;
  for (int m = 0; m < count; ++m) {
    std::vector<int32_t> tokens(config.batch_size * config.sequence_length);
    std::vector<int32_t> labels(tokens.size());
    for (size_t i = 0; i < tokens.size(); ++i) {
      tokens[i] = static_cast<int32_t>((i * 5 + m + offset) % config.vocab_size);
      labels[i] = static_cast<int32_t>((i * 5 + m + offset + 1) % config.vocab_size);
    }
    batches.push_back({{"tokens", ir::HostTensor::FromInts({config.batch_size, config.sequence_length}, tokens)},
                       {"labels", ir::HostTensor::FromInts({config.batch_size, config.sequence_length}, labels)}});
  }
  return batches;
}

struct TrainingRun {
  ir::TensorMap state;
  std::vector<float> losses;
};

TrainingRun TrainGpt(int steps) {
  cpu::SetBlasThreads(1);
  examples::GptConfig config = SmallGpt();
  absl::StatusOr<ir::TrainStep> step =
      TraceTrainStep("gpt", examples::GptModel(config), Adam({}), {.num_microbatches = 2, .seed = 3});
  EXPECT_TRUE(step.ok()) << step.status();
  TrainingRun run{*ir::InitialState(*step), {}};
  for (int s = 1; s <= steps; ++s) {
    absl::StatusOr<cpu::StepResult> result = cpu::RunReferenceStep(*step, run.state, TokenBatches(config, 2, s), s);
    EXPECT_TRUE(result.ok()) << result.status();
    run.losses.insert(run.losses.end(), result->losses.begin(), result->losses.end());
  }
  return run;
}

TEST(ReferenceTraining, TwoRunsOfThreeStepsAreBitIdentical) {
  TrainingRun first = TrainGpt(3);
  TrainingRun second = TrainGpt(3);
  ASSERT_EQ(first.losses.size(), 6u);
  EXPECT_EQ(first.losses, second.losses);
  ASSERT_EQ(first.state.size(), second.state.size());
  for (const auto& [name, tensor] : first.state) {
    EXPECT_TRUE(tensor.BitwiseEquals(second.state.at(name))) << name;
  }
  // The parameters did move.
  absl::StatusOr<ir::TrainStep> step = TraceTrainStep("gpt", examples::GptModel(SmallGpt()), Adam({}),
                                                      {.num_microbatches = 2, .seed = 3});
  ASSERT_TRUE(step.ok());
  EXPECT_FALSE((*ir::InitialState(*step)).at("wte").BitwiseEquals(first.state.at("wte")));
}

// Minor page faults of this process so far.
int64_t MinorFaults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

// A computing process keeps freed storage (ir::SetStorageCacheBytes), the
// small tensors' in malloc's heaps: once warm, a step of a small model
// (the README's main job's shapes) faults in few fresh pages: 13 to 204 a
// step here, against 3,200 to 6,100 with glibc's own trimming.
TEST(ReferenceTraining, AWarmStepOfASmallModelFaultsInFewFreshPages) {
#ifdef TANDEM_TESTS_SANITIZED
  GTEST_SKIP() << "the sanitizers' allocators are not glibc's malloc";
#endif
  examples::GptConfig config;
  config.vocab_size = 86;
  config.sequence_length = 32;
  config.model_dim = 64;
  config.num_heads = 4;
  config.num_layers = 4;
  config.batch_size = 8;
  absl::StatusOr<ir::TrainStep> step =
      TraceTrainStep("gpt", examples::GptModel(config), Adam({}), {.num_microbatches = 8, .seed = 3});
  ASSERT_TRUE(step.ok()) << step.status();
  ir::TensorMap state = *ir::InitialState(*step);
  ir::SetStorageCacheBytes(ir::kComputeStorageCacheBytes);
  int64_t warm = 0;
  for (int s = 1; s <= 8; ++s) {
    const int64_t before = MinorFaults();
    absl::StatusOr<cpu::StepResult> result = cpu::RunReferenceStep(*step, state, TokenBatches(config, 8, s), s);
    ASSERT_TRUE(result.ok()) << result.status();
    if (s > 5) warm += MinorFaults() - before;
  }
  ir::SetStorageCacheBytes(0);
  EXPECT_LT(warm, 3 * 1000) << "pages faulted in by three warm steps";
}

TEST(ReferenceTraining, SameMicrobatchTwiceEqualsItOnceExactly) {
  // (g + g) / 2 == g in floating point, so averaging two copies of one
  // microbatch must reproduce the single-microbatch step bit for bit.
  examples::MlpConfig config;
  config.num_stages = 2;
  auto trace = [&](int32_t microbatches) {
    return *TraceTrainStep("mlp", examples::MlpModel(config), Sgd({.learning_rate = 0.1, .momentum = 0.9}),
                           {.num_microbatches = microbatches});
  };
  ir::TrainStep one = trace(1);
  ir::TrainStep two = trace(2);
  ir::TensorMap state_one = *ir::InitialState(one);
  ir::TensorMap state_two = *ir::InitialState(two);
  ir::TensorMap batch = examples::ClassificationBatch(config, 1, 0);
  for (int s = 1; s <= 2; ++s) {
    ASSERT_TRUE(cpu::RunReferenceStep(one, state_one, {batch}, s).ok());
    ASSERT_TRUE(cpu::RunReferenceStep(two, state_two, {batch, batch}, s).ok());
  }
  for (const auto& [name, tensor] : state_one) EXPECT_TRUE(tensor.BitwiseEquals(state_two.at(name))) << name;
}

TEST(ReferenceTraining, MlpLearnsTheTeacher) {
  examples::MlpConfig config;
  absl::StatusOr<ir::TrainStep> step =
      TraceTrainStep("mlp", examples::MlpModel(config), Adam({.learning_rate = 1e-2}), {.num_microbatches = 2});
  ASSERT_TRUE(step.ok()) << step.status();
  ir::TensorMap state = *ir::InitialState(*step);
  std::vector<ir::TensorMap> held_out = {examples::ClassificationBatch(config, 1, 1000),
                                         examples::ClassificationBatch(config, 1, 1001)};
  auto held_out_loss = [&] {
    std::vector<float> losses = *cpu::EvaluateLosses(*step, state, held_out);
    return (losses[0] + losses[1]) / 2;
  };
  float before = held_out_loss();
  for (int s = 1; s <= 60; ++s) {
    std::vector<ir::TensorMap> batch = {examples::ClassificationBatch(config, 1, 2 * s),
                                        examples::ClassificationBatch(config, 1, 2 * s + 1)};
    ASSERT_TRUE(cpu::RunReferenceStep(*step, state, batch, s).ok());
  }
  EXPECT_LT(held_out_loss(), 0.6f * before);
}

TEST(ReferenceTraining, WrongMicrobatchCountIsRejected) {
  examples::MlpConfig config;
  ir::TrainStep step = *TraceTrainStep("mlp", examples::MlpModel(config), Adam({}), {.num_microbatches = 2});
  ir::TensorMap state = *ir::InitialState(step);
  absl::StatusOr<cpu::StepResult> result =
      cpu::RunReferenceStep(step, state, {examples::ClassificationBatch(config, 1, 0)}, 1);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(result.status().message().find("traced for 2 microbatches, got 1"), absl::string_view::npos);
}

TEST(ReferenceTraining, OutOfRangeTokenNamesTheOp) {
  examples::GptConfig config = SmallGpt();
  ir::TrainStep step = *TraceTrainStep("gpt", examples::GptModel(config), Adam({}));
  ir::TensorMap state = *ir::InitialState(step);
  std::vector<ir::TensorMap> batch = TokenBatches(config, 1, 0);
  std::vector<int32_t> bad(config.batch_size * config.sequence_length, 99);
  batch[0]["tokens"] = ir::HostTensor::FromInts({config.batch_size, config.sequence_length}, bad);
  absl::StatusOr<cpu::StepResult> result = cpu::RunReferenceStep(step, state, batch, 1);
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.status().message().find("embedding at models/gpt.cc:"), absl::string_view::npos)
      << result.status();
  EXPECT_NE(result.status().message().find("id 99"), absl::string_view::npos) << result.status();
}

class ExampleTextRoundTrip : public ::testing::TestWithParam<std::string> {};

TEST_P(ExampleTextRoundTrip, PrintParsePrintIsIdentical) {
  absl::StatusOr<ir::TrainStep> step;
  if (GetParam() == "gpt") {
    examples::GptConfig config = SmallGpt();
    config.tied_head = true;
    step = TraceTrainStep("gpt", examples::GptModel(config), Adam({}), {.num_microbatches = 4});
  } else {
    examples::MlpConfig config;
    config.num_stages = 4;
    step = TraceTrainStep("mlp", examples::MlpModel(config), Sgd({.momentum = 0.9}), {.num_microbatches = 4});
  }
  ASSERT_TRUE(step.ok()) << step.status();
  std::string text = ir::PrintTrainStep(*step);
  absl::StatusOr<ir::TrainStep> parsed = ir::ParseTrainStep(text, "model.tir");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(ir::PrintTrainStep(*parsed), text);
  EXPECT_TRUE(*parsed == *step);
  EXPECT_TRUE(ir::VerifyTrainStep(*parsed).ok());
}

INSTANTIATE_TEST_SUITE_P(Models, ExampleTextRoundTrip, ::testing::Values("gpt", "mlp"));

}  // namespace
}  // namespace tandem
