// What every evaluator of graphs shares (backends/cpu/interpreter.h): when each
// value is released, and how a missing or mistyped input is reported.
#include <string>
#include <vector>

#include "backends/cpu/interpreter.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/graph_builder.h"
#include "ir/graph_plan.h"

namespace tandem::ir {
namespace {

using ::testing::ElementsAre;

// %0 x, %1 unused input, %2 = neg x, %3 = exp %2, %4 = x + %3; output %4.
Graph Chain() {
  Graph graph("chain");
  GraphBuilder builder(&graph);
  const TensorType type{DType::kF32, {2}};
  const ValueId x = builder.AddInput("x", InputRole::kData, type, {});
  builder.AddInput("unused", InputRole::kData, type, {});
  const ValueId negated = builder.Add(OpKind::kNeg, {x}, {}, {});
  const ValueId exp = builder.Add(OpKind::kExp, {negated}, {}, {});
  graph.AddOutput("y", builder.Add(OpKind::kAdd, {x, exp}, {}, {}));
  return graph;
}

TEST(GraphWalk, EachValueIsReleasedAfterItsLastReader) {
  const Graph graph = Chain();
  // x is read last by %4; nothing reads %1; the output lives to the end.
  EXPECT_THAT(LastUses(graph, graph.outputs()), ElementsAre(4, -1, 3, 4, 5));
  // Only %2 needed (as RunGraph with fewer outputs wanted): x's last
  // reader is %2, and %2 has none.
  const std::vector<bool> needed = {true, false, true, false, false};
  EXPECT_THAT(LastUses(graph, {}, &needed), ElementsAre(2, -1, -1, -1, -1));
}

TEST(GraphWalk, AMissingOrMistypedInputIsNamed) {
  const Graph graph = Chain();
  EXPECT_EQ(CheckInputValue(graph, 0, nullptr).message(), "graph @chain: no value for input 'x'");
  const TensorType wrong{DType::kF32, {3}};
  EXPECT_EQ(CheckInputValue(graph, 0, &wrong).message(), "graph @chain: input 'x' must be f32[2], got f32[3]");
  const TensorType right{DType::kF32, {2}};
  EXPECT_TRUE(CheckInputValue(graph, 0, &right).ok());
  // RunGraph reports exactly these.
  EXPECT_EQ(cpu::RunGraph(graph, {}).status().message(), "graph @chain: no value for input 'x'");
}

}  // namespace
}  // namespace tandem::ir
