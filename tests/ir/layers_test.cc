// The model layers (ir/layers.h): the parameters each declares (names,
// shapes, initializers), forward values against loops written out here in
// double precision, and errors that name the caller's line.
#include <algorithm>
#include <cmath>
#include <functional>
#include <numbers>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/cpu/interpreter.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/layers.h"
#include "ir/trace.h"

namespace tandem {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ir::DType;
using ir::HostTensor;
using Kind = ir::Initializer::Kind;

std::string Here(int line) { return absl::StrCat("ir/layers_test.cc:", line); }

struct Declared {
  std::string name;
  ir::Shape shape;
  Kind init;
  friend bool operator==(const Declared&, const Declared&) = default;
};

void PrintTo(const Declared& d, std::ostream* out) {
  *out << d.name << " " << ir::TypeToString({DType::kF32, d.shape}) << " kind " << static_cast<int>(d.init);
}

using Layer = std::function<Tensor(Tracer&, const Tensor&)>;

struct Traced {
  std::vector<Declared> parameters;
  ir::Shape output;
};

// Applies `layer` to an f32 input of `x_shape` inside the scope "h1".
Traced Trace(const ir::Shape& x_shape, const Layer& layer) {
  Tracer t;
  Tensor x = t.Input("x", {DType::kF32, x_shape});
  auto block = t.Scope("h1");
  Tensor y = layer(t, x);
  EXPECT_TRUE(t.status().ok()) << t.status();
  EXPECT_EQ(t.scope(), "h1");
  Traced traced{.output = y.shape()};
  for (const ir::StateSpec& spec : t.parameters()) {
    traced.parameters.push_back({spec.name, spec.type.shape, spec.init.kind});
  }
  return traced;
}

TEST(LayerParameters, LinearDeclaresWeightAndZeroBiasInItsScope) {
  Traced traced = Trace({2, 3}, [](Tracer& t, const Tensor& x) {
    return layers::Linear(t, "fc", x, 3, 5, init::Normal(0.1));
  });
  EXPECT_EQ(traced.output, (ir::Shape{2, 5}));
  EXPECT_THAT(traced.parameters, ElementsAre(Declared{"h1.fc.w", {3, 5}, Kind::kNormal},
                                             Declared{"h1.fc.b", {5}, Kind::kZeros}));
}

TEST(LayerParameters, LayerNormDeclaresUnitGainAndZeroBias) {
  Traced traced = Trace({2, 4}, [](Tracer& t, const Tensor& x) {
    return layers::LayerNorm(t, "ln", x, 4);
  });
  EXPECT_EQ(traced.output, (ir::Shape{2, 4}));
  EXPECT_THAT(traced.parameters, ElementsAre(Declared{"h1.ln.g", {4}, Kind::kOnes},
                                             Declared{"h1.ln.b", {4}, Kind::kZeros}));
}

TEST(LayerParameters, AttentionAndMlpDeclareTwoLinearsEach) {
  const ir::Initializer weights = init::Normal(0.02);
  Traced attention = Trace({2, 5, 8}, [&](Tracer& t, const Tensor& x) {
    return layers::CausalSelfAttention(t, "attn", x, 2, weights);
  });
  Traced mlp = Trace({2, 5, 8}, [&](Tracer& t, const Tensor& x) { return layers::GeluMlp(t, "mlp", x, 32, weights); });
  EXPECT_EQ(attention.output, (ir::Shape{2, 5, 8}));
  EXPECT_EQ(mlp.output, (ir::Shape{2, 5, 8}));
  EXPECT_THAT(attention.parameters, ElementsAre(Declared{"h1.attn.qkv.w", {8, 24}, Kind::kNormal},
                                                Declared{"h1.attn.qkv.b", {24}, Kind::kZeros},
                                                Declared{"h1.attn.proj.w", {8, 8}, Kind::kNormal},
                                                Declared{"h1.attn.proj.b", {8}, Kind::kZeros}));
  EXPECT_THAT(mlp.parameters, ElementsAre(Declared{"h1.mlp.fc.w", {8, 32}, Kind::kNormal},
                                          Declared{"h1.mlp.fc.b", {32}, Kind::kZeros},
                                          Declared{"h1.mlp.proj.w", {32, 8}, Kind::kNormal},
                                          Declared{"h1.mlp.proj.b", {8}, Kind::kZeros}));
}

TEST(LayerParameters, WeightsGetTheGivenInitializerWithASeedFromTheirName) {
  Tracer t(/*seed=*/3);
  Tensor x = t.Input("x", {DType::kF32, {2, 3}});
  layers::Linear(t, "a", x, 3, 3, init::Normal(0.1));
  layers::Linear(t, "b", x, 3, 3, init::Normal(0.1));
  ASSERT_EQ(t.parameters().size(), 4u);
  EXPECT_EQ(t.parameters()[0].init.b, 0.1);
  EXPECT_NE(t.parameters()[0].init.seed, 0u);
  EXPECT_NE(t.parameters()[0].init.seed, t.parameters()[2].init.seed);
}

TEST(LayerParameters, EveryOpOfALayerCarriesTheCallersLine) {
  Tracer t;
  Tensor x = t.Input("x", {DType::kF32, {1, 3, 4}});
  const ir::ValueId first = x.id() + 1;
  const int line = __LINE__ + 1;
  layers::CausalSelfAttention(t, "attn", x, 2, init::Normal(0.02));
  ASSERT_TRUE(t.status().ok()) << t.status();
  ASSERT_LT(first, t.graph().size());
  for (ir::ValueId id = first; id < t.graph().size(); ++id) {
    EXPECT_EQ(t.graph().node(id).location.ToString(), Here(line)) << "%" << id;
  }
}

// ---- Forward values. The layer is traced as a forward-only step, its
// state filled with a fixed pattern, and run by the reference interpreter.

// The same values every run, spread over [-1, 1].
HostTensor Pattern(const ir::Shape& shape, double phase) {
  HostTensor tensor(ir::TensorType{DType::kF32, shape});
  for (int64_t i = 0; i < tensor.num_elements(); ++i) {
    tensor.f32()[i] = static_cast<float>(std::sin(1.7 * static_cast<double>(i) + phase));
  }
  return tensor;
}

struct ForwardRun {
  ir::TensorMap state;
  HostTensor x;
  HostTensor y;
};

// Traces `layer` over an input x of `x_shape`, fills x and every parameter
// with Pattern, and returns them with the layer's output.
ForwardRun RunForward(const ir::Shape& x_shape, const std::function<Tensor(Tracer&, const Tensor&)>& layer) {
  ForwardRun run;
  absl::StatusOr<ir::TrainStep> step = TraceForwardStep("layer", [&](Tracer& t) {
    return layer(t, t.Input("x", {DType::kF32, x_shape}));
  });
  EXPECT_TRUE(step.ok()) << step.status();
  if (!step.ok()) return run;
  double phase = 0.5;
  for (const ir::StateSpec& spec : step->state) run.state[spec.name] = Pattern(spec.type.shape, phase += 1.0);
  run.x = Pattern(x_shape, 0.0);
  absl::StatusOr<std::vector<HostTensor>> outputs =
      cpu::RunReferenceForward(*step, run.state, {ir::TensorMap{{"x", run.x}}});
  EXPECT_TRUE(outputs.ok()) << outputs.status();
  if (outputs.ok() && outputs->size() == 1) run.y = (*outputs)[0];
  return run;
}

using Matrix = std::vector<std::vector<double>>;  // rows

Matrix Rows(const HostTensor& tensor, int64_t width) {
  Matrix rows(tensor.num_elements() / width, std::vector<double>(width));
  for (int64_t i = 0; i < tensor.num_elements(); ++i) rows[i / width][i % width] = tensor.f32()[i];
  return rows;
}

// x w + b, with w and b taken from the state.
Matrix Affine(const Matrix& x, const ir::TensorMap& state, const std::string& name) {
  const HostTensor& w = state.at(name + ".w");
  const HostTensor& b = state.at(name + ".b");
  const int64_t in = w.shape()[0], out = w.shape()[1];
  Matrix y(x.size(), std::vector<double>(out));
  for (size_t r = 0; r < x.size(); ++r) {
    for (int64_t o = 0; o < out; ++o) {
      double sum = b.f32()[o];
      for (int64_t i = 0; i < in; ++i) sum += x[r][i] * w.f32()[i * out + o];
      y[r][o] = sum;
    }
  }
  return y;
}

void ExpectNear(const HostTensor& actual, const Matrix& expected, double tolerance) {
  ASSERT_TRUE(actual.defined());
  const int64_t width = static_cast<int64_t>(expected[0].size());
  ASSERT_EQ(actual.num_elements(), static_cast<int64_t>(expected.size()) * width);
  for (int64_t i = 0; i < actual.num_elements(); ++i) {
    EXPECT_NEAR(actual.f32()[i], expected[i / width][i % width], tolerance) << "element " << i;
  }
}

TEST(LayerForward, LinearIsMatmulPlusBias) {
  ForwardRun run = RunForward({2, 3}, [](Tracer& t, const Tensor& x) {
    return layers::Linear(t, "fc", x, 3, 4, init::Normal(1.0));
  });
  ExpectNear(run.y, Affine(Rows(run.x, 3), run.state, "fc"), 1e-6);
}

TEST(LayerForward, LayerNormNormalizesTheLastAxisThenScalesAndShifts) {
  ForwardRun run = RunForward({3, 4}, [](Tracer& t, const Tensor& x) { return layers::LayerNorm(t, "ln", x, 4); });
  const HostTensor& g = run.state.at("ln.g");
  const HostTensor& b = run.state.at("ln.b");
  Matrix expected = Rows(run.x, 4);
  for (std::vector<double>& row : expected) {
    double mean = 0, variance = 0;
    for (double v : row) mean += v / 4;
    for (double v : row) variance += (v - mean) * (v - mean) / 4;
    for (int64_t i = 0; i < 4; ++i) row[i] = (row[i] - mean) / std::sqrt(variance + 1e-5) * g.f32()[i] + b.f32()[i];
  }
  ExpectNear(run.y, expected, 1e-5);
}

double Gelu(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (x + 0.044715 * x * x * x)));
}

TEST(LayerForward, GeluMlpIsProjectionOfGeluOfHidden) {
  ForwardRun run = RunForward({2, 3, 4}, [](Tracer& t, const Tensor& x) {
    return layers::GeluMlp(t, "mlp", x, 6, init::Normal(1.0));
  });
  Matrix hidden = Affine(Rows(run.x, 4), run.state, "mlp.fc");
  for (std::vector<double>& row : hidden) {
    for (double& v : row) v = Gelu(v);
  }
  ExpectNear(run.y, Affine(hidden, run.state, "mlp.proj"), 1e-5);
}

class AttentionForward : public ::testing::TestWithParam<layers::AttentionImpl> {};

TEST_P(AttentionForward, MixesEachPositionWithItsPastPerHead) {
  const int64_t batch = 2, seq = 3, dim = 4, heads = 2, width = dim / heads;
  ForwardRun run = RunForward({batch, seq, dim}, [](Tracer& t, const Tensor& x) {
    return layers::CausalSelfAttention(t, "attn", x, heads, init::Normal(1.0), GetParam());
  });
  Matrix qkv = Affine(Rows(run.x, dim), run.state, "attn.qkv");  // rows: batch * seq, columns: q | k | v
  Matrix merged(batch * seq, std::vector<double>(dim));
  for (int64_t n = 0; n < batch; ++n) {
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t i = 0; i < seq; ++i) {
        const std::vector<double>& query = qkv[n * seq + i];
        std::vector<double> scores(i + 1);  // position i sees positions 0..i
        double top = -1e300, total = 0;
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (int64_t e = 0; e < width; ++e) dot += query[h * width + e] * qkv[n * seq + j][dim + h * width + e];
          scores[j] = dot / std::sqrt(static_cast<double>(width));
          top = std::max(top, scores[j]);
        }
        for (double& s : scores) total += s = std::exp(s - top);
        for (int64_t e = 0; e < width; ++e) {
          double sum = 0;
          for (int64_t j = 0; j <= i; ++j) sum += scores[j] / total * qkv[n * seq + j][2 * dim + h * width + e];
          merged[n * seq + i][h * width + e] = sum;
        }
      }
    }
  }
  ExpectNear(run.y, Affine(merged, run.state, "attn.proj"), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(FusedAndComposed, AttentionForward,
                         ::testing::Values(layers::AttentionImpl::kFused, layers::AttentionImpl::kComposed),
                         [](const auto& info) { return std::string(layers::AttentionImplName(info.param)); });

// Grouped key/value heads: the fused op reads key/value head h / group; the
// composed graph repeats each key/value head to its query heads. Both give
// the same values, and only the composed one holds [.., T, T] scores.
TEST(CausalAttention, FusedAndComposedAgreeWithGroupedHeadsAndOnlyComposedKeepsScores) {
  const int64_t batch = 2, heads = 6, kv_heads = 2, seq = 7, width = 3;
  HostTensor y[2];
  for (layers::AttentionImpl impl : {layers::AttentionImpl::kFused, layers::AttentionImpl::kComposed}) {
    Tracer t;
    Tensor q = t.Input("q", {DType::kF32, {batch, heads, seq, width}});
    Tensor k = t.Input("k", {DType::kF32, {batch, kv_heads, seq, width}});
    Tensor v = t.Input("v", {DType::kF32, {batch, kv_heads, seq, width}});
    Tensor out = layers::CausalAttention(q, k, v, 0.5, impl);
    ASSERT_TRUE(t.status().ok()) << t.status();
    ir::Graph graph = t.graph();
    graph.AddOutput("y", out.id());
    bool scores = false;
    for (const ir::Node& node : graph.nodes()) {
      const ir::Shape& shape = node.type.shape;
      scores = scores || (shape.size() >= 2 && shape[shape.size() - 1] == seq && shape[shape.size() - 2] == seq);
    }
    EXPECT_EQ(scores, impl == layers::AttentionImpl::kComposed) << layers::AttentionImplName(impl);
    absl::StatusOr<ir::TensorMap> result = cpu::RunGraph(
        graph, {{"q", Pattern({batch, heads, seq, width}, 0.1)},
                {"k", Pattern({batch, kv_heads, seq, width}, 0.2)},
                {"v", Pattern({batch, kv_heads, seq, width}, 0.3)}});
    ASSERT_TRUE(result.ok()) << result.status();
    y[impl == layers::AttentionImpl::kFused ? 0 : 1] = result->at("y");
  }
  ASSERT_EQ(y[0].num_elements(), batch * heads * seq * width);
  for (int64_t i = 0; i < y[0].num_elements(); ++i) EXPECT_NEAR(y[0].f32()[i], y[1].f32()[i], 1e-6) << i;
}

TEST(CausalAttention, ImplementationsAreNamedAndParsed) {
  EXPECT_EQ(layers::ParseAttentionImpl("fused"), layers::AttentionImpl::kFused);
  EXPECT_EQ(layers::ParseAttentionImpl("composed"), layers::AttentionImpl::kComposed);
  EXPECT_EQ(layers::ParseAttentionImpl("flash"), std::nullopt);
  EXPECT_STREQ(layers::AttentionImplName(layers::AttentionImpl::kComposed), "composed");
}

// ---- Errors inside a layer name the model's line, not the layer's.

TEST(LayerErrors, ShapeMismatchInsideLinearNamesTheCallersLine) {
  Tracer t;
  Tensor x = t.Input("x", {DType::kF32, {2, 3}});
  const int line = __LINE__ + 1;
  Tensor y = layers::Linear(t, "fc", x, 4, 2, init::Normal(0.1));
  EXPECT_FALSE(y.valid());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(t.status().message(), HasSubstr(Here(line)));
  EXPECT_THAT(t.status().message(), HasSubstr("matmul: contracting dimensions differ: 3 vs 4"));
  EXPECT_THAT(t.status().message(), Not(HasSubstr("layers.cc")));
}

TEST(LayerErrors, HeadsThatDoNotDivideTheWidthNameTheLayerAndLine) {
  Tracer t;
  Tensor x = t.Input("x", {DType::kF32, {2, 5, 6}});
  auto block = t.Scope("h2");
  const int line = __LINE__ + 1;
  Tensor y = layers::CausalSelfAttention(t, "attn", x, 4, init::Normal(0.02));
  EXPECT_FALSE(y.valid());
  EXPECT_THAT(t.status().message(), HasSubstr(Here(line)));
  EXPECT_THAT(t.status().message(), HasSubstr("attention 'h2.attn': 4 heads do not divide dim 6"));
}

TEST(LayerErrors, ZeroHeadsIsAnErrorNotADivisionByZero) {
  Tracer t;
  layers::CausalSelfAttention(t, "attn", t.Input("x", {DType::kF32, {1, 2, 4}}), 0, init::Normal(0.02));
  EXPECT_THAT(t.status().message(), HasSubstr("attention 'attn': 0 heads do not divide dim 4"));
}

TEST(LayerErrors, AttentionOverANonSequenceNamesTheShape) {
  Tracer t;
  Tensor x = t.Input("x", {DType::kF32, {5, 6}});
  const int line = __LINE__ + 1;
  layers::CausalSelfAttention(t, "attn", x, 2, init::Normal(0.02));
  EXPECT_THAT(t.status().message(), HasSubstr(Here(line)));
  EXPECT_THAT(t.status().message(), HasSubstr("attention 'attn': input must be [batch, seq, dim], got f32[5,6]"));
}

TEST(LayerErrors, LayerWithAnEmptyNameIsAnErrorNamingTheCallersLine) {
  Tracer t;
  Tensor x = t.Input("x", {DType::kF32, {2, 4}});
  const int line = __LINE__ + 1;
  layers::LayerNorm(t, "", x, 4);
  EXPECT_THAT(t.status().message(), HasSubstr(Here(line) + ": empty name scope"));
}

TEST(LayerErrors, TracingAModelWithAFailingLayerReturnsTheCallersLine) {
  int line = 0;
  const ModelFunction model = [&](Tracer& t) {
    auto block = t.Scope("h0");
    Tensor x = t.Input("x", {DType::kF32, {2, 3}});
    line = __LINE__ + 1;
    return sum(layers::GeluMlp(t, "mlp", layers::Linear(t, "in", x, 2, 4, init::Normal(0.1)), 8, init::Normal(0.1)));
  };
  absl::StatusOr<ir::TrainStep> step = TraceTrainStep("m", model, Sgd({}));
  EXPECT_EQ(step.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(step.status().message(), HasSubstr(Here(line) + ": matmul: contracting dimensions differ: 3 vs 2"));
}

}  // namespace
}  // namespace tandem
