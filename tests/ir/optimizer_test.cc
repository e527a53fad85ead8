// What an LLM recipe's optimizer does, traced into the update: the learning
// rate's warmup and decay computed from the step number, AdamW's decoupled
// weight decay with its exclusions, clipping by the global norm across
// stages, each against its formula; the stages' gradient norms every step
// reports, and skipping a step whose gradients are not finite.
#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>
#include <vector>

#include "backends/cpu/interpreter.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/graph_builder.h"
#include "ir/initial_state.h"
#include "ir/optimizers.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/trace.h"

namespace tandem {
namespace {

using ::testing::HasSubstr;

// The traced rate at step t (1-based), run by the reference interpreter.
float RateAt(double peak, const LearningRateSchedule& schedule, int64_t t) {
  ir::Graph graph("rate");
  ir::GraphBuilder builder(&graph);
  Tensor step(&builder, builder.AddInput("step", ir::InputRole::kStep, {ir::DType::kF32, {}}, {}));
  graph.AddOutput("rate", ScheduledLearningRate(step, peak, schedule).id());
  absl::StatusOr<ir::TensorMap> out = cpu::RunGraph(graph, {{"step", ir::HostTensor::Scalar(static_cast<float>(t))}});
  EXPECT_TRUE(out.ok()) << out.status();
  return out->at("rate").f32()[0];
}

TEST(LearningRateSchedule, WarmsUpLinearlyThenDecaysToTheFloorAndHoldsIt) {
  using Decay = LearningRateSchedule::Decay;
  const double peak = 3e-3, floor = 3e-4;
  for (Decay decay : {Decay::kLinear, Decay::kCosine}) {
    const LearningRateSchedule schedule{.decay = decay, .warmup_steps = 4, .decay_steps = 20, .min_lr = floor};
    for (int64_t t = 1; t <= 25; ++t) {
      double expected = peak;
      if (t < 4) {
        expected = peak * static_cast<double>(t) / 4.0;
      } else {
        const double p = std::min(1.0, static_cast<double>(t - 4) / 16.0);
        expected = decay == Decay::kLinear ? peak - (peak - floor) * p
                                           : floor + (peak - floor) * 0.5 * (1.0 + std::cos(std::numbers::pi * p));
      }
      EXPECT_NEAR(RateAt(peak, schedule, t), expected, 1e-6 * peak) << "step " << t;
    }
    EXPECT_EQ(RateAt(peak, schedule, 20), RateAt(peak, schedule, 1000)) << "the floor holds";
  }
  // Warmup alone: linear to the peak, then the peak exactly.
  const LearningRateSchedule warmup{.warmup_steps = 10};
  EXPECT_NEAR(RateAt(peak, warmup, 5), peak / 2, 1e-9);
  EXPECT_EQ(RateAt(peak, warmup, 10), static_cast<float>(peak));
  EXPECT_EQ(RateAt(peak, warmup, 11), static_cast<float>(peak));
}

// A model of three parameters: a matrix, a vector (never decays) and an
// embedding-like matrix named in no_decay.
Tensor ThreeParameters(Tracer& t) {
  Tensor w = t.Parameter("w", {3, 4}, init::Normal(1.0));
  Tensor b = t.Parameter("b", {4}, init::Normal(1.0));
  Tensor e = t.Parameter("embed", {2, 4}, init::Normal(1.0));
  Tensor x = t.Input("x", {ir::DType::kF32, {2, 3}});
  return sum((matmul(x, w) + b + e) * 0.0);  // every gradient is exactly 0
}

TEST(AdamW, DecaysMatricesByLrTimesDecayButNeverVectorsOrExcludedNames) {
  AdamOptions options{.learning_rate = 0.1, .weight_decay = 0.5, .no_decay = {"embed"}};
  absl::StatusOr<ir::TrainStep> step = TraceTrainStep("adamw", ThreeParameters, Adam(options));
  ASSERT_TRUE(step.ok()) << step.status();
  ir::TensorMap state = *ir::InitialState(*step);
  const ir::TensorMap before = state;
  ir::TensorMap batch = {{"x", ir::HostTensor::FromFloats({2, 3}, {1, 2, 3, 4, 5, 6})}};
  ASSERT_TRUE(cpu::RunReferenceStep(*step, state, {batch}, 1).ok());
  // A zero gradient moves nothing in Adam: only the decay acts.
  for (int i = 0; i < 12; ++i) EXPECT_EQ(state.at("w").f32()[i], before.at("w").f32()[i] * (1.0f - 0.1f * 0.5f));
  EXPECT_TRUE(state.at("b").BitwiseEquals(before.at("b")));
  EXPECT_TRUE(state.at("embed").BitwiseEquals(before.at("embed")));
}

// Two stages, each with a parameter, trained by SGD at lr 1 so that the
// update is exactly p - clipped gradient.
Tensor TwoStages(Tracer& t) {
  Tensor x = t.Input("x", {ir::DType::kF32, {2, 3}});
  Tensor h = matmul(x, t.Parameter("a", {3, 3}, init::Normal(1.0)));
  h = pipeline_yield(tanh(h));
  return sum(matmul(h, t.Parameter("c", {3, 2}, init::Normal(1.0))) * 5.0);
}

TEST(ClipGradNorm, ScalesEveryStagesGradientByTheGlobalNormOnce) {
  const ir::TensorMap batch = {{"x", ir::HostTensor::FromFloats({2, 3}, {0.5f, -1, 2, 1.5f, 0.25f, -2})}};
  absl::StatusOr<ir::TrainStep> plain = TraceTrainStep("plain", TwoStages, Sgd({.learning_rate = 1.0}));
  ASSERT_TRUE(plain.ok()) << plain.status();
  const ir::TensorMap initial = *ir::InitialState(*plain);
  ir::TensorMap unclipped = initial;
  ASSERT_TRUE(cpu::RunReferenceStep(*plain, unclipped, {batch}, 1).ok());
  double squares = 0;
  for (const std::string name : {"a", "c"}) {
    for (int64_t i = 0; i < initial.at(name).num_elements(); ++i) {
      const double g = initial.at(name).f32()[i] - unclipped.at(name).f32()[i];
      squares += g * g;
    }
  }
  const double max_norm = 0.5;
  ASSERT_GT(std::sqrt(squares), 10 * max_norm) << "the test needs a gradient that clipping shrinks";
  const double coefficient = max_norm / (std::sqrt(squares) + 1e-6);

  absl::StatusOr<ir::TrainStep> clipped_step =
      TraceTrainStep("clipped", TwoStages, Sgd({.learning_rate = 1.0}), {.clip_grad_norm = max_norm});
  ASSERT_TRUE(clipped_step.ok()) << clipped_step.status();
  ASSERT_TRUE(clipped_step->computes_gradient_norm());
  EXPECT_EQ(clipped_step->norm.outputs().size(), 2u) << "one partial per stage";
  ir::TensorMap clipped = initial;
  ASSERT_TRUE(cpu::RunReferenceStep(*clipped_step, clipped, {batch}, 1).ok());
  for (const std::string name : {"a", "c"}) {
    for (int64_t i = 0; i < initial.at(name).num_elements(); ++i) {
      const double g = initial.at(name).f32()[i] - unclipped.at(name).f32()[i];
      EXPECT_NEAR(initial.at(name).f32()[i] - clipped.at(name).f32()[i], g * coefficient, 1e-5) << name << i;
    }
  }
  // The text form keeps the norm graph.
  absl::StatusOr<ir::TrainStep> parsed = ir::ParseTrainStep(ir::PrintTrainStep(*clipped_step));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(*parsed, *clipped_step);
}

TEST(ClipGradNorm, NeedsASynchronousStepAndANormAboveZero) {
  absl::StatusOr<ir::TrainStep> async =
      TraceTrainStep("async", TwoStages, Sgd({}),
                     {.num_microbatches = 2, .updates = {WeightUpdates::Mode::kPipeDream, 1}, .clip_grad_norm = 1.0});
  EXPECT_THAT(async.status().message(), HasSubstr("clipping by the global norm needs a synchronous step"));
  absl::StatusOr<ir::TrainStep> negative = TraceTrainStep("negative", TwoStages, Sgd({}), {.clip_grad_norm = -1.0});
  EXPECT_THAT(negative.status().message(), HasSubstr("clip_grad_norm -1 must be a finite number above 0"));
}

// Every synchronous step reports each stage's sum of squared gradients,
// whether or not it clips: what lets a runner name the stage whose
// gradient is not finite.
TEST(GradientNorm, EverySynchronousStepReportsEachStagesSumOfSquares) {
  const ir::TensorMap batch = {{"x", ir::HostTensor::FromFloats({2, 3}, {0.5f, -1, 2, 1.5f, 0.25f, -2})}};
  absl::StatusOr<ir::TrainStep> step = TraceTrainStep("plain", TwoStages, Sgd({.learning_rate = 1.0}));
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_TRUE(step->computes_gradient_norm());
  EXPECT_FALSE(step->update_reads_gradient_norm()) << "no clipping, no skipping: the update ignores the norm";
  const ir::TensorMap initial = *ir::InitialState(*step);
  ir::TensorMap state = initial;
  absl::StatusOr<cpu::StepResult> result = cpu::RunReferenceStep(*step, state, {batch}, 1);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->gradient_squares.size(), 2u);
  // SGD at lr 1: the gradient is what the step took off.
  for (const auto& [stage, name] : std::vector<std::pair<int32_t, std::string>>{{0, "a"}, {1, "c"}}) {
    double squares = 0;
    for (int64_t i = 0; i < initial.at(name).num_elements(); ++i) {
      const double g = initial.at(name).f32()[i] - state.at(name).f32()[i];
      squares += g * g;
    }
    EXPECT_NEAR(result->gradient_squares.at(stage), squares, 1e-4 * squares) << name;
  }
  // An infinity in the data reaches stage 0's gradient only (tanh(inf) is
  // 1): the report says which stage.
  ir::TensorMap bad = {{"x", ir::HostTensor::FromFloats({2, 3}, {0.5f, -1, 2, 1.5f, INFINITY, -2})}};
  state = initial;
  result = cpu::RunReferenceStep(*step, state, {bad}, 1);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_FALSE(std::isfinite(result->gradient_squares.at(0)));
  EXPECT_TRUE(std::isfinite(result->gradient_squares.at(1)));
  // Asynchronous steps have no global norm to report.
  absl::StatusOr<ir::TrainStep> async = TraceTrainStep(
      "async", TwoStages, Sgd({}), {.num_microbatches = 2, .updates = {WeightUpdates::Mode::kPipeDream, 1}});
  ASSERT_TRUE(async.ok()) << async.status();
  EXPECT_FALSE(async->computes_gradient_norm());
}

// --on-nonfinite skip: a step whose gradients hold an infinity leaves every
// parameter and Adam slot as it was (on every stage, not only the one whose
// gradient is not finite), and a finite step is the same bits as without it.
TEST(SkipNonFinite, AStepWhoseGradientIsNotFiniteLeavesEveryWeightAndSlotAsItWas) {
  absl::StatusOr<ir::TrainStep> plain = TraceTrainStep("plain", TwoStages, Adam({.learning_rate = 0.1}));
  absl::StatusOr<ir::TrainStep> skipping =
      TraceTrainStep("skipping", TwoStages, Adam({.learning_rate = 0.1}), {.skip_nonfinite_updates = true});
  ASSERT_TRUE(plain.ok()) << plain.status();
  ASSERT_TRUE(skipping.ok()) << skipping.status();
  EXPECT_TRUE(skipping->update_reads_gradient_norm());
  const ir::TensorMap good = {{"x", ir::HostTensor::FromFloats({2, 3}, {0.5f, -1, 2, 1.5f, 0.25f, -2})}};
  const ir::TensorMap bad = {{"x", ir::HostTensor::FromFloats({2, 3}, {0.5f, -1, 2, 1.5f, INFINITY, -2})}};

  ir::TensorMap expected = *ir::InitialState(*plain);
  ASSERT_TRUE(cpu::RunReferenceStep(*plain, expected, {good}, 1).ok());
  ir::TensorMap state = *ir::InitialState(*skipping);
  ASSERT_EQ(state.size(), expected.size()) << "the same parameters and slots";
  ASSERT_TRUE(cpu::RunReferenceStep(*skipping, state, {good}, 1).ok());
  for (const auto& [name, tensor] : expected) EXPECT_TRUE(state.at(name).BitwiseEquals(tensor)) << name;

  const ir::TensorMap before = state;
  absl::StatusOr<cpu::StepResult> skipped = cpu::RunReferenceStep(*skipping, state, {bad}, 2);
  ASSERT_TRUE(skipped.ok()) << skipped.status();
  EXPECT_FALSE(std::isfinite(skipped->gradient_squares.at(0)));
  for (const auto& [name, tensor] : before) EXPECT_TRUE(state.at(name).BitwiseEquals(tensor)) << name;
  // Without skipping the same step poisons the weights.
  ASSERT_TRUE(cpu::RunReferenceStep(*plain, expected, {bad}, 2).ok());
  const ir::HostTensor& poisoned = expected.at("a");
  EXPECT_FALSE(std::all_of(poisoned.f32(), poisoned.f32() + poisoned.num_elements(),
                           [](float value) { return std::isfinite(value); }));

  // The text form keeps the gate.
  absl::StatusOr<ir::TrainStep> parsed = ir::ParseTrainStep(ir::PrintTrainStep(*skipping));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(*parsed, *skipping);
}

TEST(SkipNonFinite, NeedsASynchronousStep) {
  absl::StatusOr<ir::TrainStep> async = TraceTrainStep(
      "async", TwoStages, Sgd({}),
      {.num_microbatches = 2, .updates = {WeightUpdates::Mode::kPipeDream, 1}, .skip_nonfinite_updates = true});
  EXPECT_THAT(async.status().message(), HasSubstr("skipping non-finite updates needs a synchronous step"));
}

}  // namespace
}  // namespace tandem
