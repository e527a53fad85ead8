// Asynchronous pipelines (pipedream, 2bw): the compiled programs update
// mid-step and compute each microbatch on its stage's stashed weight
// version. Runs are bit-identical to the reference on actor threads and
// processes with the measured peak equal to the static one; the static
// memory holds p-s versions of stage s's parameters under PipeDream and two
// under 2BW; a schedule that cannot provide a version is refused by name.
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "controller/compiler.h"
#include "controller/local_launcher.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/controller/parity_harness.h"

namespace tandem::controller {
namespace {

using Mode = WeightUpdates::Mode;
using testing_harness::ExpectParity;
using testing_harness::MustGenerate;

WeightUpdates UpdatesOf(const std::string& schedule, int32_t every) {
  return schedule == "pipedream" ? WeightUpdates{Mode::kPipeDream, 1} : WeightUpdates{Mode::kTwoBuffer, every};
}

struct Case {
  std::string model;
  std::string schedule;
  bool processes = false;
  bool remat = false;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.model << " " << c.schedule << (c.processes ? " processes" : " threads") << (c.remat ? " remat" : "");
}

std::unique_ptr<Launcher> ProcessLauncher() { return testing_harness::ProcessLauncher(TANDEM_ACTOR_BINARY); }

class AsynchronousParity : public ::testing::TestWithParam<Case> {};

TEST_P(AsynchronousParity, IsBitIdenticalToTheReferenceAndMeasuresItsStaticPeak) {
  const Case& c = GetParam();
  const WeightUpdates updates = UpdatesOf(c.schedule, 3);
  absl::StatusOr<ir::TrainStep> step = c.model == "gpt" ? testing_harness::TinyGpt(3, 6, false, updates)
                                                        : testing_harness::TinyMlp(3, 6, 1, updates);
  ASSERT_TRUE(step.ok()) << step.status();
  ExpectParity(*step, MustGenerate(c.schedule, 3, 6), /*steps=*/3,
               c.processes ? testing_harness::LauncherFactory(ProcessLauncher) : testing_harness::ThreadsLauncher,
               {.remat = c.remat ? std::vector<bool>(3, true) : std::vector<bool>()});
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  for (const char* schedule : {"pipedream", "2bw"}) {
    cases.push_back({"mlp", schedule, false});
    cases.push_back({"gpt", schedule, false});
    cases.push_back({"gpt", schedule, true});
    cases.push_back({"gpt", schedule, false, true});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(ModelsSchedulesLaunchers, AsynchronousParity, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return absl::StrCat(info.param.model, "_", info.param.schedule == "2bw" ? "twobw" : "pipedream",
                                               "_", info.param.processes ? "processes" : "threads",
                                               info.param.remat ? "_remat" : "");
                         });

// The bytes of the weight versions an actor's program keeps: its state
// buffers that are a parameter or a stash of one, by parameter.
std::map<std::string, int64_t> VersionBytes(const ir::TrainStep& step, const ir::ActorProgram& program,
                                            std::map<std::string, int32_t>& versions) {
  std::map<std::string, int64_t> bytes;
  for (const ir::Buffer& buffer : program.buffers) {
    if (buffer.kind != ir::BufferKind::kState) continue;
    const ir::StateSpec* spec = step.FindState(buffer.binding);
    const bool stash = spec->role == ir::StateRole::kOptimizerState && buffer.binding.rfind("stash", 0) == 0;
    if (spec->role != ir::StateRole::kParameter && !stash) continue;
    const std::string& parameter = stash ? spec->parameter : spec->name;
    bytes[parameter] += buffer.type.num_bytes();
    ++versions[parameter];
  }
  return bytes;
}

// The bytes of a program's state buffers, live throughout the step.
int64_t StateBytes(const ir::ActorProgram& program) {
  int64_t bytes = 0;
  for (const ir::Buffer& buffer : program.buffers) {
    if (buffer.kind == ir::BufferKind::kState) bytes += buffer.type.num_bytes();
  }
  return bytes;
}

TEST(AsynchronousPipeline, StaticMemoryHoldsPMinusSVersionsUnderPipeDreamAndTwoUnder2bw) {
  for (const char* name : {"pipedream", "2bw"}) {
    absl::StatusOr<ir::TrainStep> step = testing_harness::TinyGpt(4, 8, false, UpdatesOf(name, 4));
    ASSERT_TRUE(step.ok()) << step.status();
    absl::StatusOr<CompiledStep> compiled = Compile(*step, MustGenerate(name, 4, 8));
    ASSERT_TRUE(compiled.ok()) << compiled.status();
    absl::StatusOr<ir::TrainStep> flush = testing_harness::TinyGpt(4, 8);
    absl::StatusOr<CompiledStep> one_f_one_b = Compile(*flush, MustGenerate("1f1b", 4, 8));
    ASSERT_TRUE(one_f_one_b.ok()) << one_f_one_b.status();
    for (int32_t actor = 0; actor < 4; ++actor) {
      const int32_t expected = std::string(name) == "pipedream" ? 4 - actor : 2;
      std::map<std::string, int32_t> versions;
      const std::map<std::string, int64_t> bytes = VersionBytes(*step, compiled->programs[actor], versions);
      ASSERT_FALSE(versions.empty()) << name << " actor " << actor;
      int64_t one_version = 0;
      for (const auto& [parameter, count] : versions) {
        EXPECT_EQ(count, expected) << name << " actor " << actor << " " << parameter;
        one_version += bytes.at(parameter) / count;
      }
      // The extra versions are part of the static peak: 1F1B's program on
      // the same actor holds one version and no more state than that.
      std::map<std::string, int32_t> flush_versions;
      VersionBytes(*flush, one_f_one_b->programs[actor], flush_versions);
      for (const auto& [parameter, count] : flush_versions) EXPECT_EQ(count, 1) << parameter;
      EXPECT_GE(compiled->programs[actor].static_peak_bytes, StateBytes(compiled->programs[actor]));
      EXPECT_EQ(StateBytes(compiled->programs[actor]) - StateBytes(one_f_one_b->programs[actor]),
                (expected - 1) * one_version)
          << name << " actor " << actor;
    }
  }
}

TEST(AsynchronousPipeline, AnUpdateRunsRightAfterTheBackwardThatCompletesItsGroup) {
  absl::StatusOr<ir::TrainStep> step = testing_harness::TinyMlp(2, 4, 1, {Mode::kTwoBuffer, 2});
  ASSERT_TRUE(step.ok()) << step.status();
  absl::StatusOr<CompiledStep> compiled = Compile(*step, MustGenerate("2bw", 2, 4));
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  for (const ir::ActorProgram& program : compiled->programs) {
    std::vector<std::string> order;  // backwards and updates, in program order
    for (const ir::Instruction& instruction : program.instructions) {
      if (instruction.kind != ir::InstructionKind::kRun) continue;
      if (instruction.task.kind == 'B' || instruction.task.kind == 'U') order.push_back(instruction.task.ToString());
    }
    const std::string s = absl::StrCat(program.actor);
    EXPECT_THAT(order, testing::ElementsAre("B" + s + ".0", "B" + s + ".1", "update.0", "B" + s + ".2",
                                            "B" + s + ".3", "update.1"));
  }
}

TEST(AsynchronousPipeline, AScheduleThatRunsAForwardBeforeItsWeightsExistIsRefusedByTask) {
  // PipeDream's stage 0 of 2 computes microbatch 2 on the weights after one
  // update; GPipe runs every forward before the first backward.
  absl::StatusOr<ir::TrainStep> step = testing_harness::TinyMlp(2, 4, 1, {Mode::kPipeDream, 1});
  ASSERT_TRUE(step.ok()) << step.status();
  absl::StatusOr<CompiledStep> compiled = Compile(*step, MustGenerate("gpipe", 2, 4));
  ASSERT_FALSE(compiled.ok());
  EXPECT_EQ(compiled.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(compiled.status().message(), testing::HasSubstr("F0.2 (actor 0, slot 2)"));
  EXPECT_THAT(compiled.status().message(),
              testing::HasSubstr("needs stage 0's weights after the step's first 1 update(s) (microbatch 2 is in "
                                 "update group 2, version delay 1), but its actor has made only 0 by then"));

  // 2BW updating every microbatch on 4 stages: stage 0 has 4 in flight.
  absl::StatusOr<ir::TrainStep> often = testing_harness::TinyMlp(4, 8, 1, {Mode::kTwoBuffer, 1});
  ASSERT_TRUE(often.ok()) << often.status();
  compiled = Compile(*often, MustGenerate("2bw", 4, 8));
  ASSERT_FALSE(compiled.ok());
  EXPECT_THAT(compiled.status().message(), testing::HasSubstr("F0.2 (actor 0, slot 2)"));
}

TEST(AsynchronousPipeline, AParameterSharedByTwoActorsIsRefused) {
  absl::StatusOr<ir::TrainStep> step = testing_harness::TinyGpt(2, 4, /*tied=*/true, {Mode::kTwoBuffer, 2});
  ASSERT_TRUE(step.ok()) << step.status();
  absl::StatusOr<CompiledStep> compiled = Compile(*step, MustGenerate("2bw", 2, 4));
  ASSERT_FALSE(compiled.ok());
  EXPECT_THAT(compiled.status().message(), testing::HasSubstr("parameter 'wte' is used on actors 0 and 1"));
  // Under PipeDream its stages would disagree on its version: the trace refuses.
  absl::StatusOr<ir::TrainStep> pipedream = testing_harness::TinyGpt(2, 4, /*tied=*/true, {Mode::kPipeDream, 1});
  ASSERT_FALSE(pipedream.ok());
  EXPECT_THAT(pipedream.status().message(), testing::HasSubstr("different weight versions under pipedream"));
}

}  // namespace
}  // namespace tandem::controller
