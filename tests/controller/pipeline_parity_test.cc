// A pipelined step on actor threads equals the single-process reference
// bit for bit, for every built-in schedule, a hand-written one and one
// imported from PyTorch; static memory equals measured memory exactly.
#include <cstring>
#include <string>

#include "backends/cpu/kernels.h"
#include "controller/pipeline.h"
#include "examples/data/synthetic.h"
#include "examples/models/gpt.h"
#include "examples/models/mlp.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "schedules/generators.h"
#include "schedules/pytorch_csv.h"
#include "schedules/text_format.h"
#include "tests/controller/parity_harness.h"
#include "tests/testing/test_data.h"

namespace tandem::controller {
namespace {

struct ParityCase {
  std::string model;
  std::string schedule;
  int32_t actors = 2;
  int32_t microbatches = 4;
  int32_t virtual_stages = 1;

  int32_t stages() const { return actors * virtual_stages; }
  std::string Name() const {
    std::string name = model + "_" + schedule + "_P" + std::to_string(actors) + "_M" + std::to_string(microbatches);
    for (char& c : name) {
      if (c == '-') c = '_';
    }
    return name;
  }
};

std::vector<ParityCase> Cases() {
  std::vector<ParityCase> cases;
  for (const std::string model : {"mlp", "gpt"}) {
    for (int32_t actors : {2, 4}) {
      for (int32_t microbatches : {4, 8}) {
        cases.push_back({model, "gpipe", actors, microbatches, 1});
        cases.push_back({model, "1f1b", actors, microbatches, 1});
        cases.push_back({model, "interleaved", actors, microbatches, 2});
        cases.push_back({model, "zb-h1", actors, microbatches, 1});
        // ZB-V needs at least 2P - 1 microbatches (its generator says why).
        if (microbatches >= 2 * actors - 1) cases.push_back({model, "zb-v", actors, microbatches, 2});
      }
    }
  }
  return cases;
}

class BuiltInScheduleParity : public ::testing::TestWithParam<ParityCase> {};

TEST_P(BuiltInScheduleParity, ThreeStepsMatchTheReferenceBitwise) {
  const ParityCase& c = GetParam();
  absl::StatusOr<ir::TrainStep> step = c.model == "gpt" ? testing_harness::TinyGpt(c.stages(), c.microbatches)
                                                        : testing_harness::TinyMlp(c.stages(), c.microbatches);
  ASSERT_TRUE(step.ok()) << step.status();
  absl::StatusOr<schedules::Schedule> schedule =
      schedules::Generate(c.schedule, {.actors = c.actors, .microbatches = c.microbatches,
                                       .virtual_stages = c.virtual_stages});
  ASSERT_TRUE(schedule.ok()) << schedule.status();
  testing_harness::ExpectParity(*step, *schedule, /*steps=*/3);
}

INSTANTIATE_TEST_SUITE_P(Grid, BuiltInScheduleParity, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<ParityCase>& info) { return info.param.Name(); });

TEST(CustomScheduleParity, HandWrittenScheduleFileMatchesTheReference) {
  // A hand-written schedule: two actors, four stages in V placement, the
  // backward split into I and W with W deferred.
  constexpr char kText[] =
      "# V placement: actor 0 holds stages 0 and 3, actor 1 stages 1 and 2.\n"
      "actors 2\n"
      "microbatches 2\n"
      "placement v\n"
      "actor 0: F0.0 F0.1 F3.0 I3.0 F3.1 I3.1 I0.0 I0.1 W3.0 W3.1 W0.0 W0.1\n"
      "actor 1: F1.0 F2.0 F1.1 F2.1 I2.0 I1.0 I2.1 I1.1 W2.0 W1.0 W2.1 W1.1\n";
  absl::StatusOr<schedules::Schedule> schedule = schedules::ParseScheduleText(kText, "custom.sched");
  ASSERT_TRUE(schedule.ok()) << schedule.status();
  absl::StatusOr<ir::TrainStep> step = testing_harness::TinyGpt(4, 2);
  ASSERT_TRUE(step.ok()) << step.status();
  testing_harness::ExpectParity(*step, *schedule, 3);
}

TEST(CustomScheduleParity, WeightGradientsOutOfMicrobatchOrderStillMatch) {
  // W runs the microbatches in reverse: the compiler holds the early
  // gradients until their turn (and counts them in the static peak). Four
  // microbatches, since a sum of two is the same in either order.
  constexpr char kText[] =
      "actors 2\n"
      "microbatches 4\n"
      "actor 0: F0.0 F0.1 F0.2 F0.3 I0.0 I0.1 I0.2 I0.3 W0.3 W0.2 W0.1 W0.0\n"
      "actor 1: F1.0 I1.0 F1.1 I1.1 F1.2 I1.2 F1.3 I1.3 W1.3 W1.2 W1.1 W1.0\n";
  absl::StatusOr<schedules::Schedule> schedule = schedules::ParseScheduleText(kText, "reversed_w.sched");
  ASSERT_TRUE(schedule.ok()) << schedule.status();
  absl::StatusOr<ir::TrainStep> step = testing_harness::TinyMlp(2, 4);
  ASSERT_TRUE(step.ok()) << step.status();
  testing_harness::ExpectParity(*step, *schedule, 3);
}

TEST(ImportedScheduleParity, PytorchZeroBubbleCsvOnMlpWithFourStages) {
  absl::StatusOr<schedules::Schedule> schedule = schedules::ParsePytorchCsv(
      ::tandem::test::ReadTestData("pytorch-pipelining/zb1p_2rank_2stagep_compute.csv"), "zb1p.csv");
  ASSERT_TRUE(schedule.ok()) << schedule.status();
  ASSERT_EQ(schedule->num_stages, 4);
  absl::StatusOr<ir::TrainStep> step = testing_harness::TinyMlp(4, schedule->num_microbatches);
  ASSERT_TRUE(step.ok()) << step.status();
  testing_harness::ExpectParity(*step, *schedule, 3);
}

TEST(SharedValues, SkipConnectionAcrossStagesMatches) {
  absl::StatusOr<ir::TrainStep> step = testing_harness::SkipModel(2);
  ASSERT_TRUE(step.ok()) << step.status();
  for (int32_t actors : {3}) {
    absl::StatusOr<schedules::Schedule> schedule =
        schedules::Generate("1f1b", {.actors = actors, .microbatches = 2});
    ASSERT_TRUE(schedule.ok()) << schedule.status();
    testing_harness::ExpectParity(*step, *schedule, 3);
  }
}

TEST(SharedValues, TiedEmbeddingGradientsAreSummedAndReplicasStayIdentical) {
  absl::StatusOr<ir::TrainStep> step = testing_harness::TinyGpt(2, 4, /*tied=*/true);
  ASSERT_TRUE(step.ok()) << step.status();
  absl::StatusOr<schedules::Schedule> schedule = schedules::Generate("1f1b", {.actors = 2, .microbatches = 4});
  ASSERT_TRUE(schedule.ok()) << schedule.status();
  absl::StatusOr<CompiledStep> compiled = Compile(*step, *schedule);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  // Both actors hold the tied table and update it; each sends the other its
  // accumulator once, after the loop.
  for (const ir::ActorProgram& program : compiled->programs) {
    bool holds = false;
    for (const ir::Buffer& buffer : program.buffers) holds = holds || buffer.binding == "wte";
    EXPECT_TRUE(holds) << "actor " << program.actor;
  }
  testing_harness::ExpectParity(*step, *schedule, 3);
}

TEST(ForwardOnly, InferencePipelineMatchesTheReference) {
  examples::MlpConfig config;
  config.num_stages = 2;
  config.num_layers = 2;
  absl::StatusOr<ir::TrainStep> step =
      TraceForwardStep("mlp", examples::MlpModel(config), {.num_microbatches = 4});
  ASSERT_TRUE(step.ok()) << step.status();
  absl::StatusOr<schedules::Schedule> schedule = schedules::Generate("1f1b", {.actors = 2, .microbatches = 4});
  ASSERT_TRUE(schedule.ok());
  testing_harness::ExpectForwardParity(*step, ForwardOnly(*schedule), config);
}

}  // namespace
}  // namespace tandem::controller
