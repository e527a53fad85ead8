// Tracing branches (Tracer::Branch): the stage DAG the markers describe,
// the errors naming the user's line when they do not describe one, and the
// stage graph's text form.
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/trace.h"
#include "ir/verifier.h"

namespace tandem {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ir::StageEdge;

std::string Here(int line) { return absl::StrCat("ir/branch_trace_test.cc:", line); }

absl::StatusOr<ir::TrainStep> Trace(const ModelFunction& model) { return TraceTrainStep("m", model, Sgd({})); }

Tensor Layer(Tracer& t, const std::string& name, const Tensor& x) {
  return tanh(matmul(x, t.Parameter(name, {4, 4}, init::Normal(0.5))));
}

// Two towers over two inputs, merged by a head: the model the API is for.
ModelFunction TwoTowers(int left_stages) {
  return [left_stages](Tracer& t) {
    Tensor a = t.Input("a", {ir::DType::kF32, {2, 4}});
    Tensor b = t.Input("b", {ir::DType::kF32, {2, 4}});
    {
      auto branch = t.Branch("left");
      for (int s = 0; s < left_stages; ++s) {
        if (s > 0) a = pipeline_yield(a);
        a = Layer(t, absl::StrCat("l", s), a);
      }
    }
    {
      auto branch = t.Branch("right");
      b = Layer(t, "r", b);
    }
    return mean(Layer(t, "head", a + b));
  };
}

TEST(BranchTrace, TwoTowersMergeIntoAHead) {
  absl::StatusOr<ir::TrainStep> step = Trace(TwoTowers(2));
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(step->num_stages, 4);
  EXPECT_THAT(step->stage_edges, ElementsAre(StageEdge{0, 1}, StageEdge{1, 3}, StageEdge{2, 3}));
  // Every op is in the stage its branch gave it.
  for (const ir::Node& node : step->microbatch.nodes()) {
    if (node.op == ir::OpKind::kInput && node.attributes.GetString("name") == "l1") {
      EXPECT_EQ(node.stage, 1);
    }
  }
}

TEST(BranchTrace, AChainWithoutBranchesStoresNoEdges) {
  absl::StatusOr<ir::TrainStep> step = Trace([](Tracer& t) {
    Tensor x = t.Input("x", {ir::DType::kF32, {2, 4}});
    x = pipeline_yield(Layer(t, "a", x));
    return mean(Layer(t, "b", x));
  });
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(step->num_stages, 2);
  EXPECT_THAT(step->stage_edges, IsEmpty());
}

TEST(BranchTrace, BranchesAfterOpsForkFromThatStage) {
  absl::StatusOr<ir::TrainStep> step = Trace([](Tracer& t) {
    Tensor x = Layer(t, "stem", t.Input("x", {ir::DType::kF32, {2, 4}}));  // stage 0
    Tensor a, b;
    {
      auto branch = t.Branch("a");
      a = Layer(t, "a", x);  // stage 1
    }
    {
      auto branch = t.Branch("b");
      b = Layer(t, "b", x);  // stage 2
    }
    return mean(a * b);  // stage 3
  });
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_THAT(step->stage_edges,
              ElementsAre(StageEdge{0, 1}, StageEdge{0, 2}, StageEdge{1, 3}, StageEdge{2, 3}));
}

TEST(BranchTrace, BranchesAfterAYieldForkFromTheClosedStage) {
  absl::StatusOr<ir::TrainStep> step = Trace([](Tracer& t) {
    Tensor x = pipeline_yield(Layer(t, "stem", t.Input("x", {ir::DType::kF32, {2, 4}})));
    Tensor a, b;
    {
      auto branch = t.Branch("a");
      a = Layer(t, "a", x);
    }
    {
      auto branch = t.Branch("b");
      b = Layer(t, "b", x);
    }
    return mean(a * b);
  });
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(step->num_stages, 4);  // no empty stage is left behind by the yield
  EXPECT_THAT(step->stage_edges,
              ElementsAre(StageEdge{0, 1}, StageEdge{0, 2}, StageEdge{1, 3}, StageEdge{2, 3}));
}

TEST(BranchTrace, NestedBranchesEndingUnmergedMergeWithTheOuterHead) {
  absl::StatusOr<ir::TrainStep> step = Trace([](Tracer& t) {
    Tensor x = t.Input("x", {ir::DType::kF32, {2, 4}});
    Tensor a1, a2, b;
    {
      auto outer = t.Branch("a");
      Tensor h = Layer(t, "a", x);  // stage 0
      {
        auto inner = t.Branch("a1");
        a1 = Layer(t, "a1", h);  // stage 1
      }
      {
        auto inner = t.Branch("a2");
        a2 = Layer(t, "a2", h);  // stage 2
      }
    }
    {
      auto outer = t.Branch("b");
      b = Layer(t, "b", x);  // stage 3
    }
    return mean(a1 + a2 + b);  // stage 4, fed by 1, 2 and 3
  });
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(step->num_stages, 5);
  EXPECT_THAT(step->stage_edges, ElementsAre(StageEdge{0, 1}, StageEdge{0, 2}, StageEdge{1, 4}, StageEdge{2, 4},
                                             StageEdge{3, 4}));
}

TEST(BranchTrace, ReadingASiblingBranchNamesTheLineAndTheBranches) {
  int line = 0;
  absl::StatusOr<ir::TrainStep> step = Trace([&](Tracer& t) {
    Tensor x = t.Input("x", {ir::DType::kF32, {2, 4}});
    Tensor left;
    {
      auto branch = t.Branch("left");
      left = Layer(t, "l", x);
    }
    Tensor right;
    {
      auto branch = t.Branch("right");
      right = Layer(t, "r", x);
      line = __LINE__ + 1;
      right = right * left;
    }
    return mean(left + right);
  });
  ASSERT_FALSE(step.ok());
  EXPECT_THAT(step.status().message(), HasSubstr(Here(line)));
  EXPECT_THAT(step.status().message(),
              HasSubstr("mul in stage 1 (branch right) reads a value of stage 0 (branch left)"));
  EXPECT_THAT(step.status().message(), HasSubstr("does not feed stage 1 (branch right)"));
}

TEST(BranchTrace, AnEmptyBranchIsAnErrorAtItsLine) {
  int line = 0;
  absl::StatusOr<ir::TrainStep> step = Trace([&](Tracer& t) {
    Tensor a = Layer(t, "a", t.Input("x", {ir::DType::kF32, {2, 4}}));
    {
      line = __LINE__ + 1;
      auto branch = t.Branch("nothing");
    }
    return mean(a);
  });
  ASSERT_FALSE(step.ok());
  EXPECT_THAT(step.status().message(), HasSubstr(Here(line)));
  EXPECT_THAT(step.status().message(), HasSubstr("branch 'nothing' has no ops"));
}

TEST(BranchTrace, ABranchEndingWithAYieldIsAnError) {
  int line = 0;
  absl::StatusOr<ir::TrainStep> step = Trace([&](Tracer& t) {
    Tensor a = t.Input("x", {ir::DType::kF32, {2, 4}});
    {
      line = __LINE__ + 1;
      auto branch = t.Branch("left");
      a = pipeline_yield(Layer(t, "a", a));
    }
    return mean(a);
  });
  ASSERT_FALSE(step.ok());
  EXPECT_THAT(step.status().message(), HasSubstr(Here(line)));
  EXPECT_THAT(step.status().message(), HasSubstr("branch 'left' ends with an empty stage"));
}

TEST(BranchTrace, BranchesNeverMergedLeaveAnEmptyStage) {
  absl::StatusOr<ir::TrainStep> step = Trace([&](Tracer& t) {
    Tensor x = t.Input("x", {ir::DType::kF32, {2, 4}});
    Tensor loss;
    {
      auto branch = t.Branch("left");
      loss = mean(Layer(t, "l", x));
    }
    {
      auto branch = t.Branch("right");
      Layer(t, "r", x);
    }
    return loss;  // computed inside a branch: nothing merges them
  });
  ASSERT_FALSE(step.ok());
  EXPECT_THAT(step.status().message(), HasSubstr("stage 2 has no ops"));
  EXPECT_THAT(step.status().message(), HasSubstr("merge branches with an op after the last one closes"));
}

TEST(BranchTrace, AnEmptyBranchNameIsAnError) {
  int line = 0;
  absl::StatusOr<ir::TrainStep> step = Trace([&](Tracer& t) {
    line = __LINE__ + 1;
    auto branch = t.Branch("");
    return mean(Layer(t, "a", t.Input("a", {ir::DType::kF32, {2, 4}})));
  });
  ASSERT_FALSE(step.ok());
  EXPECT_THAT(step.status().message(), HasSubstr(Here(line)));
  EXPECT_THAT(step.status().message(), HasSubstr("empty branch name"));
}

TEST(BranchTrace, TheStageGraphSurvivesTheTextForm) {
  absl::StatusOr<ir::TrainStep> step = Trace(TwoTowers(2));
  ASSERT_TRUE(step.ok()) << step.status();
  const std::string text = ir::PrintTrainStep(*step);
  EXPECT_THAT(text, HasSubstr("stages=4 stage_graph=\"0->1 1->3 2->3\""));
  absl::StatusOr<ir::TrainStep> parsed = ir::ParseTrainStep(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(*parsed, *step);
}

TEST(BranchTrace, AStageGraphTheDataflowDoesNotFollowIsRefused) {
  absl::StatusOr<ir::TrainStep> step = Trace(TwoTowers(1));
  ASSERT_TRUE(step.ok()) << step.status();
  // Claim the head (stage 2) is fed by the left tower only.
  std::string text = ir::PrintTrainStep(*step);
  const std::string from = "stage_graph=\"0->2 1->2\"";
  ASSERT_NE(text.find(from), std::string::npos);
  text.replace(text.find(from), from.size(), "stage_graph=\"0->2\"");
  absl::StatusOr<ir::TrainStep> parsed = ir::ParseTrainStep(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const absl::Status verified = ir::VerifyTrainStep(*parsed);
  EXPECT_THAT(verified.message(), HasSubstr("forward op of stage 2 reads"));
  EXPECT_THAT(verified.message(), HasSubstr("of stage 1, but the stage graph has no path 1->...->2"));
}

TEST(BranchTrace, MalformedStageGraphTextIsAnErrorAtItsToken) {
  for (const char* graph : {"\"0->5\"", "\"2->1\"", "\"0-1\"", "12"}) {
    const std::string text = absl::StrCat("train_step @t stages=3 stage_graph=", graph, " microbatches=1 {\n}\n");
    absl::StatusOr<ir::TrainStep> parsed = ir::ParseTrainStep(text);
    ASSERT_FALSE(parsed.ok()) << graph;
    EXPECT_THAT(parsed.status().message(), HasSubstr("<input>:1:36: error:")) << graph;
  }
}

}  // namespace
}  // namespace tandem
