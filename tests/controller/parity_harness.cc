#include "tests/controller/parity_harness.h"

#include <cstring>
#include <fstream>
#include <sstream>

#include "backends/cpu/interpreter.h"
#include "backends/cpu/kernels.h"
#include "controller/local_launcher.h"
#include "controller/pipeline.h"
#include "examples/models/gpt.h"
#include "gtest/gtest.h"
#include "ir/initial_state.h"
#include "schedules/generators.h"
#include "tools/cli/threads_launcher.h"

namespace tandem::controller::testing_harness {

absl::StatusOr<ir::TrainStep> TinyGpt(int32_t stages, int32_t microbatches, bool tied, WeightUpdates updates) {
  examples::GptConfig config;
  config.vocab_size = 11;
  config.sequence_length = 6;
  config.model_dim = 8;
  config.num_heads = 2;
  config.num_layers = stages;
  config.batch_size = 2;
  config.num_stages = stages;
  config.tied_head = tied;
  return TraceTrainStep("gpt", examples::GptModel(config), Adam({.learning_rate = 1e-2}),
                        {.num_microbatches = microbatches, .seed = 5, .updates = updates});
}

absl::StatusOr<ir::TrainStep> TinyMlp(int32_t stages, int32_t microbatches, int32_t replicas,
                                      WeightUpdates updates) {
  examples::MlpConfig config;
  config.input_dim = 8;
  config.hidden_dim = 12;
  config.num_layers = stages;
  config.batch_size = 4;
  config.num_stages = stages;
  return TraceTrainStep("mlp", examples::MlpModel(config), Sgd({.learning_rate = 0.1, .momentum = 0.9}),
                        {.num_microbatches = microbatches, .num_replicas = replicas, .seed = 5, .updates = updates});
}

absl::StatusOr<ir::TrainStep> SkipModel(int32_t microbatches) {
  auto model = [](Tracer& t) {
    Tensor x = t.Input("x", {ir::DType::kF32, {4, 8}});
    Tensor h0 = tanh(matmul(x, t.Parameter("w0", {8, 8}, init::Normal(0.5))));
    Tensor skip = h0;
    h0 = pipeline_yield(h0);
    Tensor h1 = pipeline_yield(tanh(matmul(h0, t.Parameter("w1", {8, 8}, init::Normal(0.5)))));
    Tensor logits = matmul(h1 + skip, t.Parameter("w2", {8, 10}, init::Normal(0.5)));
    return mean(cross_entropy(logits, t.Label("labels", {ir::DType::kI32, {4}})));
  };
  return TraceTrainStep("skip", model, Adam({}), {.num_microbatches = microbatches, .seed = 9});
}

schedules::Schedule MustGenerate(const std::string& name, int32_t actors, int32_t microbatches,
                                 int32_t virtual_stages) {
  absl::StatusOr<schedules::Schedule> schedule =
      schedules::Generate(name, {.actors = actors, .microbatches = microbatches, .virtual_stages = virtual_stages});
  EXPECT_TRUE(schedule.ok()) << schedule.status();
  return schedule.ok() ? *std::move(schedule) : schedules::Schedule();
}

std::vector<ir::TensorMap> Batches(const ir::TrainStep& step, int64_t step_number) {
  const int32_t count = step.num_microbatches * step.num_replicas;  // every replica's
  std::vector<ir::TensorMap> batches(count);
  for (int32_t m = 0; m < count; ++m) {
    for (ir::ValueId id : step.microbatch.Inputs()) {
      const ir::Node& node = step.microbatch.node(id);
      const std::string& role = node.attributes.GetString("role");
      if (role != "data" && role != "label") continue;
      const std::string& name = node.attributes.GetString("name");
      if (node.type.dtype == ir::DType::kI32) {
        ir::HostTensor ids(node.type);
        for (int64_t i = 0; i < ids.num_elements(); ++i) {
          ids.i32()[i] = static_cast<int32_t>((i * 7 + m * 3 + step_number * 5 + (role == "label")) % 10);
        }
        batches[m][name] = ids;
      } else {
        batches[m][name] = *ir::MakeTensor(node.type, {ir::Initializer::Kind::kNormal, 0.0, 1.0,
                                                      static_cast<uint64_t>(step_number * 131 + m)});
      }
    }
  }
  return batches;
}

namespace {

bool SameBits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

}  // namespace

std::unique_ptr<Launcher> ProcessLauncher(const std::string& actor_binary) {
  LocalLauncherOptions options;
  options.actor_binary = actor_binary;
  options.shm_ring_bytes = int64_t{16} << 20;
  return std::make_unique<LocalLauncher>(std::move(options));
}

std::unique_ptr<Launcher> ThreadsLauncher() { return std::make_unique<cli::ThreadsLauncher>(absl::Seconds(20)); }

void ExpectParity(const ir::TrainStep& step, const schedules::Schedule& schedule, int steps,
                  const LauncherFactory& make_launcher, const CompileOptions& options) {
  cpu::SetBlasThreads(1);
  absl::StatusOr<std::unique_ptr<Pipeline>> pipeline =
      Pipeline::Create(step, schedule, ir::SeedSources(step), make_launcher(), 0, options);
  ASSERT_TRUE(pipeline.ok()) << pipeline.status();
  ir::TensorMap reference = *ir::InitialState(step);
  for (int s = 1; s <= steps; ++s) {
    std::vector<ir::TensorMap> batches = Batches(step, s);
    absl::StatusOr<StepReport> report = (*pipeline)->Step(batches);
    ASSERT_TRUE(report.ok()) << report.status();
    absl::StatusOr<cpu::StepResult> expected = cpu::RunReferenceStep(step, reference, batches, s);
    ASSERT_TRUE(expected.ok()) << expected.status();
    ASSERT_EQ(report->losses.size(), expected->losses.size());
    for (size_t m = 0; m < expected->losses.size(); ++m) {
      EXPECT_TRUE(SameBits(report->losses[m], expected->losses[m]))
          << "step " << s << " microbatch " << m << ": " << report->losses[m] << " vs " << expected->losses[m];
    }
    const CompiledStep& compiled = (*pipeline)->compiled();
    for (int32_t actor = 0; actor < compiled.num_actors; ++actor) {
      EXPECT_EQ(report->peak_live_bytes[actor], compiled.programs[actor].static_peak_bytes) << "actor " << actor;
    }
  }
  absl::StatusOr<ir::TensorMap> state = (*pipeline)->State();
  ASSERT_TRUE(state.ok()) << state.status();
  for (const auto& [name, tensor] : reference) {
    auto it = state->find(name);
    if (it == state->end()) {
      ADD_FAILURE() << "no actor holds " << name;
      continue;
    }
    EXPECT_TRUE(it->second.BitwiseEquals(tensor)) << name;
  }
}

void ExpectForwardParity(const ir::TrainStep& step, const schedules::Schedule& schedule,
                         const examples::MlpConfig& config) {
  cpu::SetBlasThreads(1);
  absl::StatusOr<std::unique_ptr<Pipeline>> pipeline =
      Pipeline::Create(step, schedule, ir::SeedSources(step), ThreadsLauncher());
  ASSERT_TRUE(pipeline.ok()) << pipeline.status();
  std::vector<ir::TensorMap> batches = Batches(step, 1);
  absl::StatusOr<StepReport> report = (*pipeline)->Step(batches);
  ASSERT_TRUE(report.ok()) << report.status();
  absl::StatusOr<std::vector<ir::HostTensor>> expected =
      cpu::RunReferenceForward(step, *ir::InitialState(step), batches);
  ASSERT_TRUE(expected.ok()) << expected.status();
  ASSERT_EQ(report->outputs.size(), expected->size());
  for (size_t m = 0; m < expected->size(); ++m) EXPECT_TRUE(report->outputs[m].BitwiseEquals((*expected)[m])) << m;
}

}  // namespace tandem::controller::testing_harness
