// The measured trace of steps run on actor processes: well-formed Chrome /
// Perfetto JSON with every actor's compute, send and receive slices, its
// inputs and settling on the step track, one flow pair per transfer, and a
// cost model calibrated from it.
#include "controller/step_trace.h"

#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>

#include "controller/compiler.h"
#include "controller/local_launcher.h"
#include "controller/pipeline.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "schedules/generators.h"
#include "tests/controller/parity_harness.h"

namespace tandem::controller {
namespace {

TEST(StepTraceTest, MeasuredTraceHasEveryInstructionSliceAndOneFlowPairPerTransfer) {
  constexpr int32_t kActors = 2;
  constexpr int32_t kMicrobatches = 4;
  constexpr int kSteps = 2;
  absl::StatusOr<ir::TrainStep> step = testing_harness::TinyMlp(kActors, kMicrobatches);
  ASSERT_TRUE(step.ok()) << step.status();
  absl::StatusOr<schedules::Schedule> schedule =
      schedules::Generate("1f1b", {.actors = kActors, .microbatches = kMicrobatches});
  ASSERT_TRUE(schedule.ok());
  LocalLauncherOptions options;
  options.actor_binary = TANDEM_ACTOR_BINARY;
  options.shm_ring_bytes = int64_t{4} << 20;
  absl::StatusOr<std::unique_ptr<Pipeline>> pipeline = Pipeline::Create(
      *step, *schedule, ir::SeedSources(*step), std::make_unique<LocalLauncher>(std::move(options)));
  ASSERT_TRUE(pipeline.ok()) << pipeline.status();
  const CompiledStep& compiled = (*pipeline)->compiled();
  StepTrace trace(compiled);
  for (int s = 1; s <= kSteps; ++s) {
    absl::StatusOr<StepReport> report = (*pipeline)->Step(testing_harness::Batches(*step, s));
    ASSERT_TRUE(report.ok()) << report.status();
    trace.AddStep(*report);
  }
  EXPECT_EQ(trace.steps(), kSteps);

  // Expected per actor: its run, send and receive instructions, every step.
  std::map<int, std::map<int, int>> expected;  // pid -> tid -> slices
  int transfers = 0;
  for (const ir::ActorProgram& program : compiled.programs) {
    for (const ir::Instruction& instruction : program.instructions) {
      int tid = -1;
      if (instruction.kind == ir::InstructionKind::kRun) tid = 0;
      if (instruction.kind == ir::InstructionKind::kSend) tid = 1;
      if (instruction.kind == ir::InstructionKind::kReceive) tid = 2;
      if (tid >= 0) expected[program.actor][tid] += kSteps;
      if (tid == 1) transfers += kSteps;
    }
    // The step track: the inputs taken in and the settling, every step.
    expected[program.actor][static_cast<int>(schedules::TraceTrack::kStep)] = 2 * kSteps;
  }
  ASSERT_GT(transfers, 0);

  nlohmann::json json;
  ASSERT_NO_THROW(json = nlohmann::json::parse(trace.ToJson()));
  ASSERT_TRUE(json.contains("traceEvents"));
  std::map<int, std::map<int, int>> slices;
  std::map<int64_t, int> flow_starts, flow_ends;  // id -> count
  for (const nlohmann::json& event : json.at("traceEvents")) {
    const std::string phase = event.at("ph").get<std::string>();
    if (phase == "X") {
      ++slices[event.at("pid").get<int>()][event.at("tid").get<int>()];
      if (event.at("tid").get<int>() == static_cast<int>(schedules::TraceTrack::kStep)) {
        const std::string name = event.at("name").get<std::string>();
        EXPECT_TRUE(name == "inputs" || name == "settle") << name;
      }
      EXPECT_GE(event.at("ts").get<double>(), 0.0);
      EXPECT_GE(event.at("dur").get<double>(), 0.0);
    } else if (phase == "s") {
      ++flow_starts[event.at("id").get<int64_t>()];
    } else if (phase == "f") {
      ++flow_ends[event.at("id").get<int64_t>()];
    }
  }
  EXPECT_EQ(slices, expected);
  EXPECT_EQ(static_cast<int>(flow_starts.size()), transfers);
  EXPECT_EQ(flow_starts, flow_ends);
  for (const schedules::TraceFlow& flow : trace.builder().flows()) {
    EXPECT_LE(flow.from_us, flow.to_us + 1.0) << "a transfer arrived before it was sent";
  }

  // Every (kind, stage) the schedule runs has a measured, positive cost.
  schedules::CostModel costs = trace.CalibratedCosts();
  for (schedules::TaskKind kind : {schedules::TaskKind::kForward, schedules::TaskKind::kBackward}) {
    for (int32_t stage = 0; stage < kActors; ++stage) {
      auto cost = costs.stage_cost.find({kind, stage});
      ASSERT_NE(cost, costs.stage_cost.end()) << schedules::TaskKindLetter(kind) << stage;
      EXPECT_GT(cost->second, 0.0);
    }
  }
  for (double bubble : trace.MeasuredBubble()) {
    EXPECT_GE(bubble, 0.0);
    EXPECT_LT(bubble, 1.0);
  }
}

// The link's latency is calibrated on the receives that were already
// waiting when their send ended (their end is the message's arrival); a
// message that was there before its receive began shows only an upper
// bound and is left out. Timings made up, on a compiled 1F1B step: transfer
// k's send runs [k ms, k ms + 10 us]; when k is even its receive waits from
// before that and ends 100 us after the send, when odd it begins 500 us
// after the send and takes 20 us.
TEST(StepTraceTest, TheLinkLatencyIsTheTimeWaitingReceivesEndAfterTheirSends) {
  absl::StatusOr<ir::TrainStep> step = testing_harness::TinyMlp(2, 4);
  ASSERT_TRUE(step.ok()) << step.status();
  absl::StatusOr<schedules::Schedule> schedule = schedules::Generate("1f1b", {.actors = 2, .microbatches = 4});
  ASSERT_TRUE(schedule.ok()) << schedule.status();
  absl::StatusOr<CompiledStep> compiled = Compile(*step, *schedule);
  ASSERT_TRUE(compiled.ok()) << compiled.status();

  StepReport report;
  report.step = 1;
  report.origin_ns = {0, 0};
  report.timings.resize(2);
  // (sender, receiver, tag) -> the receive's instruction on the receiver.
  std::map<std::tuple<int32_t, int32_t, uint64_t>, int32_t> receives;
  for (const ir::ActorProgram& program : compiled->programs) {
    for (int32_t i = 0; i < static_cast<int32_t>(program.instructions.size()); ++i) {
      const ir::Instruction& instruction = program.instructions[i];
      if (instruction.kind == ir::InstructionKind::kReceive) {
        receives[{instruction.peer, program.actor, instruction.tag}] = i;
      }
    }
  }
  int64_t k = 0;
  for (const ir::ActorProgram& program : compiled->programs) {
    for (int32_t i = 0; i < static_cast<int32_t>(program.instructions.size()); ++i) {
      const ir::Instruction& instruction = program.instructions[i];
      if (instruction.kind != ir::InstructionKind::kSend) continue;
      const auto receive = receives.find({program.actor, instruction.peer, instruction.tag});
      ASSERT_NE(receive, receives.end());
      const int64_t send_start = (k + 1) * 1'000'000, send_end = send_start + 10'000;
      report.timings[program.actor].push_back({i, send_start, send_end - send_start});
      if (k % 2 == 0) {
        report.timings[instruction.peer].push_back({receive->second, send_start - 50'000, 160'000});
      } else {
        report.timings[instruction.peer].push_back({receive->second, send_end + 500'000, 20'000});
      }
      ++k;
    }
  }
  ASSERT_GE(k, 4);

  StepTrace trace(*compiled);
  EXPECT_EQ(trace.CalibratedCosts().link.latency, 0.0);  // nothing measured yet
  trace.AddStep(report);
  const schedules::CostModel costs = trace.CalibratedCosts();
  EXPECT_NEAR(costs.link.latency, 100.0, 1e-9);
  EXPECT_EQ(costs.link.alpha, 0.0);
  EXPECT_EQ(costs.link.beta, 0.0);
}

}  // namespace
}  // namespace tandem::controller
