// The reference kernels of sources and elementwise ops.
#include <bit>
#include <cmath>
#include <limits>

#include "backends/cpu/kernel_threads.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/backends/cpu/kernel_test_util.h"

namespace tandem::cpu {
namespace {

using namespace kernel_test;  // NOLINT: test helpers
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::FloatEq;
using ::testing::FloatNear;
using ::testing::HasSubstr;
using ::testing::Pointwise;

// ---------------------------------------------------------------- sources

TEST(InputNode, IsNotAKernel) {
  absl::StatusOr<ir::HostTensor> result = TryEvaluate(ir::OpKind::kInput, F32({2}), {}, {});
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInternal);
}

TEST(ConstantKernel, FillsTheResultTypeWithValue) {
  ir::HostTensor f = Evaluate(ir::OpKind::kConstant, F32({2, 2}), {{"value", 1.5}}, {});
  EXPECT_THAT(Values(f), ElementsAre(1.5f, 1.5f, 1.5f, 1.5f));
  ir::HostTensor i = Evaluate(ir::OpKind::kConstant, I32({3}), {{"value", 7.0}}, {});
  EXPECT_THAT(i.ints(), ElementsAre(7, 7, 7));
  ir::HostTensor scalar = Evaluate(ir::OpKind::kConstant, F32({}), {{"value", -kInf * 1.0}}, {});
  EXPECT_THAT(Values(scalar), ElementsAre(-kInf));
}

// ---------------------------------------------------------------- elementwise

TEST(UnaryKernels, MatchHandComputedValues) {
  ir::HostTensor x = ir::HostTensor::FromFloats({4}, {-1.0f, 0.0f, 0.5f, 2.0f});
  auto run = [&](ir::OpKind op) { return Values(Evaluate(op, F32({4}), {}, {&x})); };
  EXPECT_THAT(run(ir::OpKind::kNeg), ElementsAre(1.0f, -0.0f, -0.5f, -2.0f));
  EXPECT_THAT(run(ir::OpKind::kExp), ElementsAre(FloatEq(0.36787944f), 1.0f, FloatEq(1.6487213f), FloatEq(7.389056f)));
  EXPECT_THAT(run(ir::OpKind::kTanh),
              ElementsAre(FloatEq(-0.7615942f), 0.0f, FloatEq(0.46211716f), FloatEq(0.9640276f)));
  EXPECT_THAT(run(ir::OpKind::kRelu), ElementsAre(0.0f, 0.0f, 0.5f, 2.0f));
  // gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
  EXPECT_THAT(run(ir::OpKind::kGelu), ElementsAre(FloatNear(-0.15880801f, 1e-6f), 0.0f, FloatNear(0.34571401f, 1e-6f),
                                                  FloatNear(1.95459769f, 1e-6f)));
  ir::HostTensor positive = ir::HostTensor::FromFloats({3}, {1.0f, 4.0f, 0.25f});
  EXPECT_THAT(Values(Evaluate(ir::OpKind::kSqrt, F32({3}), {}, {&positive})), ElementsAre(1.0f, 2.0f, 0.5f));
  EXPECT_THAT(Values(Evaluate(ir::OpKind::kLog, F32({3}), {}, {&positive})),
              ElementsAre(0.0f, FloatEq(1.3862944f), FloatEq(-1.3862944f)));
}

// rsqrt is 1 / sqrt(x) bit for bit, special values included: the rounded
// root divided into 1, never an approximate reciprocal square root.
TEST(RsqrtKernel, IsOneOverSqrtBitForBit) {
  const std::vector<float> xs = {0.25f, 1.0f, 2.0f, 3.0f, 1e-30f, 7e30f, 0.0f, -0.0f, -1.0f,
                                 std::numeric_limits<float>::infinity(), std::nanf("")};
  const int64_t n = static_cast<int64_t>(xs.size());
  ir::HostTensor x = ir::HostTensor::FromFloats({n}, xs);
  const std::vector<float> y = Values(Evaluate(ir::OpKind::kRsqrt, F32({n}), {}, {&x}));
  ASSERT_EQ(y.size(), xs.size());
  for (size_t i = 0; i < xs.size(); ++i) {
    const float expected = 1.0f / std::sqrt(xs[i]);
    EXPECT_EQ(std::bit_cast<uint32_t>(y[i]), std::bit_cast<uint32_t>(expected)) << "rsqrt(" << xs[i] << ")";
  }
  EXPECT_EQ(y[0], 2.0f);
  EXPECT_EQ(y[6], std::numeric_limits<float>::infinity());
  EXPECT_EQ(y[7], -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(y[8]));
}

// silu(x) = x sigmoid(x) and its derivative s (1 + x (1 - s)), against
// double precision, far out on both sides too: no e^|x| overflows into NaN.
TEST(SiluKernels, MatchDoublePrecisionAndStayFiniteFarOut) {
  const std::vector<float> xs = {-200.0f, -30.0f, -2.5f, -0.5f, 0.0f, 0.75f, 3.0f, 30.0f, 200.0f};
  const int64_t n = static_cast<int64_t>(xs.size());
  ir::HostTensor x = ir::HostTensor::FromFloats({n}, xs);
  ir::HostTensor dy = ir::HostTensor::FromFloats({n}, std::vector<float>(xs.size(), 2.0f));
  std::vector<float> y = Values(Evaluate(ir::OpKind::kSilu, F32({n}), {}, {&x}));
  std::vector<float> g = Values(Evaluate(ir::OpKind::kSiluGrad, F32({n}), {}, {&x, &dy}));
  for (int64_t i = 0; i < n; ++i) {
    const double v = xs[i];
    const double s = 1.0 / (1.0 + std::exp(-v));
    ASSERT_TRUE(std::isfinite(y[i]) && std::isfinite(g[i])) << xs[i];
    EXPECT_NEAR(y[i], v * s, 1e-6 * std::max(1.0, std::fabs(v))) << "silu(" << xs[i] << ")";
    EXPECT_NEAR(g[i], 2.0 * s * (1.0 + v * (1.0 - s)), 1e-6 * std::max(1.0, std::fabs(v))) << "silu'(" << xs[i] << ")";
  }
}

TEST(SinAndCosKernels, AreDoublePrecisionRoundedToF32) {
  const std::vector<float> xs = {-1000.5f, -3.14159f, -1.0f, 0.0f, 0.25f, 1.5707964f, 6.0f, 2047.0f};
  const int64_t n = static_cast<int64_t>(xs.size());
  ir::HostTensor x = ir::HostTensor::FromFloats({n}, xs);
  std::vector<float> s = Values(Evaluate(ir::OpKind::kSin, F32({n}), {}, {&x}));
  std::vector<float> c = Values(Evaluate(ir::OpKind::kCos, F32({n}), {}, {&x}));
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(s[i], static_cast<float>(std::sin(double{xs[i]}))) << "sin(" << xs[i] << ")";
    EXPECT_EQ(c[i], static_cast<float>(std::cos(double{xs[i]}))) << "cos(" << xs[i] << ")";
  }
}

// Distance from `expected` in units in the last place of the f32 result.
double UlpError(float actual, double expected) {
  const float rounded = static_cast<float>(expected);
  const double ulp = std::nextafter(std::fabs(rounded), kInf) - std::fabs(rounded);
  return std::fabs(actual - expected) / ulp;
}

TEST(ExpAndTanhKernels, StayWithinTwoUlpOfDoublePrecision) {
  std::vector<float> xs;
  for (float x = -87.0f; x < 88.5f; x += 0.01f) xs.push_back(x);
  const int64_t n = static_cast<int64_t>(xs.size());
  ir::HostTensor x = ir::HostTensor::FromFloats({n}, xs);
  std::vector<float> e = Values(Evaluate(ir::OpKind::kExp, F32({n}), {}, {&x}));
  std::vector<float> t = Values(Evaluate(ir::OpKind::kTanh, F32({n}), {}, {&x}));
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_LE(UlpError(e[i], std::exp(double{xs[i]})), 2.0) << "exp(" << xs[i] << ")";
    if (std::fabs(xs[i]) > 1e-30f) {
      ASSERT_LE(UlpError(t[i], std::tanh(double{xs[i]})), 2.0) << "tanh(" << xs[i] << ")";
    }
  }
}

TEST(ExpAndTanhKernels, HandleInfinitiesAndNan) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  ir::HostTensor x = ir::HostTensor::FromFloats({5}, {kInf, -kInf, nan, 100.0f, -120.0f});
  std::vector<float> e = Values(Evaluate(ir::OpKind::kExp, F32({5}), {}, {&x}));
  EXPECT_EQ(e[0], kInf);
  EXPECT_EQ(e[1], 0.0f);
  EXPECT_TRUE(std::isnan(e[2]));
  EXPECT_EQ(e[3], kInf);
  EXPECT_EQ(e[4], 0.0f);
  std::vector<float> t = Values(Evaluate(ir::OpKind::kTanh, F32({5}), {}, {&x}));
  EXPECT_EQ(t[0], 1.0f);
  EXPECT_EQ(t[1], -1.0f);
  EXPECT_TRUE(std::isnan(t[2]));
  EXPECT_EQ(t[3], 1.0f);
  EXPECT_EQ(t[4], -1.0f);
}

TEST(PipelineYieldKernel, IsIdentitySharingStorage) {
  ir::HostTensor x = ir::HostTensor::FromFloats({2}, {1.0f, 2.0f});
  ir::HostTensor y = Evaluate(ir::OpKind::kPipelineYield, F32({2}), {}, {&x});
  EXPECT_EQ(y.data(), x.data());
  EXPECT_TRUE(y.BitwiseEquals(x));
}

TEST(ConvertKernel, TruncatesF32ToI32TowardZeroAndSaturates) {
  ir::HostTensor x =
      ir::HostTensor::FromFloats({6}, {2.9f, -2.9f, 0.0f, 3e9f, -3e9f, std::numeric_limits<float>::quiet_NaN()});
  ir::HostTensor y = Evaluate(ir::OpKind::kConvert, I32({6}), {{"dtype", std::string("i32")}}, {&x});
  EXPECT_THAT(y.ints(), ElementsAre(2, -2, 0, std::numeric_limits<int32_t>::max(),
                                    std::numeric_limits<int32_t>::min(), 0));
}

TEST(ConvertKernel, WidensI32ToF32) {
  ir::HostTensor x = ir::HostTensor::FromInts({3}, {-4, 0, 65});
  ir::HostTensor y = Evaluate(ir::OpKind::kConvert, F32({3}), {{"dtype", std::string("f32")}}, {&x});
  EXPECT_THAT(Values(y), ElementsAre(-4.0f, 0.0f, 65.0f));
}

TEST(BinaryKernels, SameShapeMatchHandComputedValues) {
  ir::HostTensor a = ir::HostTensor::FromFloats({4}, {1.0f, -2.0f, 3.0f, 4.0f});
  ir::HostTensor b = ir::HostTensor::FromFloats({4}, {2.0f, -2.0f, 0.5f, -1.0f});
  auto run = [&](ir::OpKind op) { return Values(Evaluate(op, F32({4}), {}, {&a, &b})); };
  EXPECT_THAT(run(ir::OpKind::kAdd), ElementsAre(3.0f, -4.0f, 3.5f, 3.0f));
  EXPECT_THAT(run(ir::OpKind::kSub), ElementsAre(-1.0f, 0.0f, 2.5f, 5.0f));
  EXPECT_THAT(run(ir::OpKind::kMul), ElementsAre(2.0f, 4.0f, 1.5f, -4.0f));
  EXPECT_THAT(run(ir::OpKind::kDiv), ElementsAre(0.5f, 1.0f, 6.0f, -4.0f));
  EXPECT_THAT(run(ir::OpKind::kPow), ElementsAre(1.0f, 0.25f, FloatEq(1.7320508f), 0.25f));
  EXPECT_THAT(run(ir::OpKind::kMaximum), ElementsAre(2.0f, -2.0f, 3.0f, 4.0f));
  EXPECT_THAT(run(ir::OpKind::kEqual), ElementsAre(0.0f, 1.0f, 0.0f, 0.0f));
}

TEST(BinaryKernels, BroadcastRowVectorAlongLeadingAxes) {
  ir::HostTensor x = ir::HostTensor::FromFloats({2, 3}, {1, 2, 3, 4, 5, 6});
  ir::HostTensor bias = ir::HostTensor::FromFloats({3}, {10, 20, 30});
  EXPECT_THAT(Values(Evaluate(ir::OpKind::kAdd, F32({2, 3}), {}, {&x, &bias})), ElementsAre(11, 22, 33, 14, 25, 36));
  // The broadcast operand first.
  EXPECT_THAT(Values(Evaluate(ir::OpKind::kSub, F32({2, 3}), {}, {&bias, &x})), ElementsAre(9, 18, 27, 6, 15, 24));
}

TEST(BinaryKernels, BroadcastColumnAlongTrailingAxis) {
  ir::HostTensor x = ir::HostTensor::FromFloats({2, 3}, {1, 2, 3, 4, 5, 6});
  ir::HostTensor column = ir::HostTensor::FromFloats({2, 1}, {2, -1});
  EXPECT_THAT(Values(Evaluate(ir::OpKind::kMul, F32({2, 3}), {}, {&x, &column})), ElementsAre(2, 4, 6, -4, -5, -6));
}

TEST(BinaryKernels, BroadcastBothOperandsAndScalars) {
  ir::HostTensor column = ir::HostTensor::FromFloats({2, 1}, {1, 2});
  ir::HostTensor row = ir::HostTensor::FromFloats({1, 3}, {10, 20, 30});
  EXPECT_THAT(Values(Evaluate(ir::OpKind::kAdd, F32({2, 3}), {}, {&column, &row})),
              ElementsAre(11, 21, 31, 12, 22, 32));
  ir::HostTensor scalar = ir::HostTensor::Scalar(2.0f);
  EXPECT_THAT(Values(Evaluate(ir::OpKind::kDiv, F32({2, 1}), {}, {&column, &scalar})), ElementsAre(0.5f, 1.0f));
  ir::HostTensor other = ir::HostTensor::Scalar(3.0f);
  EXPECT_THAT(Values(Evaluate(ir::OpKind::kMul, F32({}), {}, {&scalar, &other})), ElementsAre(6.0f));
}

// NumPy's broadcast of two shapes (both broadcastable).
ir::Shape BroadcastShape(const ir::Shape& a_shape, const ir::Shape& b_shape) {
  ir::Shape out_shape(std::max(a_shape.size(), b_shape.size()));
  for (size_t i = 0; i < out_shape.size(); ++i) {
    const size_t from_end = out_shape.size() - 1 - i;
    const int64_t ea = from_end < a_shape.size() ? a_shape[a_shape.size() - 1 - from_end] : 1;
    const int64_t eb = from_end < b_shape.size() ? b_shape[b_shape.size() - 1 - from_end] : 1;
    out_shape[i] = std::max(ea, eb);
  }
  return out_shape;
}

TEST(BinaryKernels, GeneralBroadcastMatchesNaiveIndexing) {
  const std::vector<std::pair<ir::Shape, ir::Shape>> cases = {
      {{2, 1, 3}, {4, 1}}, {{3, 1, 5, 1}, {4, 1, 2}}, {{1, 4, 1}, {2, 1, 1, 6}}, {{5}, {3, 1}}};
  uint32_t seed = 1;
  for (const auto& [a_shape, b_shape] : cases) {
    const ir::Shape out_shape = BroadcastShape(a_shape, b_shape);
    ir::HostTensor a = RandomTensor(a_shape, seed++);
    ir::HostTensor b = RandomTensor(b_shape, seed++);
    ir::HostTensor out = Evaluate(ir::OpKind::kSub, F32(out_shape), {}, {&a, &b});
    for (int64_t flat = 0; flat < ir::NumElements(out_shape); ++flat) {
      const std::vector<int64_t> index = Unflatten(flat, out_shape);
      const float expected =
          a.f32()[BroadcastSource(index, a_shape)] - b.f32()[BroadcastSource(index, b_shape)];
      ASSERT_EQ(out.f32()[flat], expected)
          << ir::ShapeToString(a_shape) << " - " << ir::ShapeToString(b_shape) << " at " << flat;
    }
  }
}

TEST(BinaryKernels, BroadcastsCutIntoPiecesOnSeveralThreadsMatchNaiveIndexing) {
  // Long rows are cut into parts (a scalar or a row vector over 3 rows of
  // 140000), short rows are handed out in runs (35 rows of 3000 repeating
  // one value each); where and transpose take the same path.
  const std::vector<std::pair<ir::Shape, ir::Shape>> cases = {
      {{3, 140000}, {}}, {{3, 140000}, {140000}}, {{5, 7, 3000}, {7, 1}}, {{1}, {2, 70001}}};
  cpu::KernelThreads threads(2);
  uint32_t seed = 11;
  for (const auto& [a_shape, b_shape] : cases) {
    const ir::Shape out_shape = BroadcastShape(a_shape, b_shape);
    ir::HostTensor a = RandomTensor(a_shape, seed++);
    ir::HostTensor b = RandomTensor(b_shape, seed++);
    ir::HostTensor condition = RandomTensor(out_shape, seed++);
    const ir::HostTensor out =
        threads.Run([&] { return Evaluate(ir::OpKind::kDiv, F32(out_shape), {}, {&a, &b}); });
    const ir::HostTensor chosen =
        threads.Run([&] { return Evaluate(ir::OpKind::kWhere, F32(out_shape), {}, {&condition, &a, &b}); });
    for (int64_t flat = 0; flat < ir::NumElements(out_shape); ++flat) {
      const std::vector<int64_t> index = Unflatten(flat, out_shape);
      const float x = a.f32()[BroadcastSource(index, a_shape)], y = b.f32()[BroadcastSource(index, b_shape)];
      ASSERT_EQ(out.f32()[flat], x / y) << ir::ShapeToString(a_shape) << " / " << ir::ShapeToString(b_shape)
                                        << " at " << flat;
      ASSERT_EQ(chosen.f32()[flat], condition.f32()[flat] != 0.0f ? x : y) << "where, at " << flat;
    }
  }
  // A transpose whose rows are long: [2, 70000, 3] -> [3, 2, 70000].
  ir::HostTensor x = RandomTensor({2, 70000, 3}, seed++);
  const ir::HostTensor moved = threads.Run([&] {
    return Evaluate(ir::OpKind::kTranspose, F32({3, 2, 70000}), {{"permutation", std::vector<int64_t>{2, 0, 1}}},
                    {&x});
  });
  for (int64_t c = 0; c < 3; ++c) {
    for (int64_t i = 0; i < 2; ++i) {
      for (int64_t j = 0; j < 70000; ++j) {
        ASSERT_EQ(moved.f32()[(c * 2 + i) * 70000 + j], x.f32()[(i * 70000 + j) * 3 + c]) << c << " " << i << " " << j;
      }
    }
  }
}

TEST(BinaryKernels, RejectOperandsThatDoNotBroadcast) {
  ir::HostTensor a = ir::HostTensor::FromFloats({2, 3}, {1, 2, 3, 4, 5, 6});
  ir::HostTensor b = ir::HostTensor::FromFloats({2}, {1, 2});
  absl::StatusOr<ir::HostTensor> result = TryEvaluate(ir::OpKind::kAdd, F32({2, 3}), {}, {&a, &b});
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(result.status().message(), HasSubstr("add:"));
}

TEST(MaximumKernel, PropagatesNan) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  ir::HostTensor a = ir::HostTensor::FromFloats({3}, {nan, 1.0f, 2.0f});
  ir::HostTensor b = ir::HostTensor::FromFloats({3}, {1.0f, nan, 3.0f});
  std::vector<float> out = Values(Evaluate(ir::OpKind::kMaximum, F32({3}), {}, {&a, &b}));
  EXPECT_TRUE(std::isnan(out[0]));
  EXPECT_TRUE(std::isnan(out[1]));
  EXPECT_EQ(out[2], 3.0f);
}

TEST(WhereKernel, SelectsWhereConditionIsNonzeroWithBroadcast) {
  ir::HostTensor cond = ir::HostTensor::FromFloats({2, 1}, {1.0f, 0.0f});
  ir::HostTensor x = ir::HostTensor::FromFloats({2, 3}, {1, 2, 3, 4, 5, 6});
  ir::HostTensor y = ir::HostTensor::Scalar(-1.0f);
  EXPECT_THAT(Values(Evaluate(ir::OpKind::kWhere, F32({2, 3}), {}, {&cond, &x, &y})), ElementsAre(1, 2, 3, -1, -1, -1));
  ir::HostTensor row_cond = ir::HostTensor::FromFloats({3}, {0.0f, -2.0f, 0.0f});
  EXPECT_THAT(Values(Evaluate(ir::OpKind::kWhere, F32({2, 3}), {}, {&row_cond, &x, &y})),
              ElementsAre(-1, 2, -1, -1, 5, -1));
}

TEST(ReluGradKernel, PassesGradientOnlyWhereInputIsPositive) {
  ir::HostTensor x = ir::HostTensor::FromFloats({4}, {-1.0f, 0.0f, 0.5f, 3.0f});
  ir::HostTensor dy = ir::HostTensor::FromFloats({4}, {1.0f, 2.0f, 3.0f, 4.0f});
  EXPECT_THAT(Values(Evaluate(ir::OpKind::kReluGrad, F32({4}), {}, {&x, &dy})), ElementsAre(0.0f, 0.0f, 3.0f, 4.0f));
}

TEST(GeluGradKernel, MatchesCentralDifferenceOfGelu) {
  const std::vector<float> xs = {-3.0f, -1.0f, -0.3f, 0.0f, 0.4f, 1.0f, 2.5f};
  const int64_t n = static_cast<int64_t>(xs.size());
  ir::HostTensor x = ir::HostTensor::FromFloats({n}, xs);
  ir::HostTensor dy = ir::HostTensor::FromFloats({n}, std::vector<float>(xs.size(), 2.0f));
  std::vector<float> grad = Values(Evaluate(ir::OpKind::kGeluGrad, F32({n}), {}, {&x, &dy}));
  auto gelu = [](double v) {
    return 0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
  };
  for (int64_t i = 0; i < n; ++i) {
    const double h = 1e-5;
    const double derivative = (gelu(xs[i] + h) - gelu(xs[i] - h)) / (2 * h);
    EXPECT_NEAR(grad[i], 2.0 * derivative, 1e-5) << "x = " << xs[i];
  }
}

}  // namespace
}  // namespace tandem::cpu
