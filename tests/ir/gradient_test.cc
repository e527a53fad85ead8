// Every op's gradient rule, checked against central finite differences.
//
// Each case builds a tiny graph f(parameters) with one op under test (plus
// whatever produces its non-differentiable inputs); the harness adds
// loss = sum(f * r) for a fixed random r, differentiates, and compares each
// parameter's gradient with (loss(p + h) - loss(p - h)) / 2h computed by the
// reference interpreter. The kernels compute in f32, so the tolerance is
// 1e-2 (absolute plus relative): a wrong rule (a missing factor, a wrong
// transpose or sign, a dropped broadcast) misses by far more.
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "backends/cpu/interpreter.h"
#include "gtest/gtest.h"
#include "ir/autodiff.h"
#include "ir/initial_state.h"
#include "ir/tracer.h"
#include "ir/verifier.h"

namespace tandem {
namespace {

using ir::DType;
using ir::HostTensor;
using ir::Shape;

struct GradientCase {
  std::string name;
  std::function<Tensor(Tracer&)> build;
  double step = 1e-2;
};

Tensor P(Tracer& t, const std::string& name, Shape shape, double stddev = 1.0) {
  return t.Parameter(name, std::move(shape), init::Normal(stddev));
}

// A parameter with values in [low, high], for ops that need a domain.
Tensor Positive(Tracer& t, const std::string& name, Shape shape) {
  return t.Parameter(name, std::move(shape), init::Uniform(0.5, 2.0));
}

std::vector<GradientCase> Cases() {
  return {
      {"Neg", [](Tracer& t) { return -P(t, "a", {2, 3}); }},
      {"Exp", [](Tracer& t) { return exp(P(t, "a", {2, 3}, 0.5)); }},
      {"Expm1", [](Tracer& t) { return expm1(P(t, "a", {2, 3}, 0.5)); }},
      {"Log", [](Tracer& t) { return log(Positive(t, "a", {2, 3})); }},
      {"Tanh", [](Tracer& t) { return tanh(P(t, "a", {2, 3})); }},
      {"Sqrt", [](Tracer& t) { return sqrt(Positive(t, "a", {2, 3})); }},
      {"Rsqrt", [](Tracer& t) { return rsqrt(Positive(t, "a", {2, 3})); }},
      {"Relu", [](Tracer& t) { return relu(P(t, "a", {3, 4})); }, 1e-3},
      {"Gelu", [](Tracer& t) { return gelu(P(t, "a", {3, 4})); }},
      {"Silu", [](Tracer& t) { return silu(P(t, "a", {3, 4}, 2.0)); }},
      {"Sin", [](Tracer& t) { return sin(P(t, "a", {2, 3}, 2.0)); }},
      {"Cos", [](Tracer& t) { return cos(P(t, "a", {2, 3}, 2.0)); }},
      {"RotaryOverPositionsAndHeads", [](Tracer& t) { return rotary(P(t, "a", {2, 5, 6}), 10000.0); }},
      {"RotaryInverseWithASmallTheta", [](Tracer& t) { return rotary(P(t, "a", {3, 4}), 2.5, true); }},
      {"AddBroadcastsRowVector", [](Tracer& t) { return P(t, "a", {2, 3}) + P(t, "b", {3}); }},
      {"SubBroadcastsColumn", [](Tracer& t) { return P(t, "a", {2, 3}) - P(t, "b", {2, 1}); }},
      {"MulBroadcastsBothWays", [](Tracer& t) { return P(t, "a", {2, 1, 3}) * P(t, "b", {4, 1}); }},
      {"DivBroadcastsScalarDenominator", [](Tracer& t) { return P(t, "a", {2, 3}) / Positive(t, "b", {}); }},
      {"Pow", [](Tracer& t) { return pow(Positive(t, "a", {2, 3}), P(t, "b", {3}, 0.5)); }},
      {"Maximum", [](Tracer& t) { return maximum(P(t, "a", {3, 4}), P(t, "b", {3, 4})); }, 1e-3},
      {"WhereSelectsByCondition",
       [](Tracer& t) {
         Tensor cond = t.Input("cond", {DType::kF32, {2, 3}});
         return where(cond, P(t, "a", {2, 3}), P(t, "b", {3}));
       }},
      {"ReduceSumMiddleAxis", [](Tracer& t) { return reduce_sum(P(t, "a", {2, 3, 4}), {1}); }},
      {"ReduceSumKeepDims", [](Tracer& t) { return reduce_sum(P(t, "a", {2, 3, 4}), {0, 2}, true); }},
      {"ReduceMean", [](Tracer& t) { return reduce_mean(P(t, "a", {2, 3, 4}), {-1}); }},
      {"ReduceMax", [](Tracer& t) { return reduce_max(P(t, "a", {3, 5}), {1}); }, 1e-3},
      {"Reshape", [](Tracer& t) { return reshape(P(t, "a", {2, 6}), {3, 4}); }},
      {"Transpose", [](Tracer& t) { return transpose(P(t, "a", {2, 3, 4}), {2, 0, 1}); }},
      {"Broadcast", [](Tracer& t) { return broadcast_to(P(t, "a", {3, 1}), {2, 3, 4}); }},
      {"Slice", [](Tracer& t) { return slice(P(t, "a", {3, 5}), 1, 1, 4); }},
      {"Concat", [](Tracer& t) { return concat({P(t, "a", {2, 2}), P(t, "b", {2, 3})}, 1); }},
      // Slices' gradients are zeros around their pieces; summed, those of
      // slices that do not overlap are gathered into one concat (with zeros
      // for a gap), and those that overlap added.
      {"SlicesThatTileTheOperand",
       [](Tracer& t) {
         Tensor a = P(t, "a", {3, 6});
         return concat({slice(a, 1, 0, 2) * 2.0, tanh(slice(a, 1, 2, 5)), slice(a, 1, 5, 6)}, 1);
       }},
      {"SlicesWithAGapBetween",
       [](Tracer& t) {
         Tensor a = P(t, "a", {2, 3, 5});
         return concat({slice(a, 2, 0, 1), tanh(slice(a, 2, 3, 5))}, 2);
       }},
      {"SlicesThatOverlap",
       [](Tracer& t) {
         Tensor a = P(t, "a", {4, 3});
         return concat({slice(a, 0, 0, 3), tanh(slice(a, 0, 1, 4))}, 0);
       }},
      {"MatMul", [](Tracer& t) { return matmul(P(t, "a", {3, 4}), P(t, "b", {4, 2})); }},
      {"MatMulTransposeA", [](Tracer& t) { return matmul(P(t, "a", {4, 3}), P(t, "b", {4, 2}), {true, false}); }},
      {"MatMulTransposeB", [](Tracer& t) { return matmul(P(t, "a", {3, 4}), P(t, "b", {2, 4}), {false, true}); }},
      {"MatMulTransposeBoth", [](Tracer& t) { return matmul(P(t, "a", {4, 3}), P(t, "b", {2, 4}), {true, true}); }},
      {"MatMulBatched", [](Tracer& t) { return matmul(P(t, "a", {2, 3, 4}), P(t, "b", {2, 4, 2})); }},
      {"MatMulBatchedWithSharedWeight", [](Tracer& t) { return matmul(P(t, "a", {2, 3, 4}), P(t, "b", {4, 2})); }},
      {"MatMulBatchedWithSharedTransposedWeight",
       [](Tracer& t) { return matmul(P(t, "a", {2, 3, 4}), P(t, "b", {2, 4}), {false, true}); }},
      {"MatMulSharedLeftOperand", [](Tracer& t) { return matmul(P(t, "a", {3, 4}), P(t, "b", {2, 4, 2})); }},
      {"MatMulBatchedTransposedAWithSharedWeight",
       [](Tracer& t) { return matmul(P(t, "a", {2, 4, 3}), P(t, "b", {4, 2}), {true, false}); }},
      {"Softmax", [](Tracer& t) { return softmax(P(t, "a", {3, 5})); }},
      {"LogSoftmax", [](Tracer& t) { return log_softmax(P(t, "a", {3, 5})); }},
      {"LayerNorm",
       [](Tracer& t) { return layer_norm(P(t, "x", {3, 6}), P(t, "g", {6}), P(t, "b", {6})); }},
      {"Normalize",
       [](Tracer& t) {
         return ir::Apply(ir::OpKind::kNormalize, {P(t, "x", {3, 6})}, ir::Attributes{{"eps", 1e-5}}, {});
       }},
      {"CrossEntropy",
       [](Tracer& t) {
         return cross_entropy(P(t, "logits", {2, 3, 5}), t.Label("labels", {DType::kI32, {2, 3}}));
       }},
      {"Embedding",
       [](Tracer& t) { return embedding(P(t, "table", {5, 3}), t.Input("ids", {DType::kI32, {2, 3}})); }},
      // As attention uses it: masked entries become -inf, then softmax.
      {"CausalMaskThenSoftmax", [](Tracer& t) { return softmax(causal_mask(P(t, "a", {2, 4, 4}))); }},
      // Fused causal attention, every query head with its own key/value
      // head, and grouped (2 query heads per key/value head).
      {"Attention",
       [](Tracer& t) {
         return attention(P(t, "q", {2, 2, 4, 3}), P(t, "k", {2, 2, 4, 3}), P(t, "v", {2, 2, 4, 3}), 0.6);
       }},
      {"AttentionWithGroupedKeyValueHeads",
       [](Tracer& t) {
         return attention(P(t, "q", {1, 4, 5, 2}), P(t, "k", {1, 2, 5, 2}), P(t, "v", {1, 2, 5, 2}), 0.7);
       }},
      {"CausalMaskWithZeroFill", [](Tracer& t) { return causal_mask(P(t, "a", {2, 3, 3}), 0.0); }},
      {"PipelineYieldAcrossStages",
       [](Tracer& t) {
         Tensor h = tanh(P(t, "a", {2, 3}));
         h = pipeline_yield(h);
         return h * P(t, "b", {3});
       }},
      {"ValueUsedTwiceAcrossStages",
       [](Tracer& t) {
         Tensor h = tanh(P(t, "a", {2, 3}));
         Tensor skip = h;
         h = pipeline_yield(h * 2.0);
         h = pipeline_yield(exp(h));
         return h + skip * P(t, "b", {3});
       }},
  };
}

// Deterministic non-parameter inputs: conditions, labels, ids and r.
ir::TensorMap DataInputs(const ir::Graph& graph) {
  ir::TensorMap inputs;
  for (ir::ValueId id : graph.Inputs()) {
    const ir::Node& node = graph.node(id);
    const std::string& name = node.attributes.GetString("name");
    if (node.attributes.GetString("role") == "parameter") continue;
    HostTensor tensor(node.type);
    for (int64_t i = 0; i < tensor.num_elements(); ++i) {
      if (node.type.dtype == DType::kI32) {
        tensor.i32()[i] = static_cast<int32_t>((i * 7 + 3) % (name == "ids" ? 5 : 5));
      } else if (name == "cond") {
        tensor.f32()[i] = (i % 3 == 1) ? 0.0f : 1.0f;
      }
    }
    if (name == "r") tensor = *ir::MakeTensor(node.type, init::Normal(1.0, 0.0, 99));
    inputs[name] = tensor;
  }
  return inputs;
}

class GradientRule : public ::testing::TestWithParam<GradientCase> {};

TEST_P(GradientRule, MatchesFiniteDifferences) {
  const GradientCase& test_case = GetParam();
  Tracer tracer(/*seed=*/7);
  Tensor out = test_case.build(tracer);
  Tensor r = tracer.Input("r", out.type());
  Tensor loss = sum(out * r);
  ASSERT_TRUE(tracer.status().ok()) << tracer.status();
  ir::Graph graph = tracer.graph();
  graph.AddOutput("loss", loss.id());
  absl::StatusOr<std::vector<ir::ParameterGradient>> gradients = ir::AppendBackward(graph, loss.id());
  ASSERT_TRUE(gradients.ok()) << gradients.status();
  ASSERT_TRUE(ir::VerifyGraph(graph).ok()) << ir::VerifyGraph(graph);

  // Sum each parameter's per-stage gradients into one output.
  std::map<std::string, std::vector<ir::ValueId>> per_parameter;
  for (const ir::ParameterGradient& g : *gradients) per_parameter[g.parameter].push_back(g.value);
  for (const auto& [name, values] : per_parameter) {
    for (size_t i = 0; i < values.size(); ++i) graph.AddOutput("grad." + name + "." + std::to_string(i), values[i]);
  }

  ir::TensorMap inputs = DataInputs(graph);
  for (const ir::StateSpec& spec : tracer.parameters()) inputs[spec.name] = *ir::InitialValue(spec);
  absl::StatusOr<ir::TensorMap> analytic = cpu::RunGraph(graph, inputs);
  ASSERT_TRUE(analytic.ok()) << analytic.status();

  const std::vector<std::string> wanted = {"loss"};
  auto loss_at = [&](const ir::TensorMap& values) {
    absl::StatusOr<ir::TensorMap> result = cpu::RunGraph(graph, values, &wanted);
    EXPECT_TRUE(result.ok()) << result.status();
    return static_cast<double>(result->at("loss").f32()[0]);
  };

  ASSERT_FALSE(tracer.parameters().empty());
  for (const ir::StateSpec& spec : tracer.parameters()) {
    ASSERT_TRUE(per_parameter.count(spec.name)) << "no gradient for " << spec.name;
    std::vector<double> gradient(spec.type.num_elements(), 0.0);
    for (size_t i = 0; i < per_parameter[spec.name].size(); ++i) {
      const HostTensor& part = analytic->at("grad." + spec.name + "." + std::to_string(i));
      for (int64_t k = 0; k < part.num_elements(); ++k) gradient[k] += part.f32()[k];
    }
    for (int64_t k = 0; k < spec.type.num_elements(); ++k) {
      ir::TensorMap plus = inputs;
      ir::TensorMap minus = inputs;
      HostTensor p(spec.type), m(spec.type);
      for (int64_t j = 0; j < p.num_elements(); ++j) p.f32()[j] = m.f32()[j] = inputs.at(spec.name).f32()[j];
      p.f32()[k] += static_cast<float>(test_case.step);
      m.f32()[k] -= static_cast<float>(test_case.step);
      plus[spec.name] = p;
      minus[spec.name] = m;
      double numeric = (loss_at(plus) - loss_at(minus)) /
                       static_cast<double>(p.f32()[k] - m.f32()[k]);
      EXPECT_NEAR(gradient[k], numeric, 1e-2 + 1e-2 * std::abs(numeric))
          << spec.name << "[" << k << "] in case " << test_case.name;
    }
  }
}

// q, k and v sliced from one projection: the projection's gradient is the
// three gradients side by side, one concat, with no tensor of its size
// filled with zeros and no sum of three of them.
TEST(SliceGradients, PiecesThatTileAValueAreConcatenatedNotPaddedAndAdded) {
  Tracer tracer(/*seed=*/7);
  Tensor qkv = tracer.Parameter("qkv", {4, 9}, init::Normal(1.0));
  Tensor q = slice(qkv, 1, 0, 3), k = slice(qkv, 1, 3, 6), v = slice(qkv, 1, 6, 9);
  Tensor loss = sum(q * k + tanh(v));
  ASSERT_TRUE(tracer.status().ok()) << tracer.status();
  ir::Graph graph = tracer.graph();
  const int32_t forward_nodes = graph.size();
  absl::StatusOr<std::vector<ir::ParameterGradient>> gradients = ir::AppendBackward(graph, loss.id());
  ASSERT_TRUE(gradients.ok()) << gradients.status();
  ASSERT_EQ(gradients->size(), 1u);
  const ir::Node& gradient = graph.node((*gradients)[0].value);
  EXPECT_EQ(gradient.op, ir::OpKind::kConcat);
  ASSERT_EQ(gradient.operands.size(), 3u);
  for (ir::ValueId part : gradient.operands) {
    EXPECT_NE(graph.node(part).op, ir::OpKind::kConstant);
    EXPECT_EQ(graph.type(part), (ir::TensorType{DType::kF32, {4, 3}}));
  }
  // Nothing of the parameter's size is added: the pieces are gathered
  // before any add of the three (the padded concats are left unused).
  for (ir::ValueId id = forward_nodes; id < graph.size(); ++id) {
    if (graph.node(id).op == ir::OpKind::kAdd) {
      EXPECT_NE(graph.type(id).shape, (Shape{4, 9})) << id;
    }
  }
}

// Mixed precision: an f32 parameter converted to bf16 gets its gradient
// converted back to f32, and the arithmetic between them stays bf16 (its
// constants take the operand's dtype). Exact: 3 and its products with
// small integers are bf16 values.
TEST(ConvertGradient, ConvertsBackToTheOperandDType) {
  Tracer tracer(/*seed=*/7);
  Tensor p = tracer.Parameter("p", {2, 3}, init::Normal(1.0));
  Tensor half = convert(p, DType::kBF16) * 3.0;
  Tensor loss = sum(convert(half * half, DType::kF32));
  ASSERT_TRUE(tracer.status().ok()) << tracer.status();
  EXPECT_EQ(half.dtype(), DType::kBF16);
  ir::Graph graph = tracer.graph();
  graph.AddOutput("loss", loss.id());
  absl::StatusOr<std::vector<ir::ParameterGradient>> gradients = ir::AppendBackward(graph, loss.id());
  ASSERT_TRUE(gradients.ok()) << gradients.status();
  ASSERT_TRUE(ir::VerifyGraph(graph).ok()) << ir::VerifyGraph(graph);
  ASSERT_EQ(gradients->size(), 1u);
  EXPECT_EQ(graph.type((*gradients)[0].value), (ir::TensorType{DType::kF32, {2, 3}}));
  graph.AddOutput("grad", (*gradients)[0].value);

  // p = 1, 2, ... exactly: d/dp sum((3p)^2) = 18p, in bf16 exactly.
  HostTensor values = HostTensor::FromFloats({2, 3}, {1, 2, 3, 4, -5, 6});
  absl::StatusOr<ir::TensorMap> out = cpu::RunGraph(graph, {{"p", values}});
  ASSERT_TRUE(out.ok()) << out.status();
  const HostTensor& grad = out->at("grad");
  ASSERT_EQ(grad.dtype(), DType::kF32);
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(grad.f32()[i], 18.0f * values.f32()[i]) << i;
}

TEST(ConvertGradient, NoneFlowsAcrossAnIntegerConvert) {
  Tracer tracer(/*seed=*/7);
  Tensor p = tracer.Parameter("p", {3}, init::Normal(1.0));
  Tensor loss = sum(p * convert(convert(p, DType::kI32), DType::kF32));
  ir::Graph graph = tracer.graph();
  absl::StatusOr<std::vector<ir::ParameterGradient>> gradients = ir::AppendBackward(graph, loss.id());
  ASSERT_TRUE(gradients.ok()) << gradients.status();
  graph.AddOutput("grad", (*gradients)[0].value);
  HostTensor values = HostTensor::FromFloats({3}, {1.5f, -2.5f, 3.0f});
  absl::StatusOr<ir::TensorMap> out = cpu::RunGraph(graph, {{"p", values}});
  ASSERT_TRUE(out.ok()) << out.status();
  // d/dp (p * trunc(p)) is trunc(p) where the truncation is flat.
  EXPECT_EQ(out->at("grad").f32()[0], 1.0f);
  EXPECT_EQ(out->at("grad").f32()[1], -2.0f);
  EXPECT_EQ(out->at("grad").f32()[2], 3.0f);
}

INSTANTIATE_TEST_SUITE_P(EveryOp, GradientRule, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<GradientCase>& info) { return info.param.name; });

}  // namespace
}  // namespace tandem
