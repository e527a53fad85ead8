// The compiler's structure: the transfers a schedule implies, clear errors
// for what cannot run, stable hashes and a readable dump.
#include "controller/compiler.h"

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/op_def.h"
#include "schedules/generators.h"
#include "schedules/text_format.h"
#include "tests/controller/parity_harness.h"

namespace tandem::controller {
namespace {

using ::testing::HasSubstr;

using testing_harness::MustGenerate;

TEST(Compiler, OneFOneBTransfersWhatTheScheduleImplies) {
  // 1F1B, P=4, M=8: each inner actor receives and sends 8 activations and 8
  // gradients; the ends do half of that. One run per task, plus the
  // stage's gradient norm and the update.
  absl::StatusOr<ir::TrainStep> step = testing_harness::TinyMlp(4, 8);
  ASSERT_TRUE(step.ok()) << step.status();
  absl::StatusOr<CompiledStep> compiled = Compile(*step, MustGenerate("1f1b", 4, 8));
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  const int64_t activation_bytes = 4 * 12 * 4;  // f32[batch 4, hidden 12]
  for (int32_t actor = 0; actor < 4; ++actor) {
    const ActorStats& stats = compiled->stats[actor];
    const bool inner = actor == 1 || actor == 2;
    EXPECT_EQ(stats.runs, 16 + 2) << "actor " << actor;
    EXPECT_EQ(stats.sends, inner ? 16 : 8) << "actor " << actor;
    EXPECT_EQ(stats.receives, inner ? 16 : 8) << "actor " << actor;
    EXPECT_EQ(stats.bytes_sent, (inner ? 16 : 8) * activation_bytes) << "actor " << actor;
  }
}

TEST(Compiler, TheActorsArithmeticAddsUpToTheStepsByTheOpTable) {
  // Splitting into stage functions moves nodes, it does not add arithmetic:
  // M runs of the microbatch graph, one of the norm graph and one update,
  // spread over the actors.
  constexpr int32_t kMicrobatches = 8;
  absl::StatusOr<ir::TrainStep> step = testing_harness::TinyMlp(4, kMicrobatches);
  ASSERT_TRUE(step.ok()) << step.status();
  absl::StatusOr<CompiledStep> compiled = Compile(*step, MustGenerate("1f1b", 4, kMicrobatches));
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  double total = 0;
  for (const ActorStats& stats : compiled->stats) {
    EXPECT_GT(stats.flops, 0.0);
    total += stats.flops;
  }
  const double expected = kMicrobatches * ir::GraphCost(step->microbatch).flops + ir::GraphCost(step->norm).flops +
                          ir::GraphCost(step->update).flops;
  EXPECT_GT(expected, 0.0);
  EXPECT_DOUBLE_EQ(total, expected);
}

TEST(Compiler, WhatAStepSendsOnePeerIsCountedAsTheDataPlaneFramesIt) {
  // 1F1B, P=2, M=4: actor 0 sends actor 1 four activations of f32[4,12]
  // (192 B), actor 1 sends actor 0 four gradients of the same size. Each
  // frame: a 64 B header and one 96 B descriptor (padded to 192), then the
  // tensor's 192 B: 384 B a message. The shared-memory rings are sized
  // from this (controller/local_launcher.h).
  absl::StatusOr<ir::TrainStep> step = testing_harness::TinyMlp(2, 4);
  ASSERT_TRUE(step.ok());
  absl::StatusOr<CompiledStep> compiled = Compile(*step, MustGenerate("1f1b", 2, 4));
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  EXPECT_EQ(ir::MostBytesToOnePeer(compiled->programs[0]), 4 * 384);
  EXPECT_EQ(ir::MostBytesToOnePeer(compiled->programs[1]), 4 * 384);
  // A single actor sends nothing.
  absl::StatusOr<ir::TrainStep> one = testing_harness::TinyMlp(1, 4);
  ASSERT_TRUE(one.ok());
  absl::StatusOr<CompiledStep> alone = Compile(*one, MustGenerate("1f1b", 1, 4));
  ASSERT_TRUE(alone.ok()) << alone.status();
  EXPECT_EQ(ir::MostBytesToOnePeer(alone->programs[0]), 0);
}

TEST(Compiler, StagesOnOneActorHandOverInPlace) {
  // Interleaved on 2 actors with 4 stages: stages 0 and 2 share actor 0, so
  // only edges between actors become transfers.
  absl::StatusOr<ir::TrainStep> step = testing_harness::TinyMlp(4, 4);
  ASSERT_TRUE(step.ok());
  absl::StatusOr<CompiledStep> compiled = Compile(*step, MustGenerate("interleaved", 2, 4, 2));
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  // Forward edges 0->1, 1->2, 2->3 and the same backward cross actors: 3
  // activations and 3 gradients per microbatch in all.
  int32_t sends = 0;
  for (const ActorStats& stats : compiled->stats) sends += stats.sends;
  EXPECT_EQ(sends, 6 * 4);
}

TEST(Compiler, HashIsStableAndTracksTheSchedule) {
  absl::StatusOr<ir::TrainStep> step = testing_harness::TinyMlp(2, 4);
  ASSERT_TRUE(step.ok());
  absl::StatusOr<CompiledStep> first = Compile(*step, MustGenerate("1f1b", 2, 4));
  absl::StatusOr<CompiledStep> again = Compile(*step, MustGenerate("1f1b", 2, 4));
  absl::StatusOr<CompiledStep> other = Compile(*step, MustGenerate("gpipe", 2, 4));
  ASSERT_TRUE(first.ok() && again.ok() && other.ok());
  EXPECT_EQ(first->hash, again->hash);
  EXPECT_NE(first->hash, other->hash);
}

TEST(Compiler, DumpShowsEveryActorAndItsStaticPeak) {
  absl::StatusOr<ir::TrainStep> step = testing_harness::TinyMlp(2, 2);
  ASSERT_TRUE(step.ok());
  absl::StatusOr<CompiledStep> compiled = Compile(*step, MustGenerate("1f1b", 2, 2));
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  std::string dump = DumpCompiledStep(*compiled);
  EXPECT_THAT(dump, HasSubstr("schedule 1f1b, 2 actors, 2 stages, 2 microbatches"));
  EXPECT_THAT(dump, HasSubstr(std::to_string(compiled->programs[1].static_peak_bytes)));
  EXPECT_THAT(dump, HasSubstr("F1.0"));
}

TEST(CompilerErrors, ModelWithMoreStagesThanTheSchedulePlaces) {
  absl::StatusOr<ir::TrainStep> step = testing_harness::TinyMlp(4, 4);
  ASSERT_TRUE(step.ok());
  absl::Status status = Compile(*step, MustGenerate("1f1b", 2, 4)).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("model 'mlp' has 4 stages but schedule '1f1b' places 2 on 2 actors"));
  EXPECT_THAT(status.message(), HasSubstr("stages 2..3 of the model have no actor"));
}

TEST(CompilerErrors, AnAsynchronousScheduleRefusesAStepNotTracedForIt) {
  // pipedream's and 2bw's order is 1F1B's: a synchronous step would run
  // silently as synchronous. The compiler, which every driver (C++ Session,
  // tandem train, the Python stub) goes through, refuses it.
  absl::StatusOr<ir::TrainStep> step = testing_harness::TinyMlp(2, 4);
  ASSERT_TRUE(step.ok());
  for (const char* name : {"pipedream", "2bw"}) {
    absl::Status status = Compile(*step, MustGenerate(name, 2, 4)).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << name;
    EXPECT_THAT(status.message(), HasSubstr(absl::StrCat("schedule '", name, "' needs a step traced for it")));
    EXPECT_THAT(status.message(), HasSubstr("is traced to update after the whole step"));
  }
  EXPECT_TRUE(Compile(*step, MustGenerate("1f1b", 2, 4)).ok());
}

TEST(CompilerErrors, ScheduleOrderViolatingTheDataflowNamesActorAndTasks) {
  // Actor 1 runs the backward of microbatch 0 before its forward.
  constexpr char kText[] =
      "actors 2\nmicrobatches 1\n"
      "actor 0: F0.0 B0.0\n"
      "actor 1: B1.0 F1.0\n";
  absl::StatusOr<schedules::Schedule> schedule = schedules::ParseScheduleText(kText, "bad.sched");
  ASSERT_TRUE(schedule.ok()) << schedule.status();
  absl::StatusOr<ir::TrainStep> step = testing_harness::TinyMlp(2, 1);
  ASSERT_TRUE(step.ok());
  absl::Status status = Compile(*step, *schedule).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("actor 1"));
  EXPECT_THAT(status.message(), HasSubstr("B1.0"));
  EXPECT_THAT(status.message(), HasSubstr("F1.0"));
}

TEST(CompilerErrors, ForwardValueFlowingToAnEarlierStageNamesStagesActorsAndTasks) {
  absl::StatusOr<ir::TrainStep> step = testing_harness::TinyMlp(2, 2);
  ASSERT_TRUE(step.ok());
  // Move the loss's final reduction into stage 0: it then reads a stage-1
  // value in the forward.
  ir::ValueId loss = *step->microbatch.FindOutput("loss");
  step->microbatch.mutable_node(loss).stage = 0;
  absl::Status status = Compile(*step, MustGenerate("1f1b", 2, 2)).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("stage 0 (actor 0, task F0.m)"));
  EXPECT_THAT(status.message(), HasSubstr("of the later stage 1 (actor 1, task F1.m)"));
}

TEST(CompilerErrors, MicrobatchCountsMustAgree) {
  absl::StatusOr<ir::TrainStep> step = testing_harness::TinyMlp(2, 4);
  ASSERT_TRUE(step.ok());
  EXPECT_THAT(Compile(*step, MustGenerate("1f1b", 2, 8)).status().message(),
              HasSubstr("traced for 4 microbatches but schedule '1f1b' runs 8"));
}

TEST(CompilerErrors, ForwardOnlyStepRejectsBackwardTasks) {
  examples::MlpConfig config;
  config.num_stages = 2;
  config.num_layers = 2;
  absl::StatusOr<ir::TrainStep> step = TraceForwardStep("mlp", examples::MlpModel(config), {.num_microbatches = 2});
  ASSERT_TRUE(step.ok());
  EXPECT_THAT(Compile(*step, MustGenerate("1f1b", 2, 2)).status().message(),
              HasSubstr("is forward-only but actor 0 runs B0.0"));
  EXPECT_TRUE(Compile(*step, ForwardOnly(MustGenerate("1f1b", 2, 2))).ok());
}

}  // namespace
}  // namespace tandem::controller
