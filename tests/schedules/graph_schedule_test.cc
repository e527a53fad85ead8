// Schedules over a stage DAG: the `stage-graph` statement, the validator's
// dataflow and deadlock witness, the graph generators, and the simulator's
// figures against the closed form of schedules/SIMULATION.md.
#include <algorithm>
#include <random>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "schedules/generators.h"
#include "schedules/simulator.h"
#include "schedules/text_format.h"
#include "schedules/validator.h"
#include "tests/schedules/test_schedules.h"

namespace tandem::schedules {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::StartsWith;
using testing::FromText;
using ir::StageEdge;

Schedule MustGenerate(const std::string& name, const GeneratorOptions& options) {
  absl::StatusOr<Schedule> schedule = Generate(name, options);
  EXPECT_TRUE(schedule.ok()) << schedule.status();
  return schedule.ok() ? *schedule : Schedule{};
}

// Two branches (stages 0 and 1) merged by stage 2, one stage per actor.
GeneratorOptions TwoBranches(int32_t microbatches) {
  return {.actors = 3, .microbatches = microbatches, .stage_edges = {{0, 2}, {1, 2}}};
}

TEST(StageGraphText, ParsesPrintsAndReparsesByteForByte) {
  const std::string text =
      "schedule graph-1f1b\nactors 3\nstages 3\nmicrobatches 1\nplacement loop\nstage-graph 0->2 1->2\n"
      "actor 0: F0.0 B0.0\nactor 1: F1.0 B1.0\nactor 2: F2.0 B2.0\n";
  const Schedule schedule = FromText(text);
  EXPECT_THAT(schedule.stage_edges, ElementsAre(StageEdge{0, 2}, StageEdge{1, 2}));
  EXPECT_EQ(PrintScheduleText(schedule), text);
  EXPECT_TRUE(Validate(schedule).ok()) << Validate(schedule);
}

TEST(StageGraphText, AChainWrittenOutPrintsWithoutAStageGraph) {
  const Schedule schedule = FromText(
      "actors 2\nmicrobatches 1\nstage-graph 0->1\nactor 0: F0.0 B0.0\nactor 1: F1.0 B1.0\n");
  EXPECT_THAT(schedule.stage_edges, IsEmpty());
  EXPECT_THAT(PrintScheduleText(schedule), ::testing::Not(HasSubstr("stage-graph")));
}

TEST(StageGraphText, BadEdgesAreErrorsAtTheirColumn) {
  struct Case {
    std::string line;
    std::string error;
  };
  for (const Case& c : std::vector<Case>{
           {"stage-graph 0->2 1->3", "test.sched:3:18: error: stage edge 1->3 names a stage outside 0..2"},
           {"stage-graph 0->2 2->1", "test.sched:3:18: error: stage edge 2->1 does not go from a lower stage"},
           {"stage-graph 0->2 0->2", "test.sched:3:18: error: stage edge 0->2 appears twice"},
           {"stage-graph 0=>2", "test.sched:3:13: error: expected a stage edge FROM->TO, e.g. 0->2, got '0=>2'"},
           {"stage-graph", "test.sched:3:12: error: expected stage edges after 'stage-graph'"},
       }) {
    absl::StatusOr<Schedule> schedule =
        ParseScheduleText("actors 3\nmicrobatches 1\n" + c.line + "\nactor 0: F0.0 B0.0\n", "test.sched");
    ASSERT_FALSE(schedule.ok()) << c.line;
    EXPECT_THAT(schedule.status().message(), HasSubstr(c.error)) << c.line;
  }
  absl::StatusOr<Schedule> twice =
      ParseScheduleText("actors 3\nmicrobatches 1\nstage-graph 0->2\nstage-graph 1->2\n", "test.sched");
  EXPECT_THAT(twice.status().message(), HasSubstr("test.sched:4:1: error: 'stage-graph' is already set on line 3"));
}

TEST(StageGraphValidation, AMergeNeedsEveryBranchFirst) {
  // The merge runs before one of its branches has produced its input.
  const Schedule schedule = FromText(
      "actors 2\nstages 3\nmicrobatches 1\nplacement 0 1 0\nstage-graph 0->2 1->2\n"
      "actor 0: F0.0 F2.0 B2.0 B0.0\nactor 1: F1.0 B1.0\n");
  EXPECT_TRUE(Validate(schedule).ok()) << Validate(schedule);
  // The same tasks where actor 1 waits for a gradient before its forward.
  const Schedule stuck = FromText(
      "actors 2\nstages 3\nmicrobatches 1\nplacement 0 1 0\nstage-graph 0->2 1->2\n"
      "actor 0: F0.0 F2.0 B2.0 B0.0\nactor 1: B1.0 F1.0\n");
  EXPECT_THAT(Validate(stuck).message(), HasSubstr("deadlock"));
}

TEST(StageGraphValidation, DeadlockWitnessNamesTheStageEdge) {
  // Actor 0 holds the left branch and the merge and runs F2.1 before F2.0;
  // actor 1 (the right branch) waits for B2.0 before it sends F1.1.
  const Schedule schedule = FromText(
      "actors 2\nstages 3\nmicrobatches 2\nplacement 0 1 0\nstage-graph 0->2 1->2\n"
      "actor 0: F0.0 F0.1 F2.1 F2.0 B2.0 B2.1 B0.0 B0.1\n"
      "actor 1: F1.0 B1.0 F1.1 B1.1\n");
  const absl::Status status = Validate(schedule);
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.message()), StartsWith("deadlock: "));
  EXPECT_THAT(status.message(), HasSubstr("actor 0: F2.1 (slot 2)"));
  EXPECT_THAT(status.message(), HasSubstr("(stage edge 1->2)"));
}

TEST(StageGraphValidation, InvalidEdgesInAHandBuiltScheduleAreNamed) {
  Schedule schedule = MustGenerate("graph-1f1b", TwoBranches(2));
  schedule.stage_edges = {{0, 2}, {2, 1}};
  EXPECT_THAT(Validate(schedule).message(), HasSubstr("stage-graph: stage edge 2->1 does not go from a lower"));
  EXPECT_FALSE(Simulate(schedule, CostModel{}).ok());
}

TEST(GraphGenerators, OnAChainTheyAreOneFOneBAndGPipe) {
  for (int32_t p = 1; p <= 6; ++p) {
    for (int32_t m = 1; m <= 9; ++m) {
      Schedule graph = MustGenerate("graph-1f1b", {.actors = p, .microbatches = m});
      Schedule chain = MustGenerate("1f1b", {.actors = p, .microbatches = m});
      EXPECT_EQ(graph.programs, chain.programs) << "p=" << p << " m=" << m;
      EXPECT_THAT(graph.stage_edges, IsEmpty());
      Schedule graph_gpipe = MustGenerate("graph-gpipe", {.actors = p, .microbatches = m});
      EXPECT_TRUE(Validate(graph_gpipe).ok());
      for (const std::vector<Slot>& program : graph_gpipe.programs) {
        // All forwards, then all backwards.
        const auto first_backward = std::find_if(program.begin(), program.end(), [](const Slot& slot) {
          return slot.tasks[0].kind == TaskKind::kBackward;
        });
        EXPECT_EQ(first_backward - program.begin(), m);
      }
    }
  }
}

TEST(GraphGenerators, RandomDagsGiveValidSchedulesThatKeepTheInFlightLimit) {
  std::mt19937 random(7);
  for (int trial = 0; trial < 200; ++trial) {
    const int32_t stages = 2 + static_cast<int32_t>(random() % 6);
    const int32_t microbatches = 1 + static_cast<int32_t>(random() % 8);
    std::vector<StageEdge> edges;
    for (int32_t to = 1; to < stages; ++to) {
      for (int32_t from = 0; from < to; ++from) {
        if (random() % 3 == 0 || (from == to - 1 && edges.empty())) edges.push_back({from, to});
      }
    }
    const GeneratorOptions options{.actors = stages, .microbatches = microbatches, .stage_edges = edges};
    const ir::StageGraph graph(stages, edges);
    for (const std::string name : {"graph-1f1b", "graph-gpipe"}) {
      const Schedule schedule = MustGenerate(name, options);
      ASSERT_TRUE(Validate(schedule).ok()) << name << " trial " << trial << "\n"
                                           << PrintScheduleText(schedule) << Validate(schedule);
      if (name != "graph-1f1b") continue;
      absl::StatusOr<SimulationResult> result = Simulate(schedule, CostModel{});
      ASSERT_TRUE(result.ok()) << result.status();
      for (int32_t s = 0; s < stages; ++s) {
        EXPECT_LE(result->per_actor[s].peak_activations, std::min(microbatches, graph.StagesToSink(s)))
            << "stage " << s << " trial " << trial;
      }
    }
  }
}

TEST(GraphGenerators, SeveralStagesPerActorGiveAValidScheduleOrAClearError) {
  std::mt19937 random(11);
  int generated = 0;
  for (int trial = 0; trial < 100; ++trial) {
    const int32_t stages = 3 + static_cast<int32_t>(random() % 5);
    const int32_t actors = 2 + static_cast<int32_t>(random() % (stages - 1));
    std::vector<StageEdge> edges;
    for (int32_t to = 1; to < stages; ++to) edges.push_back({static_cast<int32_t>(random() % to), to});
    std::vector<int32_t> placement(stages);
    for (int32_t s = 0; s < stages; ++s) placement[s] = s < actors ? s : static_cast<int32_t>(random() % actors);
    const GeneratorOptions options{
        .actors = actors, .microbatches = 4, .stage_edges = edges, .stage_actors = placement};
    ASSERT_TRUE(Validate(MustGenerate("graph-gpipe", options)).ok());
    absl::StatusOr<Schedule> schedule = Generate("graph-1f1b", options);
    if (schedule.ok()) {
      ++generated;
      EXPECT_TRUE(Validate(*schedule).ok()) << PrintScheduleText(*schedule);
    } else {
      EXPECT_THAT(schedule.status().message(), HasSubstr("graph-1f1b: the list schedule stalls"));
    }
  }
  EXPECT_GT(generated, 50);
}

TEST(GraphGenerators, BadArgumentsAreNamed) {
  EXPECT_THAT(Generate("graph-1f1b", {.actors = 3, .microbatches = 2, .stage_edges = {{0, 3}}}).status().message(),
              HasSubstr("graph-1f1b: stage edge 0->3 names a stage outside 0..2"));
  EXPECT_THAT(Generate("graph-gpipe", {.actors = 2, .microbatches = 2, .stage_actors = {0, 2}}).status().message(),
              HasSubstr("graph-gpipe: stage 1 is placed on actor 2, outside 0..1"));
  EXPECT_THAT(Generate("1f1b", {.actors = 3, .microbatches = 2, .stage_edges = {{0, 2}}}).status().message(),
              HasSubstr("use graph-gpipe or graph-1f1b"));
  EXPECT_THAT(Generate("graph-1f1b", {.actors = 3, .microbatches = 2, .virtual_stages = 2}).status().message(),
              HasSubstr("takes its stages from the stage graph"));
}

// schedules/SIMULATION.md, "Stage DAGs": two equal branches on two actors
// merged on a third: T = (M + 1)(f + b); the chain of the same stages:
// T = (M + 2)(f + b); peaks min(M, 2), min(M, 2), 1 against min(M, 3), 2, 1.
TEST(GraphSimulation, TwoEqualBranchesMatchTheClosedForm) {
  for (const auto& [f, b] : std::vector<std::pair<double, double>>{{1, 2}, {1, 1}, {0.5, 1.25}}) {
    for (int32_t m : {1, 2, 4, 8, 13}) {
      CostModel costs;
      costs.KindCost(TaskKind::kForward) = f;
      costs.KindCost(TaskKind::kBackward) = b;
      absl::StatusOr<SimulationResult> graph = Simulate(MustGenerate("graph-1f1b", TwoBranches(m)), costs);
      absl::StatusOr<SimulationResult> chain =
          Simulate(MustGenerate("1f1b", {.actors = 3, .microbatches = m}), costs);
      ASSERT_TRUE(graph.ok() && chain.ok());
      EXPECT_DOUBLE_EQ(graph->makespan, (m + 1) * (f + b)) << "M=" << m << " f=" << f << " b=" << b;
      EXPECT_DOUBLE_EQ(chain->makespan, (m + 2) * (f + b)) << "M=" << m;
      EXPECT_LT(graph->makespan, chain->makespan);
      EXPECT_DOUBLE_EQ(graph->per_actor[0].peak_activations, std::min(m, 2));
      EXPECT_DOUBLE_EQ(graph->per_actor[1].peak_activations, std::min(m, 2));
      EXPECT_DOUBLE_EQ(graph->per_actor[2].peak_activations, 1);
      EXPECT_DOUBLE_EQ(chain->per_actor[0].peak_activations, std::min(m, 3));
      EXPECT_DOUBLE_EQ(chain->per_actor[1].peak_activations, std::min(m, 2));
      // Each actor idles one (f + b) in the graph, two in the chain.
      EXPECT_NEAR(graph->per_actor[0].idle, f + b, 1e-9);
      EXPECT_NEAR(chain->per_actor[0].idle, 2 * (f + b), 1e-9);
    }
  }
}

TEST(GraphSimulation, AMergeWaitsForItsSlowerBranch) {
  // The right branch costs three times the left: the merge follows it.
  CostModel costs;
  costs.stage_cost[{TaskKind::kForward, 1}] = 3;
  costs.stage_cost[{TaskKind::kBackward, 1}] = 6;
  absl::StatusOr<SimulationResult> result = Simulate(MustGenerate("graph-1f1b", TwoBranches(1)), costs);
  ASSERT_TRUE(result.ok()) << result.status();
  // F1.0 [0,3], F2.0 [3,4], B2.0 [4,6], B1.0 [6,12].
  EXPECT_DOUBLE_EQ(result->slot_times[2][0].start, 3);
  EXPECT_DOUBLE_EQ(result->makespan, 12);
  EXPECT_DOUBLE_EQ(result->slot_times[0][1].start, 6);  // B0.0 after B2.0
}

TEST(GraphSimulation, AFanOutSendsOneTransferPerConsumerActor) {
  // Stage 0 feeds stages 1 and 2 on two other actors.
  CostModel costs;
  costs.link.alpha = 1;
  absl::StatusOr<SimulationResult> result = Simulate(
      MustGenerate("graph-gpipe", {.actors = 4, .microbatches = 1, .stage_edges = {{0, 1}, {0, 2}, {1, 3}, {2, 3}}}),
      costs);
  ASSERT_TRUE(result.ok()) << result.status();
  int from_stage_zero = 0;
  for (const Transfer& transfer : result->transfers) {
    if (transfer.producer == Task{TaskKind::kForward, StageId(0), Microbatch(0)}) ++from_stage_zero;
  }
  EXPECT_EQ(from_stage_zero, 2);
  // F0 [0,1]; sends to actors 1 and 2 one after the other: [1,2], [2,3].
  EXPECT_DOUBLE_EQ(result->slot_times[1][0].start, 2);
  EXPECT_DOUBLE_EQ(result->slot_times[2][0].start, 3);
}

}  // namespace
}  // namespace tandem::schedules
