// Rematerialisation (`--remat stage`): every stage keeps only its inputs
// between forward and backward and recomputes its forward inside the
// backward. The results are bit-identical to the reference for gpipe, 1f1b
// and zb-h1 (whose W reads what I recomputed), on actor threads and actor
// processes, with the measured peak equal to the static one; and the static
// memory drops by exactly the stashes it no longer keeps.
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "controller/compiler.h"
#include "controller/local_launcher.h"
#include "controller/step_plan.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/controller/parity_harness.h"

namespace tandem::controller {
namespace {

using testing_harness::ExpectParity;
using testing_harness::MustGenerate;

struct Case {
  std::string model;
  std::string schedule;
  bool processes = false;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.model << " " << c.schedule << (c.processes ? " processes" : " threads");
}

std::unique_ptr<Launcher> ProcessLauncher() { return testing_harness::ProcessLauncher(TANDEM_ACTOR_BINARY); }

class RematParity : public ::testing::TestWithParam<Case> {};

TEST_P(RematParity, IsBitIdenticalToTheReferenceAndMeasuresItsStaticPeak) {
  const Case& c = GetParam();
  absl::StatusOr<ir::TrainStep> step =
      c.model == "gpt" ? testing_harness::TinyGpt(2, 4) : testing_harness::TinyMlp(2, 4);
  ASSERT_TRUE(step.ok()) << step.status();
  const schedules::Schedule schedule = MustGenerate(c.schedule, 2, 4);
  ExpectParity(*step, schedule, /*steps=*/2,
               c.processes ? testing_harness::LauncherFactory(ProcessLauncher) : testing_harness::ThreadsLauncher,
               {.remat = {true, true}});
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  for (const char* schedule : {"gpipe", "1f1b", "zb-h1"}) {
    cases.push_back({"mlp", schedule, false});
    cases.push_back({"gpt", schedule, false});
    cases.push_back({"gpt", schedule, true});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(ModelsSchedulesLaunchers, RematParity, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           std::string name = absl::StrCat(info.param.model, "_", info.param.schedule, "_",
                                                           info.param.processes ? "processes" : "threads");
                           for (char& ch : name) {
                             if (ch == '-') ch = '_';
                           }
                           return name;
                         });

// The bytes of forward values the backward of `stage` reads (its stash per
// microbatch): what the forward keeps for it without remat, the stage's
// inputs with it.
int64_t StashBytes(const StepPlan& plan, int32_t stage) {
  const ir::Graph& graph = plan.step().microbatch;
  int64_t bytes = 0;
  for (ir::ValueId value : plan.Function(schedules::TaskKind::kBackward, stage).inputs) {
    const ir::Node& node = graph.node(value);
    if (node.op != ir::OpKind::kInput && node.phase == ir::Phase::kForward) bytes += graph.type(value).num_bytes();
  }
  return bytes;
}

// Under GPipe every forward runs before the first backward: there, each
// actor holds all M stashes, and remat must shrink that by exactly
// M x (stash without - stash with) per stage; the static peak drops too.
TEST(Remat, UnderGpipeTheStaticMemoryDropsByExactlyTheStashesItNoLongerKeeps) {
  constexpr int32_t kStages = 2;
  constexpr int32_t kMicrobatches = 4;
  absl::StatusOr<ir::TrainStep> step = testing_harness::TinyGpt(kStages, kMicrobatches);
  ASSERT_TRUE(step.ok()) << step.status();
  const schedules::Schedule schedule = MustGenerate("gpipe", kStages, kMicrobatches);
  absl::StatusOr<CompiledStep> kept = Compile(*step, schedule);
  absl::StatusOr<CompiledStep> recomputed = Compile(*step, schedule, {.remat = {true, true}});
  ASSERT_TRUE(kept.ok()) << kept.status();
  ASSERT_TRUE(recomputed.ok()) << recomputed.status();
  EXPECT_THAT(recomputed->remat, ::testing::ElementsAre(true, true));
  absl::StatusOr<StepPlan> kept_plan = StepPlan::Build(*step, schedule);
  absl::StatusOr<StepPlan> recomputed_plan = StepPlan::Build(*step, schedule, {true, true});
  ASSERT_TRUE(kept_plan.ok() && recomputed_plan.ok());

  for (int32_t actor = 0; actor < kStages; ++actor) {
    const int32_t stage = actor;  // gpipe: stage s on actor s
    const int64_t dropped = StashBytes(*kept_plan, stage) - StashBytes(*recomputed_plan, stage);
    EXPECT_GT(dropped, 0) << "stage " << stage << " stashes no more than its inputs";
    // The first backward task: after every forward of the actor.
    auto first_backward = [&](const ir::ActorProgram& program) {
      for (size_t task = 0; task < program.task_starts.size(); ++task) {
        if (program.instructions[program.task_starts[task]].task.kind == 'B') return program.task_starts[task];
      }
      return static_cast<int32_t>(program.instructions.size());
    };
    const ir::ActorProgram& a = kept->programs[actor];
    const ir::ActorProgram& b = recomputed->programs[actor];
    EXPECT_EQ(ir::LiveBytesBefore(a)[first_backward(a)] - ir::LiveBytesBefore(b)[first_backward(b)], kMicrobatches * dropped)
        << "actor " << actor;
    EXPECT_LT(b.static_peak_bytes, a.static_peak_bytes) << "actor " << actor;
  }
}

TEST(Remat, AVectorForAnotherStageCountIsRefusedNamingBoth) {
  absl::StatusOr<ir::TrainStep> step = testing_harness::TinyMlp(2, 4);
  ASSERT_TRUE(step.ok()) << step.status();
  absl::StatusOr<CompiledStep> compiled = Compile(*step, MustGenerate("1f1b", 2, 4), {.remat = {true, true, true}});
  EXPECT_EQ(compiled.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(compiled.status().message()),
              ::testing::HasSubstr("rematerialisation is given for 3 stages, but model"));
}

}  // namespace
}  // namespace tandem::controller
