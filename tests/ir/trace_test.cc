// Tracing: errors name the op and the user's line; stages follow
// pipeline_yield; autodiff splits each stage's backward into I and W.
#include <string>

#include "absl/strings/str_cat.h"
#include "examples/models/gpt.h"
#include "examples/models/mlp.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/trace.h"

namespace tandem {
namespace {

using ::testing::HasSubstr;
using ir::DType;

std::string Here(int line) { return absl::StrCat("ir/trace_test.cc:", line); }

absl::Status TraceError(const ModelFunction& model) {
  absl::StatusOr<ir::TrainStep> step = TraceTrainStep("m", model, Sgd({}));
  return step.ok() ? absl::OkStatus() : step.status();
}

TEST(TraceErrors, ShapeMismatchNamesOpAndCallSite) {
  int line = 0;
  absl::Status status = TraceError([&](Tracer& t) {
    Tensor a = t.Parameter("a", {3, 4}, init::Normal(1));
    Tensor b = t.Parameter("b", {5, 2}, init::Normal(1));
    line = __LINE__ + 1;
    Tensor c = matmul(a, b);
    return sum(c);
  });
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr(Here(line)));
  EXPECT_THAT(status.message(), HasSubstr("matmul: contracting dimensions differ: 4 vs 5"));
}

TEST(TraceErrors, BroadcastMismatchInOperatorNamesCallSite) {
  int line = 0;
  absl::Status status = TraceError([&](Tracer& t) {
    Tensor a = t.Parameter("a", {2, 3}, init::Normal(1));
    Tensor b = t.Parameter("b", {4}, init::Normal(1));
    line = __LINE__ + 1;
    return sum(a + b);
  });
  EXPECT_THAT(status.message(), HasSubstr(Here(line)));
  EXPECT_THAT(status.message(), HasSubstr("add: shapes [2,3] and [4] do not broadcast"));
}

TEST(TraceErrors, DTypeMismatchNamesOpAndCallSite) {
  int line = 0;
  absl::Status status = TraceError([&](Tracer& t) {
    Tensor a = t.Parameter("a", {2, 3}, init::Normal(1));
    Tensor ids = t.Input("ids", {DType::kI32, {2, 3}});
    line = __LINE__ + 1;
    return sum(a * ids);
  });
  EXPECT_THAT(status.message(), HasSubstr(Here(line)));
  EXPECT_THAT(status.message(), HasSubstr("mul: operand 1 must be f32"));
}

TEST(TraceErrors, MixingBf16AndF32AsksForAConvert) {
  int line = 0;
  absl::Status status = TraceError([&](Tracer& t) {
    Tensor a = t.Parameter("a", {2, 3}, init::Normal(1));
    Tensor b = convert(t.Parameter("b", {3, 4}, init::Normal(1)), DType::kBF16);
    line = __LINE__ + 1;
    return sum(convert(matmul(a, b), DType::kF32));
  });
  EXPECT_THAT(status.message(), HasSubstr(Here(line)));
  EXPECT_THAT(status.message(), HasSubstr("matmul: operand 1 must be f32 as operand 0 is (convert one)"));
}

TEST(TraceErrors, RotaryRefusesAnOddWidthAndAThetaNotAboveOne) {
  int line = 0;
  absl::Status odd = TraceError([&](Tracer& t) {
    Tensor a = t.Parameter("a", {4, 5}, init::Normal(1));
    line = __LINE__ + 1;
    return sum(rotary(a));
  });
  EXPECT_THAT(odd.message(), HasSubstr(Here(line)));
  EXPECT_THAT(odd.message(), HasSubstr("rotary: the last axis must have an even extent"));
  absl::Status theta = TraceError([&](Tracer& t) { return sum(rotary(t.Parameter("a", {4, 6}, init::Normal(1)), 1.0)); });
  EXPECT_THAT(theta.message(), HasSubstr("rotary: theta 1 must be a finite number above 1"));
  absl::Status vector = TraceError([&](Tracer& t) { return sum(rotary(t.Parameter("a", {6}, init::Normal(1)))); });
  EXPECT_EQ(vector.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(vector.message(), HasSubstr("rotary:"));
}

TEST(TraceErrors, ParameterDeclaredTwiceNamesBothCallSites) {
  int first = 0, second = 0;
  absl::Status status = TraceError([&](Tracer& t) {
    first = __LINE__ + 1;
    Tensor a = t.Parameter("w", {2}, init::Zeros());
    second = __LINE__ + 1;
    Tensor b = t.Parameter("w", {2}, init::Zeros());
    return sum(a * b);
  });
  EXPECT_THAT(status.message(), HasSubstr(absl::StrCat(Here(second), ": parameter 'w' declared twice (first at ",
                                                       Here(first), ")")));
}

TEST(TraceErrors, ParameterUsedButNeverDeclaredNamesCallSite) {
  int line = 0;
  absl::Status status = TraceError([&](Tracer& t) {
    Tensor a = t.Parameter("a", {2}, init::Zeros());
    line = __LINE__ + 1;
    return sum(a * t.Parameter("head"));
  });
  EXPECT_THAT(status.message(), HasSubstr(absl::StrCat(Here(line), ": parameter 'head' used but never declared")));
}

TEST(TraceErrors, FirstErrorWinsAndLaterOpsDoNotCrash) {
  int line = 0;
  absl::Status status = TraceError([&](Tracer& t) {
    Tensor a = t.Parameter("a", {2, 3}, init::Normal(1));
    line = __LINE__ + 1;
    Tensor bad = reshape(a, {7});
    Tensor worse = matmul(bad, a);  // operand invalid: no second error
    return mean(softmax(worse));
  });
  EXPECT_THAT(status.message(), HasSubstr(Here(line)));
  EXPECT_THAT(status.message(), HasSubstr("reshape: cannot reshape to [7]"));
}

TEST(TraceErrors, YieldAfterLastStageIsRejected) {
  absl::Status status = TraceError([](Tracer& t) {
    Tensor a = t.Parameter("a", {2}, init::Normal(1));
    return pipeline_yield(sum(a * a));
  });
  EXPECT_THAT(status.message(), HasSubstr("stage 1 has no ops"));
}

TEST(TraceErrors, LossMustBeScalar) {
  absl::Status status = TraceError([](Tracer& t) { return t.Parameter("a", {2}, init::Normal(1)) * 2.0; });
  EXPECT_THAT(status.message(), HasSubstr("the loss must be an f32 scalar, got f32[2]"));
}

absl::StatusOr<ir::TrainStep> TraceMlp(int32_t stages) {
  examples::MlpConfig config;
  config.num_stages = stages;
  return TraceTrainStep("mlp", examples::MlpModel(config), Adam({}), {.num_microbatches = 2});
}

TEST(Stages, PipelineYieldStartsTheNextStage) {
  absl::StatusOr<ir::TrainStep> step = TraceMlp(4);
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(step->num_stages, 4);
  int yields = 0;
  for (const ir::Node& node : step->microbatch.nodes()) {
    if (node.op == ir::OpKind::kPipelineYield) {
      EXPECT_EQ(node.stage, yields);  // a yield belongs to the stage it closes
      ++yields;
    }
  }
  EXPECT_EQ(yields, 3);
  ir::ValueId loss = *step->microbatch.FindOutput("loss");
  EXPECT_EQ(step->microbatch.node(loss).stage, 3);
}

TEST(Stages, BackwardOpsKeepTheStageOfTheirForwardOp) {
  absl::StatusOr<ir::TrainStep> step = TraceMlp(2);
  ASSERT_TRUE(step.ok()) << step.status();
  for (const ir::GraphOutput& output : step->microbatch.outputs()) {
    if (output.name == "grad.fc0.w.s0") {
      EXPECT_EQ(step->microbatch.node(output.value).stage, 0);
    }
    if (output.name == "grad.out.w.s1") {
      EXPECT_EQ(step->microbatch.node(output.value).stage, 1);
    }
  }
  EXPECT_TRUE(step->microbatch.FindOutput("grad.fc0.w.s0").has_value());
  EXPECT_TRUE(step->microbatch.FindOutput("grad.out.w.s1").has_value());
}

TEST(BackwardSplit, InputGradientPartNeverReadsWeightGradientPart) {
  absl::StatusOr<ir::TrainStep> step = TraceMlp(2);
  ASSERT_TRUE(step.ok()) << step.status();
  const ir::Graph& graph = step->microbatch;
  int input_ops = 0, weight_ops = 0;
  for (const ir::Node& node : graph.nodes()) {
    if (node.phase == ir::Phase::kBackwardInput) {
      ++input_ops;
      for (ir::ValueId operand : node.operands) {
        EXPECT_NE(graph.node(operand).phase, ir::Phase::kBackwardWeight);
      }
    }
    if (node.phase == ir::Phase::kBackwardWeight) ++weight_ops;
  }
  EXPECT_GT(input_ops, 0);
  EXPECT_GT(weight_ops, 0);
  // Weight gradients are W; the first stage sends no input gradient, so its
  // whole backward is W.
  EXPECT_EQ(graph.node(*graph.FindOutput("grad.out.w.s1")).phase, ir::Phase::kBackwardWeight);
  for (const ir::Node& node : graph.nodes()) {
    if (node.stage == 0 && node.phase != ir::Phase::kForward) {
      EXPECT_EQ(node.phase, ir::Phase::kBackwardWeight);
    }
  }
}

TEST(BackwardSplit, GradientFlowingToEarlierStageIsComputedByInputPart) {
  absl::StatusOr<ir::TrainStep> step = TraceMlp(2);
  ASSERT_TRUE(step.ok()) << step.status();
  const ir::Graph& graph = step->microbatch;
  int crossing = 0;
  for (const ir::Node& node : graph.nodes()) {
    if (node.phase == ir::Phase::kForward) continue;
    for (ir::ValueId operand : node.operands) {
      const ir::Node& producer = graph.node(operand);
      if (producer.phase != ir::Phase::kForward && producer.stage != node.stage) {
        EXPECT_EQ(producer.phase, ir::Phase::kBackwardInput);
        EXPECT_GT(producer.stage, node.stage);
        ++crossing;
      }
    }
  }
  EXPECT_GE(crossing, 1);
}

TEST(TiedParameters, GetOneGradientPerStageSummedInStageOrder) {
  examples::GptConfig config;
  config.num_stages = 2;
  config.tied_head = true;
  absl::StatusOr<ir::TrainStep> step = TraceTrainStep("gpt", examples::GptModel(config), Adam({}));
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_TRUE(step->microbatch.FindOutput("grad.wte.s0").has_value());
  EXPECT_TRUE(step->microbatch.FindOutput("grad.wte.s1").has_value());
  EXPECT_FALSE(step->microbatch.FindOutput("grad.head.w.s1").has_value());
  // In the update, acc.wte.s0 is the left operand of the sum.
  ir::ValueId s0 = *step->update.FindInput("acc.wte.s0");
  ir::ValueId s1 = *step->update.FindInput("acc.wte.s1");
  bool found = false;
  for (const ir::Node& node : step->update.nodes()) {
    if (node.op == ir::OpKind::kAdd && node.operands == std::vector<ir::ValueId>{s0, s1}) found = true;
  }
  EXPECT_TRUE(found);
}

TEST(TraceErrors, AttentionAtPositionsHasNoGradient) {
  absl::Status status = TraceError([&](Tracer& t) {
    Tensor q = t.Parameter("q", {1, 2, 1, 4}, init::Normal(1));
    Tensor kv = t.Parameter("kv", {1, 2, 6, 4}, init::Normal(1));
    Tensor positions = t.Input("positions", {DType::kI32, {1, 1}});
    return sum(attention_at(q, kv, kv, positions, 0.5));
  });
  EXPECT_THAT(status.message(), HasSubstr("attention at positions (queries against a cache) has no gradient rule"));
  absl::Status shape = TraceError([&](Tracer& t) {
    Tensor q = t.Parameter("q", {1, 2, 1, 4}, init::Normal(1));
    Tensor kv = t.Parameter("kv", {1, 2, 6, 4}, init::Normal(1));
    return sum(attention_at(q, kv, kv, t.Input("positions", {DType::kI32, {1, 6}}), 0.5));
  });
  EXPECT_THAT(shape.message(), HasSubstr("attention: positions must be [batch, queries]"));
  absl::Status unpositioned = TraceError([&](Tracer& t) {
    Tensor q = t.Parameter("q", {1, 2, 1, 4}, init::Normal(1));
    Tensor kv = t.Parameter("kv", {1, 2, 6, 4}, init::Normal(1));
    return sum(attention(q, kv, kv, 0.5));
  });
  EXPECT_THAT(unpositioned.message(), HasSubstr("or attention needs the queries' positions"));
  absl::Status rotary_rows = TraceError([&](Tracer& t) {
    return sum(rotary_at(t.Parameter("x", {2, 3, 4}, init::Normal(1)), t.Input("p", {DType::kI32, {2, 4}})));
  });
  EXPECT_THAT(rotary_rows.message(), HasSubstr("rotary: positions must have x's shape without its last axis"));
}

// A step that keeps caches: a forward one, each cache on one stage, its
// type the same wherever it is used.
absl::Status CachedStep(const ModelFunction& model) {
  absl::StatusOr<ir::TrainStep> step = TraceForwardStep("cached", model, {.num_microbatches = 2});
  return step.ok() ? absl::OkStatus() : step.status();
}

TEST(Caches, AForwardStepKeepsOneStateTensorPerMicrobatch) {
  absl::StatusOr<ir::TrainStep> step = TraceForwardStep(
      "cached",
      [](Tracer& t) {
        auto scope = t.Scope("block");
        Tensor x = t.Input("x", {DType::kF32, {2, 3}});
        Tensor next = t.ReadCache("kept", {DType::kF32, {2, 3}}) + x;
        t.WriteCache("kept", next);
        return next;
      },
      {.num_microbatches = 3});
  ASSERT_TRUE(step.ok()) << step.status();
  std::vector<std::string> caches;
  for (const ir::StateSpec& spec : step->state) {
    if (spec.role == ir::StateRole::kCache) caches.push_back(spec.name);
  }
  EXPECT_THAT(caches, ::testing::ElementsAre("block.kept@0", "block.kept@1", "block.kept@2"));
  EXPECT_TRUE(step->microbatch.FindOutput("block.kept").has_value());
}

TEST(Caches, MisuseIsATraceErrorNamingTheCache) {
  EXPECT_THAT(CachedStep([](Tracer& t) {
                Tensor x = t.Input("x", {DType::kF32, {2}});
                t.WriteCache("c", x);
                t.WriteCache("c", x + x);
                return x;
              }).message(),
              HasSubstr("cache 'c' written twice"));
  EXPECT_THAT(CachedStep([](Tracer& t) {
                Tensor x = t.Input("x", {DType::kF32, {2}});
                Tensor c = t.ReadCache("c", {DType::kF32, {3}});
                t.WriteCache("c", x);
                return sum(c) + sum(x);
              }).message(),
              HasSubstr("cache 'c' is f32[2] here but f32[3]"));
  EXPECT_THAT(CachedStep([](Tracer& t) {
                Tensor x = t.Input("x", {DType::kF32, {2}});
                Tensor c = t.ReadCache("c", {DType::kF32, {2}});
                Tensor y = pipeline_yield(c + x);
                Tensor z = y * y;  // stage 1
                t.WriteCache("c", z);
                return z;
              }).message(),
              HasSubstr("cache 'c' is used on stage 1 and on stage 0: a cache is read and written on one stage"));
  // Training through a cache: refused.
  absl::Status trained = TraceError([](Tracer& t) {
    Tensor w = t.Parameter("w", {2}, init::Normal(1));
    Tensor c = t.ReadCache("c", {DType::kF32, {2}});
    t.WriteCache("c", c + w);
    return sum(c * w);
  });
  EXPECT_THAT(trained.message(), HasSubstr("keeps caches: only a forward step may"));
}

TEST(ForwardOnly, HasNoGradientsOrUpdate) {
  examples::MlpConfig config;
  config.num_stages = 2;
  absl::StatusOr<ir::TrainStep> step = TraceForwardStep("mlp", examples::MlpModel(config));
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_TRUE(step->forward_only());
  EXPECT_EQ(step->update.size(), 0);
  for (const ir::Node& node : step->microbatch.nodes()) EXPECT_EQ(node.phase, ir::Phase::kForward);
}

}  // namespace
}  // namespace tandem
