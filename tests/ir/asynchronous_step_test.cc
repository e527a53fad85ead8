// The meaning of an asynchronous step (PipeDream, 2BW; ir/train_step.h):
// which weight version each microbatch computes on, how often the weights
// move, and that none of it depends on how many updates one step holds.
#include <vector>

#include "backends/cpu/interpreter.h"
#include "backends/cpu/kernels.h"
#include "examples/data/synthetic.h"
#include "examples/models/mlp.h"
#include "gtest/gtest.h"
#include "ir/initial_state.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/trace.h"
#include "ir/verifier.h"

namespace tandem {
namespace {

using Mode = WeightUpdates::Mode;

examples::MlpConfig SmallMlp(int32_t stages) {
  examples::MlpConfig config;
  config.input_dim = 8;
  config.hidden_dim = 12;
  config.num_layers = 3;
  config.num_classes = 4;
  config.batch_size = 4;
  config.num_stages = stages;
  return config;
}

ir::TrainStep Trace(int32_t stages, int32_t microbatches, WeightUpdates updates, const Optimizer& optimizer) {
  absl::StatusOr<ir::TrainStep> step = TraceTrainStep(
      "mlp", examples::MlpModel(SmallMlp(stages)), optimizer,
      {.num_microbatches = microbatches, .seed = 5, .updates = updates});
  EXPECT_TRUE(step.ok()) << step.status();
  return *std::move(step);
}

// Microbatches [first, first + count) of one data stream; all the same
// batch when `same`.
std::vector<ir::TensorMap> Batches(int32_t stages, int64_t first, int64_t count, bool same = false) {
  std::vector<ir::TensorMap> batches;
  for (int64_t m = first; m < first + count; ++m) {
    batches.push_back(examples::ClassificationBatch(SmallMlp(stages), 9, same ? 0 : static_cast<uint64_t>(m)));
  }
  return batches;
}

struct Trained {
  ir::TensorMap state;
  std::vector<float> losses;
};

// `steps` steps of `step` over consecutive microbatches of one stream.
Trained Train(const ir::TrainStep& step, int32_t steps, bool same_data = false) {
  cpu::SetBlasThreads(1);
  Trained run{*ir::InitialState(step), {}};
  for (int32_t s = 0; s < steps; ++s) {
    absl::StatusOr<cpu::StepResult> result = cpu::RunReferenceStep(
        step, run.state, Batches(step.num_stages, int64_t{s} * step.num_microbatches, step.num_microbatches, same_data),
        s + 1);
    EXPECT_TRUE(result.ok()) << result.status();
    if (!result.ok()) return run;
    run.losses.insert(run.losses.end(), result->losses.begin(), result->losses.end());
  }
  return run;
}

void ExpectSameState(const ir::TensorMap& a, const ir::TensorMap& b) {
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, tensor] : a) {
    ASSERT_TRUE(b.count(name)) << name;
    EXPECT_TRUE(tensor.BitwiseEquals(b.at(name))) << name;
  }
}

TEST(AsynchronousStep, PipeDreamStageSKeepsPMinusSVersionsOfEachParameter) {
  const ir::TrainStep step = Trace(3, 4, {Mode::kPipeDream}, Adam({}));
  EXPECT_EQ(step.group_size(), 1);
  EXPECT_EQ(step.updates_per_step(), 4);
  EXPECT_EQ(step.version_delay, (std::vector<int32_t>{2, 1, 0}));
  const std::map<std::string, int32_t> delays = ir::ParameterVersionDelays(step);
  ASSERT_FALSE(delays.empty());
  for (const auto& [parameter, delay] : delays) {
    for (int32_t k = 1; k <= delay; ++k) {
      const ir::StateSpec* stash = step.FindState(ir::StashName(parameter, k));
      ASSERT_NE(stash, nullptr) << parameter << " " << k;
      EXPECT_EQ(stash->parameter, parameter);
      // Before any update every version is the initial weights.
      EXPECT_EQ(stash->init, step.FindState(parameter)->init);
    }
    EXPECT_EQ(step.FindState(ir::StashName(parameter, delay + 1)), nullptr) << parameter;
  }
  // The last stage (delay 0) stashes nothing.
  for (const ir::StateSpec& spec : step.state) {
    if (spec.name.rfind("stash", 0) == 0) {
      EXPECT_GT(delays.count(spec.parameter), 0u) << spec.name;
    }
  }
}

TEST(AsynchronousStep, TwoBufferGroupsComputeOnTheVersionBeforeTheLatest) {
  // Every microbatch holds the same data, so two microbatches have the same
  // loss exactly when they computed on the same weights. 2BW: group 0 and
  // group 1 both compute on the initial weights (group 1 on the version
  // before the latest, which is still the initial one); group 2 on the
  // weights after one update.
  const ir::TrainStep step = Trace(2, 6, {Mode::kTwoBuffer, 2}, Sgd({.learning_rate = 0.1}));
  const Trained run = Train(step, 1, /*same_data=*/true);
  ASSERT_EQ(run.losses.size(), 6u);
  EXPECT_EQ(run.losses[0], run.losses[1]);
  EXPECT_EQ(run.losses[0], run.losses[2]);
  EXPECT_EQ(run.losses[0], run.losses[3]);
  EXPECT_NE(run.losses[0], run.losses[4]);
  EXPECT_EQ(run.losses[4], run.losses[5]);

  // Synchronous updates every 2 microbatches would move already for group 1.
  const ir::TrainStep per_group = Trace(2, 2, {}, Sgd({.learning_rate = 0.1}));
  const Trained synchronous = Train(per_group, 3, /*same_data=*/true);
  EXPECT_NE(synchronous.losses[0], synchronous.losses[2]);
  // ... and its group 1 computed on the weights 2BW's group 2 uses: W1.
  EXPECT_EQ(synchronous.losses[2], run.losses[4]);
}

TEST(AsynchronousStep, PipeDreamMicrobatchesComputeOnTheirStagesDelayedVersions) {
  // One stage: delay 0, an update per microbatch: sequential SGD, the same
  // as a synchronous step of one microbatch per step.
  const Trained pipedream = Train(Trace(1, 4, {Mode::kPipeDream}, Adam({})), 2);
  const Trained sequential = Train(Trace(1, 1, {}, Adam({})), 8);
  EXPECT_EQ(pipedream.losses, sequential.losses);
  ExpectSameState(pipedream.state, sequential.state);

  // Two stages, same data throughout: microbatch 0 runs on (W0, W0) and
  // microbatch 1 on (W0 for stage 0, W1 for stage 1), so their losses differ;
  // with two stages both on W0 they would agree, as 2BW's first two do.
  const Trained two = Train(Trace(2, 3, {Mode::kPipeDream}, Sgd({.learning_rate = 0.1})), 1, /*same_data=*/true);
  EXPECT_NE(two.losses[0], two.losses[1]);
}

TEST(AsynchronousStep, AResultDoesNotDependOnHowManyUpdatesOneStepHolds) {
  // The semantics have no flush: one step of 8 microbatches is four steps of 2.
  for (WeightUpdates updates : {WeightUpdates{Mode::kTwoBuffer, 2}, WeightUpdates{Mode::kPipeDream}}) {
    const Trained whole = Train(Trace(3, 8, updates, Adam({})), 1);
    const Trained split = Train(Trace(3, 2, updates, Adam({})), 4);
    EXPECT_EQ(whole.losses, split.losses);
    ExpectSameState(whole.state, split.state);
  }
}

TEST(AsynchronousStep, TwoBufferAveragesEachUpdateOverItsGroup) {
  // With one group per step and no delay left to matter (one stage still
  // computes on the version before the latest), 2BW's first update equals
  // a synchronous step's over the same microbatches.
  const Trained two_buffer = Train(Trace(1, 4, {Mode::kTwoBuffer, 4}, Sgd({.learning_rate = 0.1})), 1);
  const Trained synchronous = Train(Trace(1, 4, {}, Sgd({.learning_rate = 0.1})), 1);
  EXPECT_EQ(two_buffer.losses, synchronous.losses);
  for (const auto& [name, tensor] : synchronous.state) {
    EXPECT_TRUE(tensor.BitwiseEquals(two_buffer.state.at(name))) << name;
  }
}

TEST(AsynchronousStep, TwoBufferIsTheDelayedUpdateWrittenOutByHand) {
  // 2BW by its formula, from a synchronous step's graphs: W(g+1) is the
  // update of W(g) with the mean gradient of group g taken at W(g-1).
  const ir::TrainStep synchronous = Trace(2, 2, {}, Adam({}));
  const ir::TrainStep two_buffer = Trace(2, 6, {Mode::kTwoBuffer, 2}, Adam({}));
  const Trained pipelined = Train(two_buffer, 2);

  ir::TensorMap state = *ir::InitialState(synchronous);
  ir::TensorMap previous = state;  // W(g-1); W(-1) = W(0)
  std::vector<float> losses;
  for (int32_t g = 0; g < 6; ++g) {
    ir::TensorMap accumulators;
    for (const ir::TensorMap& batch : Batches(2, int64_t{g} * 2, 2)) {
      ir::TensorMap inputs = previous;
      for (const auto& [name, tensor] : batch) inputs[name] = tensor;
      absl::StatusOr<ir::TensorMap> outputs = cpu::RunGraph(synchronous.microbatch, inputs);
      ASSERT_TRUE(outputs.ok()) << outputs.status();
      losses.push_back(outputs->at("loss").f32()[0]);
      for (const ir::Accumulator& acc : synchronous.accumulators) {
        auto it = accumulators.find(acc.name);
        accumulators[acc.name] = it == accumulators.end()
                                     ? outputs->at(acc.source)
                                     : *cpu::AccumulateGradient(it->second, outputs->at(acc.source));
      }
    }
    ir::TensorMap inputs = state;
    for (const auto& [name, tensor] : accumulators) inputs[name] = tensor;
    inputs["step"] = ir::HostTensor::Scalar(static_cast<float>(g + 1));
    absl::StatusOr<ir::TensorMap> updated = cpu::RunGraph(synchronous.update, inputs);
    ASSERT_TRUE(updated.ok()) << updated.status();
    previous = state;
    for (auto& [name, tensor] : *updated) state[name] = tensor;
  }
  EXPECT_EQ(pipelined.losses, losses);
  for (const auto& [name, tensor] : state) {
    EXPECT_TRUE(tensor.BitwiseEquals(pipelined.state.at(name))) << name;
    const ir::StateSpec* spec = synchronous.FindState(name);
    if (spec->role == ir::StateRole::kParameter) {
      EXPECT_TRUE(previous.at(name).BitwiseEquals(pipelined.state.at(ir::StashName(name, 1)))) << name;
    }
  }
}

TEST(AsynchronousStep, TextRoundTripKeepsTheUpdateGroupsAndDelays) {
  const ir::TrainStep step = Trace(2, 4, {Mode::kTwoBuffer, 2}, Adam({}));
  const std::string text = ir::PrintTrainStep(step);
  EXPECT_NE(text.find("update_every=2 version_delays=[1,1]"), std::string::npos) << text.substr(0, 200);
  absl::StatusOr<ir::TrainStep> parsed = ir::ParseTrainStep(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(*parsed, step);
  // A synchronous step prints as before.
  EXPECT_EQ(ir::PrintTrainStep(Trace(2, 4, {}, Adam({}))).find("update_every"), std::string::npos);
}

TEST(AsynchronousStep, BadUpdateSettingsAreErrorsThatSayWhy) {
  absl::StatusOr<ir::TrainStep> uneven = TraceTrainStep("mlp", examples::MlpModel(SmallMlp(2)), Adam({}),
                                                        {.num_microbatches = 6, .updates = {Mode::kTwoBuffer, 4}});
  ASSERT_FALSE(uneven.ok());
  EXPECT_NE(uneven.status().message().find("2bw updates every 4 microbatches"), std::string::npos) << uneven.status();

  absl::StatusOr<ir::TrainStep> replicated =
      TraceTrainStep("mlp", examples::MlpModel(SmallMlp(2)), Adam({}),
                     {.num_microbatches = 2, .num_replicas = 2, .updates = {Mode::kPipeDream}});
  ASSERT_FALSE(replicated.ok());
  EXPECT_NE(replicated.status().message().find("data-parallel replicas"), std::string::npos) << replicated.status();

  ir::TrainStep step = Trace(2, 4, {Mode::kTwoBuffer, 2}, Adam({}));
  step.microbatches_per_update = 3;
  EXPECT_NE(ir::VerifyTrainStep(step).message().find("must divide its 4"), std::string::npos);
  step.microbatches_per_update = 2;
  step.version_delay = {1};
  EXPECT_NE(ir::VerifyTrainStep(step).message().find("1 version delays for 2 stages"), std::string::npos);
  step.version_delay = {2, 1};  // stage 0's parameters have only stash1
  EXPECT_NE(ir::VerifyTrainStep(step).message().find("no state 'stash2."), std::string::npos);

  absl::StatusOr<ir::TrainStep> bad_text = ir::ParseTrainStep(
      "train_step @m stages=2 microbatches=4 version_delays=[1,1,1] {\n}\n");
  ASSERT_FALSE(bad_text.ok());
  EXPECT_NE(bad_text.status().message().find("after 2 version delays"), std::string::npos) << bad_text.status();
}

}  // namespace
}  // namespace tandem
