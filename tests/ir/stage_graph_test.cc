// Stage graphs: the chain and DAGs, their checks, text form and the facts
// schedules read (predecessors, successors, longest path to the sink).
#include "ir/stage_graph.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::ir {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

TEST(StageGraph, EmptyEdgesAreTheChain) {
  const StageGraph chain(4, {});
  EXPECT_TRUE(chain.IsChain());
  EXPECT_EQ(chain, StageGraph::Chain(4));
  EXPECT_THAT(chain.predecessors(0), IsEmpty());
  EXPECT_THAT(chain.predecessors(2), ElementsAre(1));
  EXPECT_THAT(chain.successors(3), IsEmpty());
  for (int32_t s = 0; s < 4; ++s) EXPECT_EQ(chain.StagesToSink(s), 4 - s);
  EXPECT_THAT(chain.StoredEdges(), IsEmpty());
  EXPECT_THAT(chain.Edges(), ElementsAre(StageEdge{0, 1}, StageEdge{1, 2}, StageEdge{2, 3}));
}

TEST(StageGraph, TheChainWrittenOutIsStoredAsNoEdges) {
  const StageGraph written(3, {{1, 2}, {0, 1}});
  EXPECT_TRUE(written.IsChain());
  EXPECT_THAT(written.StoredEdges(), IsEmpty());
}

TEST(StageGraph, TwoBranchesIntoAMergeHaveTheMergeAsOnlySink) {
  // Left branch 0 -> 1, right branch 2, merged by 3.
  const StageGraph graph(4, {{0, 1}, {1, 3}, {2, 3}});
  EXPECT_FALSE(graph.IsChain());
  EXPECT_THAT(graph.predecessors(3), ElementsAre(1, 2));
  EXPECT_THAT(graph.successors(1), ElementsAre(3));
  EXPECT_THAT(graph.Sources(), ElementsAre(0, 2));
  EXPECT_THAT(graph.Sinks(), ElementsAre(3));
  EXPECT_EQ(graph.StagesToSink(0), 3);
  EXPECT_EQ(graph.StagesToSink(2), 2);
  EXPECT_EQ(graph.StagesToSink(3), 1);
  EXPECT_TRUE(graph.Reaches(0, 3));
  EXPECT_TRUE(graph.Reaches(2, 2));
  EXPECT_FALSE(graph.Reaches(0, 2));  // siblings
  EXPECT_FALSE(graph.Reaches(2, 1));
  EXPECT_FALSE(graph.Reaches(3, 0));  // against the edges
  EXPECT_EQ(graph.StoredEdges(), graph.Edges());
}

TEST(StageGraph, BadEdgesAreNamed) {
  EXPECT_THAT(CheckStageEdges(3, {{0, 3}}).message(), HasSubstr("stage edge 0->3 names a stage outside 0..2"));
  EXPECT_THAT(CheckStageEdges(3, {{2, 1}}).message(),
              HasSubstr("stage edge 2->1 does not go from a lower stage to a higher one"));
  EXPECT_THAT(CheckStageEdges(3, {{1, 1}}).message(), HasSubstr("1->1 does not go from a lower"));
  EXPECT_THAT(CheckStageEdges(3, {{0, 2}, {1, 2}, {0, 2}}).message(), HasSubstr("stage edge 0->2 appears twice"));
  EXPECT_TRUE(CheckStageEdges(3, {{0, 2}, {1, 2}}).ok());
}

TEST(StageGraph, GraphIgnoresEdgesTheCheckRefuses) {
  // Callers check first; a graph built anyway never indexes out of range.
  const StageGraph graph(2, {{0, 5}, {1, 0}, {0, 1}});
  EXPECT_THAT(graph.predecessors(1), ElementsAre(0));
  EXPECT_THAT(graph.predecessors(0), IsEmpty());
}

TEST(StageGraph, EdgesParseFromSpacesOrCommasAndPrintBack) {
  absl::StatusOr<std::vector<StageEdge>> edges = ParseStageEdges(" 0->2, 1->2\t2->3 ", 10);
  ASSERT_TRUE(edges.ok()) << edges.status();
  EXPECT_THAT(*edges, ElementsAre(StageEdge{0, 2}, StageEdge{1, 2}, StageEdge{2, 3}));
  EXPECT_EQ(FormatStageEdges(*edges), "0->2 1->2 2->3");
  EXPECT_THAT(*ParseStageEdges("", 10), IsEmpty());
}

TEST(StageGraph, MalformedEdgesAreErrorsNotAborts) {
  for (const char* text : {"0-2", "->2", "0->", "a->b", "0->2->3", "-1->2", "99999999999->1"}) {
    absl::StatusOr<std::vector<StageEdge>> edges = ParseStageEdges(text, 10);
    EXPECT_FALSE(edges.ok()) << text;
    EXPECT_THAT(edges.status().message(), HasSubstr("is not a stage edge: expected FROM->TO")) << text;
  }
  EXPECT_THAT(ParseStageEdges("0->1 0->2 1->2", 2).status().message(), HasSubstr("more than 2 stage edges"));
}

}  // namespace
}  // namespace tandem::ir
