// FindElementwiseRuns: which consecutive elementwise nodes a backend may
// evaluate as one run under its rules (ir/elementwise_runs.h), and how an
// operand from outside a run is read (RepeatPeriod).
#include "ir/elementwise_runs.h"

#include <vector>

#include "gtest/gtest.h"
#include "ir/graph.h"
#include "ir/graph_builder.h"

namespace tandem::ir {
namespace {

using Members = std::vector<ValueId>;

std::vector<bool> All(const Graph& graph) { return std::vector<bool>(static_cast<size_t>(graph.size()), true); }

TEST(ElementwiseRuns, AChainIsOneRunThatScalarConstantsDoNotBreakAndOtherOpsEnd) {
  Graph graph("chain");
  GraphBuilder b(&graph);
  const SourceLocation here{"test", 1};
  const ValueId x = b.AddInput("x", "data", {DType::kF32, {4, 8}}, here);
  const ValueId y = b.AddInput("y", "data", {DType::kF32, {4, 8}}, here);
  const ValueId a = b.Add(OpKind::kAdd, {x, y}, {}, here);
  const ValueId two = b.AddConstant(2.0, {DType::kF32, {}}, here);
  const ValueId c = b.Add(OpKind::kMul, {a, two}, {}, here);
  const ValueId d = b.Add(OpKind::kExp, {c}, {}, here);
  const ValueId t = b.Add(OpKind::kTranspose, {d}, {{"permutation", std::vector<int64_t>{1, 0}}}, here);
  const ValueId e = b.Add(OpKind::kNeg, {t}, {}, here);  // alone after the transpose: no run
  const ValueId f = b.Add(OpKind::kSoftmax, {x}, {}, here);
  const ValueId g = b.Add(OpKind::kTanh, {f}, {}, here);
  const ValueId h = b.Add(OpKind::kSub, {g, x}, {}, here);
  graph.AddOutput("e", e);
  graph.AddOutput("h", h);
  ASSERT_TRUE(b.ok()) << b.status();

  const ElementwiseRuns runs = FindElementwiseRuns(graph, All(graph), {});
  ASSERT_EQ(runs.runs.size(), 2u);
  EXPECT_EQ(runs.runs[0], (Members{a, c, d}));
  EXPECT_EQ(runs.runs[1], (Members{g, h}));
  EXPECT_EQ(runs.role[a], ElementwiseRuns::kInsideRun);
  EXPECT_EQ(runs.role[c], ElementwiseRuns::kInsideRun);
  EXPECT_EQ(runs.role[d], 0);
  EXPECT_EQ(runs.role[h], 1);
  for (ValueId other : {x, y, two, t, e, f}) EXPECT_EQ(runs.role[other], ElementwiseRuns::kNotInRun) << other;

  // How the run's members read their operands: x and y, then a and the
  // constant, then c.
  const RunOperands operands = OperandsOf(graph, runs.runs[0]);
  EXPECT_EQ(operands.inputs, (std::vector<ValueId>{x, y, two}));
  EXPECT_EQ(operands.sources, (std::vector<std::vector<int32_t>>{{-1, -2}, {0, -3}, {1}}));

  // Nodes not needed are not members, and the run around them ends.
  std::vector<bool> needed = All(graph);
  needed[c] = false;
  needed[d] = false;
  EXPECT_EQ(FindElementwiseRuns(graph, needed, {}).runs, (std::vector<Members>{{g, h}}));
  // Too small to start a run.
  EXPECT_TRUE(FindElementwiseRuns(graph, All(graph), {.min_elements = 33}).runs.empty());
  EXPECT_EQ(FindElementwiseRuns(graph, All(graph), {.min_elements = 32}).runs.size(), 2u);
}

// An optimizer's update: the scalars it computes from the step number
// between its members (bias corrections) are evaluated as usual and leave
// the run whole; a scalar that reads a member (a norm) ends it.
TEST(ElementwiseRuns, ScalarsComputedBesideARunDoNotBreakItButOnesReadingItDo) {
  Graph graph("update");
  GraphBuilder b(&graph);
  const SourceLocation here{"test", 1};
  const ValueId p = b.AddInput("p", "parameter", {DType::kF32, {4, 8}}, here);
  const ValueId g = b.AddInput("g", "data", {DType::kF32, {4, 8}}, here);
  const ValueId step = b.AddInput("step", "data", {DType::kF32, {}}, here);
  const ValueId decay = b.AddConstant(0.9, {DType::kF32, {}}, here);
  const ValueId m = b.Add(OpKind::kMul, {g, decay}, {}, here);
  const ValueId scaled_step = b.Add(OpKind::kMul, {step, decay}, {}, here);  // one value, reads no member
  const ValueId correction = b.Add(OpKind::kExpm1, {scaled_step}, {}, here);
  const ValueId corrected = b.Add(OpKind::kDiv, {m, correction}, {}, here);
  const ValueId updated = b.Add(OpKind::kSub, {p, corrected}, {}, here);
  const ValueId norm = b.Add(OpKind::kReduceSum, {updated}, {{"axes", std::vector<int64_t>{0, 1}}}, here);
  const ValueId scale = b.Add(OpKind::kRsqrt, {norm}, {}, here);
  const ValueId normalized = b.Add(OpKind::kMul, {updated, scale}, {}, here);
  const ValueId shifted = b.Add(OpKind::kAdd, {normalized, p}, {}, here);
  graph.AddOutput("p", shifted);
  ASSERT_TRUE(b.ok()) << b.status();
  const ElementwiseRuns runs = FindElementwiseRuns(graph, All(graph), {});
  EXPECT_EQ(runs.runs, (std::vector<Members>{{m, corrected, updated}, {normalized, shifted}}));
  for (ValueId scalar : {scaled_step, correction, norm, scale}) {
    EXPECT_EQ(runs.role[scalar], ElementwiseRuns::kNotInRun) << scalar;
  }
}

TEST(ElementwiseRuns, ABiasJoinsOnlyWhereTheRulesAllowAndBf16Likewise) {
  for (const DType dtype : {DType::kF32, DType::kBF16}) {
    Graph graph("linear");
    GraphBuilder b(&graph);
    const SourceLocation here{"test", 1};
    const ValueId x = b.AddInput("x", "data", {dtype, {2, 3, 8}}, here);
    const ValueId w = b.AddInput("w", "parameter", {dtype, {8, 8}}, here);
    const ValueId bias = b.AddInput("b", "parameter", {dtype, {8}}, here);
    const ValueId product = b.Add(OpKind::kMatMul, {x, w}, {}, here);
    const ValueId biased = b.Add(OpKind::kAdd, {product, bias}, {}, here);
    const ValueId activated = b.Add(OpKind::kGelu, {biased}, {}, here);
    const ValueId residual = b.Add(OpKind::kAdd, {activated, x}, {}, here);
    graph.AddOutput("y", residual);
    ASSERT_TRUE(b.ok()) << b.status();
    const bool bf16 = dtype == DType::kBF16;
    // Without bias broadcasting the bias add stays out; GELU and the
    // residual add still make a run.
    EXPECT_EQ(FindElementwiseRuns(graph, All(graph), {.bf16 = true}).runs,
              (std::vector<Members>{{activated, residual}}));
    EXPECT_EQ(FindElementwiseRuns(graph, All(graph), {.bf16 = true, .bias = true}).runs,
              (std::vector<Members>{{biased, activated, residual}}));
    // f32-only rules leave a bf16 graph alone.
    EXPECT_EQ(FindElementwiseRuns(graph, All(graph), {.bias = true}).runs.empty(), bf16);
  }
}

TEST(ElementwiseRuns, ARunPastItsBoundsOnMembersOrInputsStartsTheNext) {
  Graph graph("long");
  GraphBuilder b(&graph);
  const SourceLocation here{"test", 1};
  std::vector<ValueId> inputs;
  for (const char* name : {"a", "b", "c", "d"}) inputs.push_back(b.AddInput(name, "data", {DType::kF32, {16}}, here));
  ValueId v = b.Add(OpKind::kAdd, {inputs[0], inputs[1]}, {}, here);  // inputs a, b
  const ValueId first = v;
  const ValueId second = v = b.Add(OpKind::kAdd, {v, inputs[2]}, {}, here);  // c
  const ValueId third = v = b.Add(OpKind::kAdd, {v, inputs[3]}, {}, here);   // d: a fourth input
  const ValueId fourth = v = b.Add(OpKind::kExp, {v}, {}, here);
  const ValueId fifth = v = b.Add(OpKind::kNeg, {v}, {}, here);
  graph.AddOutput("out", v);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(FindElementwiseRuns(graph, All(graph), {}).runs, (std::vector<Members>{{first, second, third, fourth, fifth}}));
  EXPECT_EQ(FindElementwiseRuns(graph, All(graph), {.max_members = 2}).runs,
            (std::vector<Members>{{first, second}, {third, fourth}}));  // fifth alone: no run
  EXPECT_EQ(FindElementwiseRuns(graph, All(graph), {.max_inputs = 3}).runs,
            (std::vector<Members>{{first, second}, {third, fourth, fifth}}));
}

TEST(ElementwiseRuns, AnOperandRepeatsByItsPeriod) {
  const Shape run = {4, 6, 8};
  EXPECT_EQ(RepeatPeriod(run, run, false), 192);
  EXPECT_EQ(RepeatPeriod({}, run, false), 1);
  EXPECT_EQ(RepeatPeriod({1, 1}, run, false), 1);
  EXPECT_EQ(RepeatPeriod({8}, run, false), -1);  // a bias, where the rules allow none
  EXPECT_EQ(RepeatPeriod({8}, run, true), 8);
  EXPECT_EQ(RepeatPeriod({1, 6, 8}, run, true), 48);
  EXPECT_EQ(RepeatPeriod({6, 8}, run, true), 48);
  EXPECT_EQ(RepeatPeriod({4, 1, 8}, run, true), -1);  // repeated along a middle axis
  EXPECT_EQ(RepeatPeriod({6}, run, true), -1);
  EXPECT_EQ(RepeatPeriod({2, 4, 6, 8}, run, true), -1);  // larger than the run
}

}  // namespace
}  // namespace tandem::ir
