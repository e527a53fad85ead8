// One update on one microbatch as one graph (ir/single_update.h): the same
// bits as the reference interpreter's training step, and a clear error for
// a step it cannot join.
#include "ir/single_update.h"

#include <vector>

#include "backends/cpu/interpreter.h"
#include "backends/cpu/kernels.h"
#include "examples/data/synthetic.h"
#include "examples/models/mlp.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/initial_state.h"
#include "ir/trace.h"

namespace tandem {
namespace {

using ::testing::HasSubstr;

examples::MlpConfig SmallMlp() {
  examples::MlpConfig config;
  config.input_dim = 8;
  config.hidden_dim = 12;
  config.num_layers = 2;
  config.num_classes = 4;
  config.batch_size = 4;
  return config;
}

ir::TrainStep Trace(const Optimizer& optimizer, TraceOptions options = {.seed = 3}) {
  absl::StatusOr<ir::TrainStep> step = TraceTrainStep("mlp", examples::MlpModel(SmallMlp()), optimizer, options);
  EXPECT_TRUE(step.ok()) << step.status();
  return *std::move(step);
}

TEST(SingleUpdate, ThreeRunsGiveTheReferenceStepsLossesAndStateBitForBit) {
  cpu::SetBlasThreads(1);
  const ir::TrainStep step = Trace(Adam({.learning_rate = 0.01}));
  absl::StatusOr<ir::Graph> graph = ir::SingleUpdateGraph(step);
  ASSERT_TRUE(graph.ok()) << graph.status();
  ASSERT_EQ(graph->outputs().front().name, "loss");

  ir::TensorMap reference = *ir::InitialState(step);
  ir::TensorMap joined = reference;
  joined[ir::kSingleUpdateStep] = ir::HostTensor::Scalar(0.0f);
  for (uint64_t s = 0; s < 3; ++s) {
    const ir::TensorMap batch = examples::ClassificationBatch(SmallMlp(), 7, s);
    absl::StatusOr<cpu::StepResult> expected =
        cpu::RunReferenceStep(step, reference, {batch}, static_cast<int64_t>(s + 1));
    ASSERT_TRUE(expected.ok()) << expected.status();

    ir::TensorMap inputs = joined;
    for (const auto& [name, tensor] : batch) inputs[name] = tensor;
    absl::StatusOr<ir::TensorMap> outputs = cpu::RunGraph(*graph, inputs);
    ASSERT_TRUE(outputs.ok()) << outputs.status();
    EXPECT_EQ(outputs->at("loss").f32()[0], expected->losses[0]) << "update " << s + 1;
    for (const ir::GraphOutput& output : graph->outputs()) {
      if (output.name != "loss") joined[output.name] = outputs->at(output.name);
    }
  }
  EXPECT_EQ(joined.at(ir::kSingleUpdateStep).f32()[0], 3.0f);
  for (const auto& [name, tensor] : reference) {
    EXPECT_TRUE(tensor.BitwiseEquals(joined.at(name))) << name;
  }
  // Adam's moments moved with the parameters: the graph writes every slot.
  EXPECT_EQ(graph->outputs().size(), step.update.outputs().size() + 2);
}

TEST(SingleUpdate, AStepItCannotJoinIsAnErrorThatSaysWhy) {
  EXPECT_THAT(ir::SingleUpdateGraph(Trace(Sgd({}), {.num_microbatches = 2})).status().message(),
              HasSubstr("2 microbatches and 1 replicas; a single update is one microbatch"));
  absl::StatusOr<ir::TrainStep> forward = TraceForwardStep("mlp", examples::MlpInferenceModel(SmallMlp()));
  ASSERT_TRUE(forward.ok()) << forward.status();
  EXPECT_THAT(ir::SingleUpdateGraph(*forward).status().message(), HasSubstr("forward-only"));
  ir::TrainStep named = Trace(Sgd({}));
  named.state.push_back(ir::StateSpec{.name = "step", .type = {ir::DType::kF32, {}}});
  EXPECT_THAT(ir::SingleUpdateGraph(named).status().message(), HasSubstr("the name of the update counter"));
}

}  // namespace
}  // namespace tandem
