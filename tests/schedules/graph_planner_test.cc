// Planning a model whose segments form a DAG (GraphPipe): the
// series-parallel decomposition of segment graphs, the partitions of one
// stage per actor it gives, the planner choosing a graph schedule where it
// beats every chain (and matching the closed form of schedules/SIMULATION.md),
// and the segment and stage graphs in cost and plan files.
#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "schedules/cost_file.h"
#include "schedules/graph_partition.h"
#include "schedules/plan_file.h"
#include "schedules/planner.h"
#include "schedules/series_parallel.h"
#include "tests/schedules/test_cost_files.h"

namespace tandem::schedules {
namespace {

using ::testing::HasSubstr;
using testing::Segments;
using Kind = SeriesParallel::Kind;

ir::StageGraph Graph(int32_t n, const std::string& edges) {
  absl::StatusOr<std::vector<ir::StageEdge>> parsed = ir::ParseStageEdges(edges, 1 << 16);
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_TRUE(ir::CheckStageEdges(n, *parsed).ok()) << edges;
  return ir::StageGraph(n, *parsed);
}

// Towers of `left` and `right` segments into a head of `head`, numbered in
// that order (as the two-tower example model traces them).
std::string TowerEdges(int32_t left, int32_t right, int32_t head) {
  std::vector<ir::StageEdge> edges;
  for (int32_t s = 0; s + 1 < left; ++s) edges.push_back({s, s + 1});
  for (int32_t s = left; s + 1 < left + right; ++s) edges.push_back({s, s + 1});
  edges.push_back({left - 1, left + right});
  edges.push_back({left + right - 1, left + right});
  for (int32_t s = left + right; s + 1 < left + right + head; ++s) edges.push_back({s, s + 1});
  return ir::FormatStageEdges(edges);
}

CostFile TowerCosts(int32_t left, int32_t right, int32_t head, double seconds = 1.0) {
  CostFile costs = Segments(std::vector<double>(left + right + head, seconds));
  costs.segment_edges = Graph(left + right + head, TowerEdges(left, right, head)).StoredEdges();
  return costs;
}

TEST(SeriesParallel, TwoTowersIntoAHeadAreASeriesOfBranchesAndARun) {
  const SeriesParallel tree = DecomposeSeriesParallel(Graph(10, TowerEdges(4, 3, 3)));
  EXPECT_EQ(tree.Describe(), "S(P(R0-3 R4-6) R7-9)");
  ASSERT_EQ(tree.Runs().size(), 3u);
  EXPECT_EQ(tree.Runs()[1]->first, 4);
  EXPECT_EQ(tree.Runs()[1]->end, 7);
}

TEST(SeriesParallel, AChainIsOneRunAndAForkJoinNestsInsideASeries) {
  EXPECT_EQ(DecomposeSeriesParallel(ir::StageGraph::Chain(6)).Describe(), "R0-5");
  EXPECT_EQ(DecomposeSeriesParallel(ir::StageGraph::Chain(1)).Describe(), "R0");
  // 0 forks into 1 and 2, which join at 3.
  EXPECT_EQ(DecomposeSeriesParallel(Graph(5, "0->1 0->2 1->3 2->3 3->4")).Describe(), "S(R0 P(R1 R2) R3-4)");
  // Branches within a branch.
  EXPECT_EQ(DecomposeSeriesParallel(Graph(6, "0->1 0->2 1->3 2->3 3->5 4->5")).Describe(),
            "S(P(S(R0 P(R1 R2) R3) R4) R5)");
}

TEST(SeriesParallel, WhatIsNotSeriesParallelRunsInOrder) {
  // The "N": 0 -> 1 -> 2 -> 3 with 0 -> 2 and 1 -> 3 has no cut that all
  // its dataflow passes through.
  EXPECT_EQ(DecomposeSeriesParallel(Graph(4, "0->1 0->2 1->2 1->3 2->3")).Describe(), "R0-3");
  // Branches whose segments interleave (0, 2 and 1, 3) are not contiguous.
  EXPECT_EQ(DecomposeSeriesParallel(Graph(5, "0->2 1->3 2->4 3->4")).Describe(), "R0-4");
}

// The parts of `node` cover its range in order, and the branches of a
// parallel node have no edge between them.
void ExpectWellFormed(const SeriesParallel& node, const ir::StageGraph& graph) {
  if (node.kind == Kind::kRun) return;
  ASSERT_GE(node.children.size(), 2u);
  int32_t covered = node.first;
  for (const SeriesParallel& child : node.children) {
    EXPECT_EQ(child.first, covered);
    EXPECT_NE(child.kind, node.kind);
    covered = child.end;
    ExpectWellFormed(child, graph);
  }
  EXPECT_EQ(covered, node.end);
  if (node.kind != Kind::kParallel) return;
  for (size_t a = 0; a < node.children.size(); ++a) {
    for (size_t b = a + 1; b < node.children.size(); ++b) {
      for (int32_t u = node.children[a].first; u < node.children[a].end; ++u) {
        for (int32_t v : graph.successors(u)) {
          EXPECT_FALSE(v >= node.children[b].first && v < node.children[b].end) << u << "->" << v;
        }
      }
    }
  }
}

TEST(SeriesParallel, RandomDagsDecomposeIntoRangesThatCoverThemInOrder) {
  std::mt19937 random(7);
  for (int trial = 0; trial < 300; ++trial) {
    const int32_t n = 1 + static_cast<int32_t>(random() % 24);
    std::vector<ir::StageEdge> edges;
    for (int32_t to = 1; to < n; ++to) {
      for (int32_t from = 0; from < to; ++from) {
        if (random() % 5 == 0) edges.push_back({from, to});
      }
    }
    const ir::StageGraph graph(n, edges);
    const SeriesParallel tree = DecomposeSeriesParallel(graph);
    EXPECT_EQ(tree.first, 0);
    EXPECT_EQ(tree.end, n);
    ExpectWellFormed(tree, graph);
    int32_t covered = 0;
    for (const SeriesParallel* run : tree.Runs()) {
      EXPECT_EQ(run->first, covered);
      covered = run->end;
    }
    EXPECT_EQ(covered, n);
  }
}

TEST(SeriesParallel, ALongChainOfForkJoinsDecomposesQuickly) {
  // 1365 diamonds in a row: each level of nesting is linear.
  std::vector<ir::StageEdge> edges;
  const int32_t diamonds = 1365;
  for (int32_t d = 0; d < diamonds; ++d) {
    const int32_t a = 3 * d;
    edges.insert(edges.end(), {{a, a + 1}, {a, a + 2}, {a + 1, a + 3}, {a + 2, a + 3}});
  }
  const SeriesParallel tree = DecomposeSeriesParallel(ir::StageGraph(3 * diamonds + 1, edges));
  EXPECT_EQ(tree.kind, Kind::kSeries);
  EXPECT_EQ(tree.Runs().size(), 3u * diamonds + 1);
}

TEST(GraphPartition, ThreeActorsGiveEachTowerAndTheHeadAStage) {
  absl::StatusOr<GraphPartitions> found = PartitionSegmentGraph(TowerCosts(4, 3, 3), {.stages = 3, .microbatches = 8});
  ASSERT_TRUE(found.ok()) << found.status();
  ASSERT_EQ(found->partitions.size(), 1u);
  const GraphPartition& partition = found->partitions[0];
  EXPECT_EQ(partition.run_stages, (std::vector<int32_t>{1, 1, 1}));
  ASSERT_EQ(partition.stages.size(), 3u);
  EXPECT_EQ(partition.stages[1].first_segment, 4);
  EXPECT_EQ(partition.stages[1].end_segment, 7);
  EXPECT_EQ(partition.stage_edges, (std::vector<ir::StageEdge>{{0, 2}, {1, 2}}));
}

TEST(GraphPartition, EverySplitOfTheActorsAmongTheRunsIsACandidate) {
  absl::StatusOr<GraphPartitions> found = PartitionSegmentGraph(TowerCosts(4, 3, 3), {.stages = 5, .microbatches = 8});
  ASSERT_TRUE(found.ok()) << found.status();
  std::set<std::vector<int32_t>> splits;
  for (const GraphPartition& partition : found->partitions) {
    splits.insert(partition.run_stages);
    EXPECT_EQ(partition.stages.size(), 5u);
  }
  // 5 stages over three runs, each at least one: the compositions of 5 into 3.
  EXPECT_EQ(splits, (std::set<std::vector<int32_t>>{
                        {3, 1, 1}, {1, 3, 1}, {1, 1, 3}, {2, 2, 1}, {2, 1, 2}, {1, 2, 2}}));
  for (const GraphPartition& partition : found->partitions) {
    if (partition.run_stages != std::vector<int32_t>{2, 1, 2}) continue;
    // [0,2) [2,4) | [4,7) | [7,8) [8,10) or similar: the left tower's two
    // stages in a chain, both towers into the head's first stage.
    EXPECT_EQ(partition.stage_edges, (std::vector<ir::StageEdge>{{0, 1}, {1, 3}, {2, 3}, {3, 4}}));
  }
}

TEST(GraphPartition, AStageKeepsAsManyMicrobatchesAsStagesOnItsLongestPathToTheLast) {
  // Stash 100 and state 10 + 10 per segment, working set 5.
  absl::StatusOr<GraphPartitions> found =
      PartitionSegmentGraph(TowerCosts(2, 2, 2), {.stages = 4, .microbatches = 8});
  ASSERT_TRUE(found.ok()) << found.status();
  for (const GraphPartition& partition : found->partitions) {
    if (partition.run_stages != std::vector<int32_t>{1, 1, 2}) continue;
    // A tower's stage: 3 stages to the last (itself and the head's two).
    EXPECT_EQ(partition.stages[0].peak_bytes, 2 * 20 + 3 * 2 * 100 + 5);
    EXPECT_EQ(partition.stages[1].peak_bytes, 2 * 20 + 3 * 2 * 100 + 5);
    EXPECT_EQ(partition.stages[2].peak_bytes, 20 + 2 * 100 + 5);
    EXPECT_EQ(partition.stages[3].peak_bytes, 20 + 1 * 100 + 5);
    return;
  }
  FAIL() << "no partition gives the head two stages";
}

TEST(GraphPartition, FewerStagesThanBranchesIsAnErrorNamingTheGraph) {
  absl::Status status = PartitionSegmentGraph(TowerCosts(4, 3, 3), {.stages = 2, .microbatches = 8}).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("S(P(R0-3 R4-6) R7-9) takes 3 to 10 stages"));
}

TEST(GraphPlanner, TwoEqualTowersAndAnEqualHeadOnThreeActorsPlanAGraphThatBeatsTheChains) {
  // Towers of 4 segments and a head of 4, 1 s each (F 1/3, B 2/3): the DAG
  // [tower | tower | head] takes (M + 1)(f + b) = 9 * 4 s for M = 8 (the
  // closed form of SIMULATION.md); the best chain, 12 segments in three
  // stages of 4, (M + 2)(f + b) = 40 s under 1F1B. (ZB-H1 splits the
  // backward, which no graph schedule does yet: it is left out.)
  const CostFile costs = TowerCosts(4, 4, 4);
  PlannerOptions options{.actors = 3, .global_batch = 8, .schedules = {"gpipe", "1f1b", "graph-1f1b", "graph-gpipe"}};
  absl::StatusOr<PlanSearch> search = SearchPlans(costs, options);
  ASSERT_TRUE(search.ok()) << search.status();
  absl::StatusOr<Candidate> chosen = ChosenCandidate(*search, costs, options);
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  // graph-gpipe ties with it here (as GPipe and 1F1B do on a chain); the
  // order searched breaks the tie.
  EXPECT_EQ(chosen->plan.schedule, "graph-1f1b");
  EXPECT_EQ(chosen->plan.microbatches, 8);
  EXPECT_EQ(chosen->plan.stage_edges, (std::vector<ir::StageEdge>{{0, 2}, {1, 2}}));
  EXPECT_EQ(chosen->Describe(costs), "[s0..s3 | s4..s7 | s8..s11] graph 0->2 1->2");
  EXPECT_NEAR(chosen->plan.predicted_step_s, 36.0, 1e-9);
  double best_chain = 1e300;
  for (const Candidate& c : search->candidates) {
    if (c.plan.stage_edges.empty() && c.plan.microbatches == 8 && c.plan.schedule == "1f1b") {
      best_chain = std::min(best_chain, c.plan.predicted_step_s);
    }
  }
  EXPECT_NEAR(best_chain, 40.0, 1e-9);
}

TEST(GraphPlanner, AHeavyHeadMakesTheChainFasterAndThePlannerSaysSo) {
  // Towers of one segment and a head of 10: a graph leaves two actors
  // idle behind the head, a chain can cut the head.
  CostFile costs = Segments({1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1});
  costs.segment_edges = Graph(12, TowerEdges(1, 1, 10)).StoredEdges();
  PlannerOptions options{.actors = 3, .global_batch = 8, .schedules = {"1f1b", "graph-1f1b"}};
  absl::StatusOr<PlanSearch> search = SearchPlans(costs, options);
  ASSERT_TRUE(search.ok()) << search.status();
  absl::StatusOr<Candidate> chosen = ChosenCandidate(*search, costs, options);
  ASSERT_TRUE(chosen.ok());
  EXPECT_EQ(chosen->plan.schedule, "1f1b");
  bool graph_evaluated = false;
  for (const Candidate& c : search->candidates) graph_evaluated = graph_evaluated || c.plan.schedule == "graph-1f1b";
  EXPECT_TRUE(graph_evaluated);
}

TEST(GraphPlanner, AChainCostFileSkipsTheGraphSchedulesAndSaysWhy) {
  const CostFile costs = Segments({1, 1, 1, 1});
  absl::StatusOr<PlanSearch> search = SearchPlans(costs, {.actors = 2, .global_batch = 4});
  ASSERT_TRUE(search.ok()) << search.status();
  for (const Candidate& c : search->candidates) EXPECT_TRUE(c.plan.stage_edges.empty()) << c.plan.schedule;
  EXPECT_THAT(search->skipped, ::testing::Contains(HasSubstr("graph-1f1b: the segments form a chain")));
}

TEST(GraphPlanner, TooFewActorsForTheBranchesLeaveOnlyTheChains) {
  const CostFile costs = TowerCosts(2, 2, 2);
  absl::StatusOr<PlanSearch> search = SearchPlans(costs, {.actors = 2, .global_batch = 4});
  ASSERT_TRUE(search.ok()) << search.status();
  EXPECT_THAT(search->skipped, ::testing::Contains(HasSubstr("takes 3 to 6 stages")));
  EXPECT_FALSE(search->candidates.empty());
}

TEST(GraphPlanner, AGraphPlanRoundTripsAndGeneratesItsScheduleOverItsStageGraph) {
  const CostFile costs = TowerCosts(4, 4, 4);
  PlannerOptions options{.actors = 3, .global_batch = 8, .schedules = {"graph-1f1b"}};
  absl::StatusOr<PlanSearch> search = SearchPlans(costs, options);
  ASSERT_TRUE(search.ok()) << search.status();
  absl::StatusOr<Candidate> chosen = ChosenCandidate(*search, costs, options);
  ASSERT_TRUE(chosen.ok());
  const Plan plan = chosen->plan;
  const std::string text = FormatPlanFile(plan);
  EXPECT_THAT(text, HasSubstr(R"("stage_graph":"0->2 1->2")"));
  absl::StatusOr<Plan> read = ParsePlanFile(text);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, plan);
  absl::StatusOr<Schedule> schedule = PlanSchedule(*read);
  ASSERT_TRUE(schedule.ok()) << schedule.status();
  EXPECT_EQ(schedule->stage_edges, (std::vector<ir::StageEdge>{{0, 2}, {1, 2}}));
  // The same stages evaluated by hand give the search's prediction.
  std::vector<PlanStage> stages;
  for (const PlanStage& s : chosen->plan.stages) stages.push_back({s.first_segment, s.end_segment, s.remat});
  absl::StatusOr<Candidate> again =
      EvaluateCandidate({costs}, options, "graph-1f1b", chosen->plan.microbatches, stages, chosen->plan.stage_edges);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_DOUBLE_EQ(again->plan.predicted_step_s, chosen->plan.predicted_step_s);
}

std::string GraphPlanText(const std::string& graph) {
  return absl::StrCat(R"({"format":"tandem-plan","version":1,"model":"m","device":"cpu","actors":3,)",
                      R"("data_parallel":1,"schedule":"graph-1f1b","virtual_stages":1,"microbatches":4,)",
                      R"("microbatch_size":2,"segments":3,"memory_cap":0,"stages":[)",
                      R"({"segments":[0,1],"remat":false,"actor":0},{"segments":[1,2],"remat":false,"actor":1},)",
                      R"({"segments":[2,3],"remat":false,"actor":2}],"stage_graph":)", graph, "}");
}

TEST(GraphPlanner, BadStageGraphsInPlanFilesAreErrorsNamingTheField) {
  ASSERT_TRUE(ParsePlanFile(GraphPlanText(R"("0->2 1->2")")).ok());
  EXPECT_THAT(ParsePlanFile(GraphPlanText(R"("0->3")")).status().message(),
              HasSubstr("stage_graph: stage edge 0->3 names a stage outside 0..2"));
  EXPECT_THAT(ParsePlanFile(GraphPlanText(R"("2->1")")).status().message(),
              HasSubstr("does not go from a lower stage to a higher one"));
  EXPECT_THAT(ParsePlanFile(GraphPlanText(R"("0=>2")")).status().message(), HasSubstr("is not a stage edge"));
  EXPECT_THAT(ParsePlanFile(GraphPlanText("7")).status().message(), HasSubstr("'stage_graph' must be a string"));
  // A chain written out is the chain.
  absl::StatusOr<Plan> chain = ParsePlanFile(GraphPlanText(R"("0->1 1->2")"));
  ASSERT_TRUE(chain.ok());
  EXPECT_TRUE(chain->stage_edges.empty());
}

TEST(GraphPlanner, ACostFilesSegmentGraphRoundTripsAndBadOnesAreErrors) {
  const CostFile costs = TowerCosts(2, 1, 1);
  const std::string text = FormatCostFile(costs);
  EXPECT_THAT(text, HasSubstr(R"("segment_graph":"0->1 1->3 2->3")"));
  absl::StatusOr<CostFile> read = ParseCostFile(text);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, costs);
  std::string bad = text;
  bad.replace(bad.find("0->1 1->3 2->3"), 14, "0->1 1->9 2->3");
  EXPECT_THAT(ParseCostFile(bad).status().message(),
              HasSubstr("cost file: segment_graph: stage edge 1->9 names a stage outside 0..3"));
  // No segment graph: the chain, written without one.
  EXPECT_THAT(FormatCostFile(Segments({1, 1})), ::testing::Not(HasSubstr("segment_graph")));
}

}  // namespace
}  // namespace tandem::schedules
