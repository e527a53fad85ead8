#include "ir/kernels.h"

#include <cmath>
#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <random>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/attributes.h"
#include "ir/graph.h"
#include "ir/host_tensor.h"
#include "ir/op.h"

namespace tandem::ir {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::FloatEq;
using ::testing::FloatNear;
using ::testing::HasSubstr;
using ::testing::Pointwise;

constexpr float kInf = std::numeric_limits<float>::infinity();

TensorType F32(Shape shape) { return {DType::kF32, std::move(shape)}; }
TensorType I32(Shape shape) { return {DType::kI32, std::move(shape)}; }

// A node of `op` with result type `type`, whose operands are the values
// 0..n-1 (the kernels only look at the operand tensors).
Node MakeNode(OpKind op, TensorType type, Attributes attributes, size_t num_operands) {
  Node node;
  node.op = op;
  node.type = std::move(type);
  node.attributes = std::move(attributes);
  for (size_t i = 0; i < num_operands; ++i) node.operands.push_back(static_cast<ValueId>(i));
  return node;
}

absl::StatusOr<HostTensor> TryEvaluate(OpKind op, TensorType type, Attributes attributes,
                                       std::vector<const HostTensor*> operands) {
  Node node = MakeNode(op, std::move(type), std::move(attributes), operands.size());
  return EvaluateNode(node, operands);
}

HostTensor Evaluate(OpKind op, TensorType type, Attributes attributes,
                    std::vector<const HostTensor*> operands) {
  absl::StatusOr<HostTensor> result =
      TryEvaluate(op, std::move(type), std::move(attributes), std::move(operands));
  EXPECT_TRUE(result.ok()) << result.status();
  if (!result.ok()) return HostTensor();
  return *std::move(result);
}

std::vector<float> Values(const HostTensor& tensor) {
  if (!tensor.defined()) return {};
  return std::vector<float>(tensor.floats().begin(), tensor.floats().end());
}

std::vector<float> RandomFloats(int64_t count, uint32_t seed, float low = -2.0f,
                                float high = 2.0f) {
  std::mt19937 engine(seed);
  std::uniform_real_distribution<float> distribution(low, high);
  std::vector<float> values(count);
  for (float& v : values) v = distribution(engine);
  return values;
}

HostTensor RandomTensor(Shape shape, uint32_t seed) {
  return HostTensor::FromFloats(shape, RandomFloats(NumElements(shape), seed));
}

std::vector<int64_t> Strides(const Shape& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int axis = static_cast<int>(shape.size()) - 2; axis >= 0; --axis) {
    strides[axis] = strides[axis + 1] * shape[axis + 1];
  }
  return strides;
}

// The multi-index of flat position `flat` in `shape`.
std::vector<int64_t> Unflatten(int64_t flat, const Shape& shape) {
  std::vector<int64_t> index(shape.size());
  for (int axis = static_cast<int>(shape.size()) - 1; axis >= 0; --axis) {
    index[axis] = flat % shape[axis];
    flat /= shape[axis];
  }
  return index;
}

// The flat position in `in_shape` (right-aligned, extent 1 broadcast) that
// output multi-index `out_index` reads.
int64_t BroadcastSource(const std::vector<int64_t>& out_index, const Shape& in_shape) {
  const size_t offset = out_index.size() - in_shape.size();
  const std::vector<int64_t> strides = Strides(in_shape);
  int64_t flat = 0;
  for (size_t axis = 0; axis < in_shape.size(); ++axis) {
    if (in_shape[axis] != 1) flat += out_index[axis + offset] * strides[axis];
  }
  return flat;
}

// ---------------------------------------------------------------- sources

TEST(InputNode, IsNotAKernel) {
  absl::StatusOr<HostTensor> result = TryEvaluate(OpKind::kInput, F32({2}), {}, {});
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInternal);
}

TEST(ConstantKernel, FillsTheResultTypeWithValue) {
  HostTensor f = Evaluate(OpKind::kConstant, F32({2, 2}), {{"value", 1.5}}, {});
  EXPECT_THAT(Values(f), ElementsAre(1.5f, 1.5f, 1.5f, 1.5f));
  HostTensor i = Evaluate(OpKind::kConstant, I32({3}), {{"value", 7.0}}, {});
  EXPECT_THAT(i.ints(), ElementsAre(7, 7, 7));
  HostTensor scalar = Evaluate(OpKind::kConstant, F32({}), {{"value", -kInf * 1.0}}, {});
  EXPECT_THAT(Values(scalar), ElementsAre(-kInf));
}

// ---------------------------------------------------------------- elementwise

TEST(UnaryKernels, MatchHandComputedValues) {
  HostTensor x = HostTensor::FromFloats({4}, {-1.0f, 0.0f, 0.5f, 2.0f});
  auto run = [&](OpKind op) { return Values(Evaluate(op, F32({4}), {}, {&x})); };
  EXPECT_THAT(run(OpKind::kNeg), ElementsAre(1.0f, -0.0f, -0.5f, -2.0f));
  EXPECT_THAT(run(OpKind::kExp),
              ElementsAre(FloatEq(0.36787944f), 1.0f, FloatEq(1.6487213f), FloatEq(7.389056f)));
  EXPECT_THAT(run(OpKind::kTanh),
              ElementsAre(FloatEq(-0.7615942f), 0.0f, FloatEq(0.46211716f), FloatEq(0.9640276f)));
  EXPECT_THAT(run(OpKind::kRelu), ElementsAre(0.0f, 0.0f, 0.5f, 2.0f));
  // gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
  EXPECT_THAT(run(OpKind::kGelu), ElementsAre(FloatNear(-0.15880801f, 1e-6f), 0.0f,
                                              FloatNear(0.34571401f, 1e-6f),
                                              FloatNear(1.95459769f, 1e-6f)));
  HostTensor positive = HostTensor::FromFloats({3}, {1.0f, 4.0f, 0.25f});
  EXPECT_THAT(Values(Evaluate(OpKind::kSqrt, F32({3}), {}, {&positive})),
              ElementsAre(1.0f, 2.0f, 0.5f));
  EXPECT_THAT(Values(Evaluate(OpKind::kLog, F32({3}), {}, {&positive})),
              ElementsAre(0.0f, FloatEq(1.3862944f), FloatEq(-1.3862944f)));
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
  HostTensor x = HostTensor::FromFloats({n}, xs);
  std::vector<float> e = Values(Evaluate(OpKind::kExp, F32({n}), {}, {&x}));
  std::vector<float> t = Values(Evaluate(OpKind::kTanh, F32({n}), {}, {&x}));
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_LE(UlpError(e[i], std::exp(double{xs[i]})), 2.0) << "exp(" << xs[i] << ")";
    if (std::fabs(xs[i]) > 1e-30f) {
      ASSERT_LE(UlpError(t[i], std::tanh(double{xs[i]})), 2.0) << "tanh(" << xs[i] << ")";
    }
  }
}

TEST(ExpAndTanhKernels, HandleInfinitiesAndNan) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  HostTensor x = HostTensor::FromFloats({5}, {kInf, -kInf, nan, 100.0f, -120.0f});
  std::vector<float> e = Values(Evaluate(OpKind::kExp, F32({5}), {}, {&x}));
  EXPECT_EQ(e[0], kInf);
  EXPECT_EQ(e[1], 0.0f);
  EXPECT_TRUE(std::isnan(e[2]));
  EXPECT_EQ(e[3], kInf);
  EXPECT_EQ(e[4], 0.0f);
  std::vector<float> t = Values(Evaluate(OpKind::kTanh, F32({5}), {}, {&x}));
  EXPECT_EQ(t[0], 1.0f);
  EXPECT_EQ(t[1], -1.0f);
  EXPECT_TRUE(std::isnan(t[2]));
  EXPECT_EQ(t[3], 1.0f);
  EXPECT_EQ(t[4], -1.0f);
}

TEST(PipelineYieldKernel, IsIdentitySharingStorage) {
  HostTensor x = HostTensor::FromFloats({2}, {1.0f, 2.0f});
  HostTensor y = Evaluate(OpKind::kPipelineYield, F32({2}), {}, {&x});
  EXPECT_EQ(y.data(), x.data());
  EXPECT_TRUE(y.BitwiseEquals(x));
}

TEST(ConvertKernel, TruncatesF32ToI32TowardZeroAndSaturates) {
  HostTensor x = HostTensor::FromFloats(
      {6}, {2.9f, -2.9f, 0.0f, 3e9f, -3e9f, std::numeric_limits<float>::quiet_NaN()});
  HostTensor y = Evaluate(OpKind::kConvert, I32({6}), {{"dtype", std::string("i32")}}, {&x});
  EXPECT_THAT(y.ints(), ElementsAre(2, -2, 0, std::numeric_limits<int32_t>::max(),
                                    std::numeric_limits<int32_t>::min(), 0));
}

TEST(ConvertKernel, WidensI32ToF32) {
  HostTensor x = HostTensor::FromInts({3}, {-4, 0, 65});
  HostTensor y = Evaluate(OpKind::kConvert, F32({3}), {{"dtype", std::string("f32")}}, {&x});
  EXPECT_THAT(Values(y), ElementsAre(-4.0f, 0.0f, 65.0f));
}

TEST(BinaryKernels, SameShapeMatchHandComputedValues) {
  HostTensor a = HostTensor::FromFloats({4}, {1.0f, -2.0f, 3.0f, 4.0f});
  HostTensor b = HostTensor::FromFloats({4}, {2.0f, -2.0f, 0.5f, -1.0f});
  auto run = [&](OpKind op) { return Values(Evaluate(op, F32({4}), {}, {&a, &b})); };
  EXPECT_THAT(run(OpKind::kAdd), ElementsAre(3.0f, -4.0f, 3.5f, 3.0f));
  EXPECT_THAT(run(OpKind::kSub), ElementsAre(-1.0f, 0.0f, 2.5f, 5.0f));
  EXPECT_THAT(run(OpKind::kMul), ElementsAre(2.0f, 4.0f, 1.5f, -4.0f));
  EXPECT_THAT(run(OpKind::kDiv), ElementsAre(0.5f, 1.0f, 6.0f, -4.0f));
  EXPECT_THAT(run(OpKind::kPow), ElementsAre(1.0f, 0.25f, FloatEq(1.7320508f), 0.25f));
  EXPECT_THAT(run(OpKind::kMaximum), ElementsAre(2.0f, -2.0f, 3.0f, 4.0f));
  EXPECT_THAT(run(OpKind::kEqual), ElementsAre(0.0f, 1.0f, 0.0f, 0.0f));
}

TEST(BinaryKernels, BroadcastRowVectorAlongLeadingAxes) {
  HostTensor x = HostTensor::FromFloats({2, 3}, {1, 2, 3, 4, 5, 6});
  HostTensor bias = HostTensor::FromFloats({3}, {10, 20, 30});
  EXPECT_THAT(Values(Evaluate(OpKind::kAdd, F32({2, 3}), {}, {&x, &bias})),
              ElementsAre(11, 22, 33, 14, 25, 36));
  // The broadcast operand first.
  EXPECT_THAT(Values(Evaluate(OpKind::kSub, F32({2, 3}), {}, {&bias, &x})),
              ElementsAre(9, 18, 27, 6, 15, 24));
}

TEST(BinaryKernels, BroadcastColumnAlongTrailingAxis) {
  HostTensor x = HostTensor::FromFloats({2, 3}, {1, 2, 3, 4, 5, 6});
  HostTensor column = HostTensor::FromFloats({2, 1}, {2, -1});
  EXPECT_THAT(Values(Evaluate(OpKind::kMul, F32({2, 3}), {}, {&x, &column})),
              ElementsAre(2, 4, 6, -4, -5, -6));
}

TEST(BinaryKernels, BroadcastBothOperandsAndScalars) {
  HostTensor column = HostTensor::FromFloats({2, 1}, {1, 2});
  HostTensor row = HostTensor::FromFloats({1, 3}, {10, 20, 30});
  EXPECT_THAT(Values(Evaluate(OpKind::kAdd, F32({2, 3}), {}, {&column, &row})),
              ElementsAre(11, 21, 31, 12, 22, 32));
  HostTensor scalar = HostTensor::Scalar(2.0f);
  EXPECT_THAT(Values(Evaluate(OpKind::kDiv, F32({2, 1}), {}, {&column, &scalar})),
              ElementsAre(0.5f, 1.0f));
  HostTensor other = HostTensor::Scalar(3.0f);
  EXPECT_THAT(Values(Evaluate(OpKind::kMul, F32({}), {}, {&scalar, &other})), ElementsAre(6.0f));
}

TEST(BinaryKernels, GeneralBroadcastMatchesNaiveIndexing) {
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{2, 1, 3}, {4, 1}}, {{3, 1, 5, 1}, {4, 1, 2}}, {{1, 4, 1}, {2, 1, 1, 6}}, {{5}, {3, 1}}};
  uint32_t seed = 1;
  for (const auto& [a_shape, b_shape] : cases) {
    Shape out_shape(std::max(a_shape.size(), b_shape.size()));
    for (size_t i = 0; i < out_shape.size(); ++i) {
      const size_t from_end = out_shape.size() - 1 - i;
      const int64_t ea = from_end < a_shape.size() ? a_shape[a_shape.size() - 1 - from_end] : 1;
      const int64_t eb = from_end < b_shape.size() ? b_shape[b_shape.size() - 1 - from_end] : 1;
      out_shape[i] = std::max(ea, eb);
    }
    HostTensor a = RandomTensor(a_shape, seed++);
    HostTensor b = RandomTensor(b_shape, seed++);
    HostTensor out = Evaluate(OpKind::kSub, F32(out_shape), {}, {&a, &b});
    for (int64_t flat = 0; flat < NumElements(out_shape); ++flat) {
      const std::vector<int64_t> index = Unflatten(flat, out_shape);
      const float expected =
          a.f32()[BroadcastSource(index, a_shape)] - b.f32()[BroadcastSource(index, b_shape)];
      ASSERT_EQ(out.f32()[flat], expected) << ShapeToString(a_shape) << " - "
                                           << ShapeToString(b_shape) << " at " << flat;
    }
  }
}

TEST(BinaryKernels, RejectOperandsThatDoNotBroadcast) {
  HostTensor a = HostTensor::FromFloats({2, 3}, {1, 2, 3, 4, 5, 6});
  HostTensor b = HostTensor::FromFloats({2}, {1, 2});
  absl::StatusOr<HostTensor> result = TryEvaluate(OpKind::kAdd, F32({2, 3}), {}, {&a, &b});
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(result.status().message(), HasSubstr("add:"));
}

TEST(MaximumKernel, PropagatesNan) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  HostTensor a = HostTensor::FromFloats({3}, {nan, 1.0f, 2.0f});
  HostTensor b = HostTensor::FromFloats({3}, {1.0f, nan, 3.0f});
  std::vector<float> out = Values(Evaluate(OpKind::kMaximum, F32({3}), {}, {&a, &b}));
  EXPECT_TRUE(std::isnan(out[0]));
  EXPECT_TRUE(std::isnan(out[1]));
  EXPECT_EQ(out[2], 3.0f);
}

TEST(WhereKernel, SelectsWhereConditionIsNonzeroWithBroadcast) {
  HostTensor cond = HostTensor::FromFloats({2, 1}, {1.0f, 0.0f});
  HostTensor x = HostTensor::FromFloats({2, 3}, {1, 2, 3, 4, 5, 6});
  HostTensor y = HostTensor::Scalar(-1.0f);
  EXPECT_THAT(Values(Evaluate(OpKind::kWhere, F32({2, 3}), {}, {&cond, &x, &y})),
              ElementsAre(1, 2, 3, -1, -1, -1));
  HostTensor row_cond = HostTensor::FromFloats({3}, {0.0f, -2.0f, 0.0f});
  EXPECT_THAT(Values(Evaluate(OpKind::kWhere, F32({2, 3}), {}, {&row_cond, &x, &y})),
              ElementsAre(-1, 2, -1, -1, 5, -1));
}

TEST(ReluGradKernel, PassesGradientOnlyWhereInputIsPositive) {
  HostTensor x = HostTensor::FromFloats({4}, {-1.0f, 0.0f, 0.5f, 3.0f});
  HostTensor dy = HostTensor::FromFloats({4}, {1.0f, 2.0f, 3.0f, 4.0f});
  EXPECT_THAT(Values(Evaluate(OpKind::kReluGrad, F32({4}), {}, {&x, &dy})),
              ElementsAre(0.0f, 0.0f, 3.0f, 4.0f));
}

TEST(GeluGradKernel, MatchesCentralDifferenceOfGelu) {
  const std::vector<float> xs = {-3.0f, -1.0f, -0.3f, 0.0f, 0.4f, 1.0f, 2.5f};
  const int64_t n = static_cast<int64_t>(xs.size());
  HostTensor x = HostTensor::FromFloats({n}, xs);
  HostTensor dy = HostTensor::FromFloats({n}, std::vector<float>(xs.size(), 2.0f));
  std::vector<float> grad = Values(Evaluate(OpKind::kGeluGrad, F32({n}), {}, {&x, &dy}));
  auto gelu = [](double v) {
    return 0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
  };
  for (int64_t i = 0; i < n; ++i) {
    const double h = 1e-5;
    const double derivative = (gelu(xs[i] + h) - gelu(xs[i] - h)) / (2 * h);
    EXPECT_NEAR(grad[i], 2.0 * derivative, 1e-5) << "x = " << xs[i];
  }
}

// ---------------------------------------------------------------- reductions

// Reference reduction in index order: for each output element, a plain loop
// over its reduced elements in row-major order.
std::vector<float> NaiveReduceSum(const HostTensor& x, const std::vector<int64_t>& axes) {
  const Shape& shape = x.shape();
  Shape out_shape;
  for (size_t axis = 0; axis < shape.size(); ++axis) {
    if (std::find(axes.begin(), axes.end(), static_cast<int64_t>(axis)) == axes.end()) {
      out_shape.push_back(shape[axis]);
    }
  }
  std::vector<float> out(NumElements(out_shape), 0.0f);
  const std::vector<int64_t> out_strides = Strides(out_shape);
  for (int64_t flat = 0; flat < x.num_elements(); ++flat) {
    const std::vector<int64_t> index = Unflatten(flat, shape);
    int64_t target = 0;
    size_t kept = 0;
    for (size_t axis = 0; axis < shape.size(); ++axis) {
      if (std::find(axes.begin(), axes.end(), static_cast<int64_t>(axis)) == axes.end()) {
        target += index[axis] * out_strides[kept++];
      }
    }
    out[target] += x.f32()[flat];
  }
  return out;
}

TEST(ReduceSumKernel, OverLastAxis) {
  HostTensor x = HostTensor::FromFloats({2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_THAT(Values(Evaluate(OpKind::kReduceSum, F32({2}), {{"axes", std::vector<int64_t>{1}}},
                              {&x})),
              ElementsAre(6, 15));
  EXPECT_THAT(Values(Evaluate(OpKind::kReduceSum, F32({2, 1}),
                              {{"axes", std::vector<int64_t>{1}}, {"keep_dims", int64_t{1}}},
                              {&x})),
              ElementsAre(6, 15));
}

TEST(ReduceSumKernel, OverLeadingAxesLikeABiasGradient) {
  HostTensor x = HostTensor::FromFloats({2, 2, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  EXPECT_THAT(Values(Evaluate(OpKind::kReduceSum, F32({3}),
                              {{"axes", std::vector<int64_t>{0, 1}}}, {&x})),
              ElementsAre(22, 26, 30));
}

TEST(ReduceSumKernel, OverSeveralAxesWithAndWithoutKeepDims) {
  HostTensor x = RandomTensor({3, 4, 5, 6}, 11);
  const std::vector<std::vector<int64_t>> axis_sets = {{0, 2}, {1, 3}, {0, 1, 2, 3}, {2}, {0, 3}};
  for (const std::vector<int64_t>& axes : axis_sets) {
    const std::vector<float> expected = NaiveReduceSum(x, axes);
    Shape dropped;
    Shape kept;
    for (int64_t axis = 0; axis < 4; ++axis) {
      const bool reduced = std::find(axes.begin(), axes.end(), axis) != axes.end();
      if (!reduced) dropped.push_back(x.shape()[axis]);
      kept.push_back(reduced ? 1 : x.shape()[axis]);
    }
    HostTensor out = Evaluate(OpKind::kReduceSum, F32(dropped), {{"axes", axes}}, {&x});
    EXPECT_THAT(Values(out), ElementsAreArray(expected));
    HostTensor kept_out = Evaluate(OpKind::kReduceSum, F32(kept),
                                   {{"axes", axes}, {"keep_dims", int64_t{1}}}, {&x});
    EXPECT_THAT(Values(kept_out), ElementsAreArray(expected));
  }
}

TEST(ReduceSumKernel, AccumulatesInIndexOrderInF32) {
  // In index order: ((1e8 + 1) + -1e8) + 1 = 1 in f32; a pairwise sum gives 0.
  HostTensor row = HostTensor::FromFloats({4}, {1e8f, 1.0f, -1e8f, 1.0f});
  EXPECT_THAT(Values(Evaluate(OpKind::kReduceSum, F32({}), {{"axes", std::vector<int64_t>{0}}},
                              {&row})),
              ElementsAre(1.0f));
  HostTensor column = HostTensor::FromFloats({4, 2}, {1e8f, 0, 1, 0, -1e8f, 0, 1, 0});
  EXPECT_THAT(Values(Evaluate(OpKind::kReduceSum, F32({2}), {{"axes", std::vector<int64_t>{0}}},
                              {&column})),
              ElementsAre(1.0f, 0.0f));
}

TEST(ReduceMeanKernel, DividesTheSumByTheReducedCount) {
  HostTensor x = HostTensor::FromFloats({2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  EXPECT_THAT(Values(Evaluate(OpKind::kReduceMean, F32({2}),
                              {{"axes", std::vector<int64_t>{0, 2}}}, {&x})),
              ElementsAre(3.5f, 5.5f));
  EXPECT_THAT(Values(Evaluate(OpKind::kReduceMean, F32({1, 1, 1}),
                              {{"axes", std::vector<int64_t>{0, 1, 2}}, {"keep_dims", int64_t{1}}},
                              {&x})),
              ElementsAre(4.5f));
}

TEST(ReduceMaxKernel, TakesTheLargestOverAxes) {
  HostTensor x = HostTensor::FromFloats({2, 3}, {1, 9, -3, -4, -5, -6});
  EXPECT_THAT(Values(Evaluate(OpKind::kReduceMax, F32({2}), {{"axes", std::vector<int64_t>{1}}},
                              {&x})),
              ElementsAre(9, -4));
  EXPECT_THAT(Values(Evaluate(OpKind::kReduceMax, F32({1, 3}),
                              {{"axes", std::vector<int64_t>{0}}, {"keep_dims", int64_t{1}}},
                              {&x})),
              ElementsAre(1, 9, -3));
}

TEST(ReduceKernels, RejectUnsortedAxes) {
  HostTensor x = RandomTensor({2, 3, 4}, 3);
  absl::StatusOr<HostTensor> result = TryEvaluate(
      OpKind::kReduceSum, F32({3}), {{"axes", std::vector<int64_t>{2, 0}}}, {&x});
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInternal);
}

// ---------------------------------------------------------------- data movement

HostTensor NaiveTranspose(const HostTensor& x, const std::vector<int64_t>& perm) {
  Shape out_shape;
  for (int64_t axis : perm) out_shape.push_back(x.shape()[axis]);
  HostTensor out(TensorType{x.dtype(), out_shape});
  const std::vector<int64_t> in_strides = Strides(x.shape());
  for (int64_t flat = 0; flat < out.num_elements(); ++flat) {
    const std::vector<int64_t> index = Unflatten(flat, out_shape);
    int64_t source = 0;
    for (size_t i = 0; i < perm.size(); ++i) source += index[i] * in_strides[perm[i]];
    out.i32()[flat] = x.i32()[source];  // 4-byte elements, any dtype
  }
  return out;
}

TEST(ReshapeKernel, SharesStorageUnderTheNewShape) {
  HostTensor x = HostTensor::FromFloats({2, 3}, {1, 2, 3, 4, 5, 6});
  HostTensor y = Evaluate(OpKind::kReshape, F32({3, 2}), {{"shape", std::vector<int64_t>{3, 2}}},
                          {&x});
  EXPECT_EQ(y.data(), x.data());
  EXPECT_EQ(y.shape(), (Shape{3, 2}));
}

TEST(TransposeKernel, SwapsAMatrix) {
  HostTensor x = HostTensor::FromFloats({2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_THAT(Values(Evaluate(OpKind::kTranspose, F32({3, 2}),
                              {{"permutation", std::vector<int64_t>{1, 0}}}, {&x})),
              ElementsAre(1, 4, 2, 5, 3, 6));
}

TEST(TransposeKernel, PermutationsMatchNaiveIndexing) {
  const std::vector<std::pair<Shape, std::vector<int64_t>>> cases = {
      {{3, 17, 19}, {0, 2, 1}},          // last two axes, tiles with remainders
      {{2, 5, 3, 4}, {0, 2, 1, 3}},      // attention heads
      {{2, 3, 4}, {2, 0, 1}},            // general
      {{4, 1, 3, 2}, {3, 2, 1, 0}},      // reversal through an extent-1 axis
      {{2, 3, 4, 5}, {1, 0, 3, 2}},      // two swaps
      {{2, 3, 4}, {0, 1, 2}},            // identity
  };
  uint32_t seed = 100;
  for (const auto& [shape, perm] : cases) {
    HostTensor x = RandomTensor(shape, seed++);
    HostTensor expected = NaiveTranspose(x, perm);
    HostTensor out = Evaluate(OpKind::kTranspose, expected.type(), {{"permutation", perm}}, {&x});
    EXPECT_TRUE(out.BitwiseEquals(expected)) << ShapeToString(shape);
  }
}

TEST(TransposeKernel, MovesI32Elements) {
  HostTensor x = HostTensor::FromInts({2, 3}, {1, 2, 3, 4, 5, 6});
  HostTensor out = Evaluate(OpKind::kTranspose, I32({3, 2}),
                            {{"permutation", std::vector<int64_t>{1, 0}}}, {&x});
  EXPECT_THAT(out.ints(), ElementsAre(1, 4, 2, 5, 3, 6));
}

TEST(BroadcastKernel, StretchesExtentOneAndMissingAxes) {
  HostTensor x = HostTensor::FromFloats({2, 1}, {1, 2});
  EXPECT_THAT(Values(Evaluate(OpKind::kBroadcast, F32({2, 2, 3}),
                              {{"shape", std::vector<int64_t>{2, 2, 3}}}, {&x})),
              ElementsAre(1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2));
  HostTensor row = HostTensor::FromInts({3}, {7, 8, 9});
  HostTensor out = Evaluate(OpKind::kBroadcast, I32({2, 3}), {{"shape", std::vector<int64_t>{2, 3}}},
                            {&row});
  EXPECT_THAT(out.ints(), ElementsAre(7, 8, 9, 7, 8, 9));
}

TEST(SliceKernel, TakesARangeAlongAMiddleAxis) {
  HostTensor x = HostTensor::FromFloats({2, 4, 2}, {0, 1, 2, 3, 4, 5, 6, 7,
                                                    8, 9, 10, 11, 12, 13, 14, 15});
  EXPECT_THAT(Values(Evaluate(OpKind::kSlice, F32({2, 2, 2}),
                              {{"axis", int64_t{1}}, {"start", int64_t{1}}, {"limit", int64_t{3}}},
                              {&x})),
              ElementsAre(2, 3, 4, 5, 10, 11, 12, 13));
}

TEST(SliceKernel, SplitsI32LabelsAlongTheBatch) {
  HostTensor labels = HostTensor::FromInts({4, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  HostTensor out = Evaluate(OpKind::kSlice, I32({2, 2}),
                            {{"axis", int64_t{0}}, {"start", int64_t{2}}, {"limit", int64_t{4}}},
                            {&labels});
  EXPECT_THAT(out.ints(), ElementsAre(5, 6, 7, 8));
}

TEST(ConcatKernel, JoinsAnyNumberOfOperandsAlongAnAxis) {
  HostTensor a = HostTensor::FromFloats({2, 1}, {1, 2});
  HostTensor b = HostTensor::FromFloats({2, 2}, {3, 4, 5, 6});
  HostTensor c = HostTensor::FromFloats({2, 1}, {7, 8});
  EXPECT_THAT(Values(Evaluate(OpKind::kConcat, F32({2, 4}), {{"axis", int64_t{1}}}, {&a, &b, &c})),
              ElementsAre(1, 3, 4, 7, 2, 5, 6, 8));
  HostTensor d = HostTensor::FromFloats({1, 2}, {9, 10});
  EXPECT_THAT(Values(Evaluate(OpKind::kConcat, F32({3, 2}), {{"axis", int64_t{0}}}, {&b, &d})),
              ElementsAre(3, 4, 5, 6, 9, 10));
  EXPECT_THAT(Values(Evaluate(OpKind::kConcat, F32({2, 1}), {{"axis", int64_t{0}}}, {&a})),
              ElementsAre(1, 2));
}

// ---------------------------------------------------------------- matmul

// a[batch..., M, K] x b[batch..., K, N] in double, with the flags and batch
// modes of matmul.
std::vector<float> NaiveMatMul(const HostTensor& a, const HostTensor& b, bool ta, bool tb) {
  const Shape& as = a.shape();
  const Shape& bs = b.shape();
  const size_t ra = as.size();
  const size_t rb = bs.size();
  const int64_t m = ta ? as[ra - 1] : as[ra - 2];
  const int64_t k = ta ? as[ra - 2] : as[ra - 1];
  const int64_t n = tb ? bs[rb - 2] : bs[rb - 1];
  const int64_t a_batch = NumElements(as) / (m * k);
  const int64_t b_batch = NumElements(bs) / (k * n);
  const int64_t batch = std::max(a_batch, b_batch);
  std::vector<float> out(batch * m * n);
  for (int64_t e = 0; e < batch; ++e) {
    const float* pa = a.f32() + (a_batch == 1 ? 0 : e * m * k);
    const float* pb = b.f32() + (b_batch == 1 ? 0 : e * k * n);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0;
        for (int64_t p = 0; p < k; ++p) {
          const float av = ta ? pa[p * m + i] : pa[i * k + p];
          const float bv = tb ? pb[j * k + p] : pb[p * n + j];
          sum += static_cast<double>(av) * bv;
        }
        out[(e * m + i) * n + j] = static_cast<float>(sum);
      }
    }
  }
  return out;
}

Attributes Flags(bool ta, bool tb) {
  return {{"transpose_a", int64_t{ta}}, {"transpose_b", int64_t{tb}}};
}

TEST(MatMulKernel, MatchesHandComputedProduct) {
  HostTensor a = HostTensor::FromFloats({2, 3}, {1, 2, 3, 4, 5, 6});
  HostTensor b = HostTensor::FromFloats({3, 2}, {7, 8, 9, 10, 11, 12});
  EXPECT_THAT(Values(Evaluate(OpKind::kMatMul, F32({2, 2}), Flags(false, false), {&a, &b})),
              ElementsAre(58, 64, 139, 154));
}

TEST(MatMulKernel, TransposeFlagsMatchNaiveProduct) {
  const int64_t m = 5, k = 7, n = 3;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      HostTensor a = RandomTensor(ta ? Shape{k, m} : Shape{m, k}, 1 + ta);
      HostTensor b = RandomTensor(tb ? Shape{n, k} : Shape{k, n}, 3 + tb);
      HostTensor out = Evaluate(OpKind::kMatMul, F32({m, n}), Flags(ta, tb), {&a, &b});
      EXPECT_THAT(Values(out), Pointwise(FloatNear(1e-5f), NaiveMatMul(a, b, ta, tb)))
          << "transpose_a=" << ta << " transpose_b=" << tb;
    }
  }
}

TEST(MatMulKernel, EqualBatchAxesMultiplyEntryByEntry) {
  const int64_t m = 4, k = 6, n = 5;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      HostTensor a = RandomTensor(ta ? Shape{2, 3, k, m} : Shape{2, 3, m, k}, 10 + ta);
      HostTensor b = RandomTensor(tb ? Shape{2, 3, n, k} : Shape{2, 3, k, n}, 20 + tb);
      HostTensor out = Evaluate(OpKind::kMatMul, F32({2, 3, m, n}), Flags(ta, tb), {&a, &b});
      EXPECT_THAT(Values(out), Pointwise(FloatNear(1e-5f), NaiveMatMul(a, b, ta, tb)))
          << "transpose_a=" << ta << " transpose_b=" << tb;
    }
  }
}

TEST(MatMulKernel, RankTwoOperandIsReusedForEveryBatchEntry) {
  const int64_t m = 3, k = 4, n = 6;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      // Rank-2 b (folded into one gemm when a is not transposed).
      HostTensor a = RandomTensor(ta ? Shape{2, 5, k, m} : Shape{2, 5, m, k}, 30 + ta);
      HostTensor b = RandomTensor(tb ? Shape{n, k} : Shape{k, n}, 40 + tb);
      HostTensor out = Evaluate(OpKind::kMatMul, F32({2, 5, m, n}), Flags(ta, tb), {&a, &b});
      EXPECT_THAT(Values(out), Pointwise(FloatNear(1e-5f), NaiveMatMul(a, b, ta, tb)))
          << "rank-2 b, transpose_a=" << ta << " transpose_b=" << tb;
      // Rank-2 a.
      HostTensor a2 = RandomTensor(ta ? Shape{k, m} : Shape{m, k}, 50 + ta);
      HostTensor b2 = RandomTensor(tb ? Shape{7, n, k} : Shape{7, k, n}, 60 + tb);
      HostTensor out2 = Evaluate(OpKind::kMatMul, F32({7, m, n}), Flags(ta, tb), {&a2, &b2});
      EXPECT_THAT(Values(out2), Pointwise(FloatNear(1e-5f), NaiveMatMul(a2, b2, ta, tb)))
          << "rank-2 a, transpose_a=" << ta << " transpose_b=" << tb;
    }
  }
}

TEST(MatMulKernel, RejectsMismatchedContractingExtents) {
  HostTensor a = RandomTensor({2, 3}, 1);
  HostTensor b = RandomTensor({4, 2}, 2);
  absl::StatusOr<HostTensor> result =
      TryEvaluate(OpKind::kMatMul, F32({2, 2}), Flags(false, false), {&a, &b});
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(result.status().message(), HasSubstr("matmul: contracting"));
}

// ---------------------------------------------------------------- softmax family

TEST(SoftmaxKernel, RowsSumToOneAndMatchHandValues) {
  HostTensor x = HostTensor::FromFloats({2, 3}, {1.0f, 2.0f, 3.0f, 1000.0f, 1000.0f, -kInf});
  std::vector<float> y = Values(Evaluate(OpKind::kSoftmax, F32({2, 3}), {}, {&x}));
  EXPECT_THAT(y, ElementsAre(FloatEq(0.09003057f), FloatEq(0.24472847f), FloatEq(0.66524096f),
                             0.5f, 0.5f, 0.0f));
  HostTensor big = RandomTensor({7, 33}, 5);
  std::vector<float> rows = Values(Evaluate(OpKind::kSoftmax, F32({7, 33}), {}, {&big}));
  for (int r = 0; r < 7; ++r) {
    double sum = 0;
    for (int i = 0; i < 33; ++i) sum += rows[r * 33 + i];
    EXPECT_NEAR(sum, 1.0, 1e-6) << "row " << r;
  }
}

TEST(LogSoftmaxKernel, IsTheLogOfSoftmax) {
  HostTensor x = HostTensor::FromFloats({1, 3}, {1.0f, 2.0f, 3.0f});
  EXPECT_THAT(Values(Evaluate(OpKind::kLogSoftmax, F32({1, 3}), {}, {&x})),
              ElementsAre(FloatEq(-2.40760596f), FloatEq(-1.40760596f), FloatEq(-0.40760596f)));
}

TEST(SoftmaxGradKernel, MatchesTheFormula) {
  HostTensor x = RandomTensor({3, 5}, 7);
  HostTensor dy = RandomTensor({3, 5}, 8);
  HostTensor y = Evaluate(OpKind::kSoftmax, F32({3, 5}), {}, {&x});
  std::vector<float> dx = Values(Evaluate(OpKind::kSoftmaxGrad, F32({3, 5}), {}, {&y, &dy}));
  for (int r = 0; r < 3; ++r) {
    double dot = 0;
    for (int i = 0; i < 5; ++i) dot += double{dy.f32()[r * 5 + i]} * y.f32()[r * 5 + i];
    for (int i = 0; i < 5; ++i) {
      const double expected = y.f32()[r * 5 + i] * (dy.f32()[r * 5 + i] - dot);
      EXPECT_NEAR(dx[r * 5 + i], expected, 1e-6);
    }
  }
}

TEST(LogSoftmaxGradKernel, MatchesTheFormula) {
  HostTensor x = RandomTensor({2, 4}, 9);
  HostTensor dy = RandomTensor({2, 4}, 10);
  HostTensor y = Evaluate(OpKind::kLogSoftmax, F32({2, 4}), {}, {&x});
  std::vector<float> dx = Values(Evaluate(OpKind::kLogSoftmaxGrad, F32({2, 4}), {}, {&y, &dy}));
  for (int r = 0; r < 2; ++r) {
    double sum = 0;
    for (int i = 0; i < 4; ++i) sum += dy.f32()[r * 4 + i];
    for (int i = 0; i < 4; ++i) {
      const double expected = dy.f32()[r * 4 + i] - std::exp(double{y.f32()[r * 4 + i]}) * sum;
      EXPECT_NEAR(dx[r * 4 + i], expected, 1e-6);
    }
  }
}

TEST(CausalMaskKernel, FillsAboveTheDiagonal) {
  HostTensor x = HostTensor::FromFloats({2, 3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9,
                                                    -1, -2, -3, -4, -5, -6, -7, -8, -9});
  EXPECT_THAT(Values(Evaluate(OpKind::kCausalMask, F32({2, 3, 3}), {{"fill", -kInf * 1.0}}, {&x})),
              ElementsAre(1, -kInf, -kInf, 4, 5, -kInf, 7, 8, 9,
                          -1, -kInf, -kInf, -4, -5, -kInf, -7, -8, -9));
}

// ---------------------------------------------------------------- normalization

TEST(NormalizeKernel, CentersAndScalesEachRow) {
  HostTensor x = HostTensor::FromFloats({2, 4}, {1, 2, 3, 4, 0, 0, 4, 4});
  std::vector<float> y = Values(Evaluate(OpKind::kNormalize, F32({2, 4}), {{"eps", 0.0}}, {&x}));
  // Row 0: mean 2.5, biased variance 1.25; row 1: mean 2, variance 4.
  const float s = 1.0f / std::sqrt(1.25f);
  EXPECT_THAT(y, ElementsAre(FloatEq(-1.5f * s), FloatEq(-0.5f * s), FloatEq(0.5f * s),
                             FloatEq(1.5f * s), -1, -1, 1, 1));
  std::vector<float> eps = Values(Evaluate(OpKind::kNormalize, F32({2, 4}), {{"eps", 1.0}}, {&x}));
  EXPECT_THAT(eps[0], FloatEq(-1.5f / std::sqrt(2.25f)));
}

TEST(LayerNormKernel, EqualsNormalizeThenMulThenAddBitwise) {
  const Shape shape = {6, 64};
  HostTensor x = RandomTensor(shape, 21);
  HostTensor gamma = RandomTensor({64}, 22);
  HostTensor beta = RandomTensor({64}, 23);
  const Attributes eps = {{"eps", 1e-5}};
  HostTensor fused = Evaluate(OpKind::kLayerNorm, F32(shape), eps, {&x, &gamma, &beta});
  HostTensor xhat = Evaluate(OpKind::kNormalize, F32(shape), eps, {&x});
  HostTensor scaled = Evaluate(OpKind::kMul, F32(shape), {}, {&xhat, &gamma});
  HostTensor composed = Evaluate(OpKind::kAdd, F32(shape), {}, {&scaled, &beta});
  EXPECT_TRUE(fused.BitwiseEquals(composed));
}

TEST(NormalizeGradKernel, MatchesCentralDifferencesInDouble) {
  const int64_t n = 6;
  HostTensor x = RandomTensor({2, n}, 31);
  HostTensor dy = RandomTensor({2, n}, 32);
  const double eps = 1e-3;
  std::vector<float> dx =
      Values(Evaluate(OpKind::kNormalizeGrad, F32({2, n}), {{"eps", eps}}, {&x, &dy}));
  // sum_j dy_j * normalize(x)_j, differentiated numerically in double.
  auto objective = [&](const std::vector<double>& row, const float* dy_row) {
    double mean = 0;
    for (double v : row) mean += v;
    mean /= n;
    double var = 0;
    for (double v : row) var += (v - mean) * (v - mean);
    var /= n;
    double total = 0;
    for (int64_t j = 0; j < n; ++j) total += dy_row[j] * (row[j] - mean) / std::sqrt(var + eps);
    return total;
  };
  for (int64_t r = 0; r < 2; ++r) {
    std::vector<double> row(x.f32() + r * n, x.f32() + (r + 1) * n);
    for (int64_t i = 0; i < n; ++i) {
      const double h = 1e-6;
      std::vector<double> plus = row, minus = row;
      plus[i] += h;
      minus[i] -= h;
      const double numeric =
          (objective(plus, dy.f32() + r * n) - objective(minus, dy.f32() + r * n)) / (2 * h);
      EXPECT_NEAR(dx[r * n + i], numeric, 2e-4 * std::max(1.0, std::abs(numeric)));
    }
  }
}

// ---------------------------------------------------------------- losses and lookups

TEST(CrossEntropyKernel, MatchesLogSumExpMinusLabelLogit) {
  HostTensor logits = HostTensor::FromFloats({2, 3}, {1.0f, 2.0f, 3.0f, 0.5f, -0.5f, 0.0f});
  HostTensor labels = HostTensor::FromInts({2}, {2, 1});
  std::vector<float> loss =
      Values(Evaluate(OpKind::kCrossEntropy, F32({2}), {}, {&logits, &labels}));
  auto expected = [](std::vector<double> row, int label) {
    double sum = 0;
    for (double v : row) sum += std::exp(v);
    return std::log(sum) - row[label];
  };
  EXPECT_NEAR(loss[0], expected({1.0, 2.0, 3.0}, 2), 1e-6);
  EXPECT_NEAR(loss[1], expected({0.5, -0.5, 0.0}, 1), 1e-6);
}

TEST(CrossEntropyGradKernel, IsSoftmaxMinusOneHotTimesDy) {
  HostTensor logits = HostTensor::FromFloats({2, 3}, {1.0f, 2.0f, 3.0f, 0.5f, -0.5f, 0.0f});
  HostTensor labels = HostTensor::FromInts({2}, {2, 0});
  HostTensor dy = HostTensor::FromFloats({2}, {0.5f, 2.0f});
  std::vector<float> grad =
      Values(Evaluate(OpKind::kCrossEntropyGrad, F32({2, 3}), {}, {&logits, &labels, &dy}));
  HostTensor p = Evaluate(OpKind::kSoftmax, F32({2, 3}), {}, {&logits});
  for (int r = 0; r < 2; ++r) {
    for (int i = 0; i < 3; ++i) {
      const float target = i == labels.i32()[r] ? 1.0f : 0.0f;
      EXPECT_NEAR(grad[r * 3 + i], (p.f32()[r * 3 + i] - target) * dy.f32()[r], 1e-6);
    }
  }
}

TEST(CrossEntropyGradKernel, AgreesBitwiseWithSoftmaxOffTheLabel) {
  // Different loops of different kernels compute exp; all must agree.
  HostTensor logits = RandomTensor({4, 37}, 43);
  HostTensor labels = HostTensor::FromInts({4}, {0, 5, 36, 17});
  HostTensor ones = HostTensor::FromFloats({4}, {1.0f, 1.0f, 1.0f, 1.0f});
  HostTensor grad = Evaluate(OpKind::kCrossEntropyGrad, F32({4, 37}), {}, {&logits, &labels, &ones});
  HostTensor p = Evaluate(OpKind::kSoftmax, F32({4, 37}), {}, {&logits});
  for (int r = 0; r < 4; ++r) {
    for (int i = 0; i < 37; ++i) {
      if (i == labels.i32()[r]) continue;
      ASSERT_EQ(grad.f32()[r * 37 + i], p.f32()[r * 37 + i]) << "row " << r << " column " << i;
    }
  }
}

TEST(CrossEntropyKernels, RejectALabelOutsideTheClasses) {
  HostTensor logits = RandomTensor({3, 4}, 41);
  HostTensor labels = HostTensor::FromInts({3}, {0, 4, 1});
  absl::StatusOr<HostTensor> loss =
      TryEvaluate(OpKind::kCrossEntropy, F32({3}), {}, {&logits, &labels});
  EXPECT_EQ(loss.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(loss.status().message(), "cross_entropy: label 4 at position 1 outside [0, 4)");
  HostTensor negative = HostTensor::FromInts({3}, {0, 1, -1});
  HostTensor dy = RandomTensor({3}, 42);
  absl::StatusOr<HostTensor> grad =
      TryEvaluate(OpKind::kCrossEntropyGrad, F32({3, 4}), {}, {&logits, &negative, &dy});
  EXPECT_EQ(grad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(grad.status().message(),
            "cross_entropy_grad: label -1 at position 2 outside [0, 4)");
}

TEST(EmbeddingKernel, GathersTableRowsById) {
  HostTensor table = HostTensor::FromFloats({3, 2}, {0, 1, 10, 11, 20, 21});
  HostTensor ids = HostTensor::FromInts({2, 2}, {2, 0, 1, 2});
  EXPECT_THAT(Values(Evaluate(OpKind::kEmbedding, F32({2, 2, 2}), {}, {&table, &ids})),
              ElementsAre(20, 21, 0, 1, 10, 11, 20, 21));
}

TEST(EmbeddingKernel, RejectsAnIdOutsideTheTable) {
  HostTensor table = RandomTensor({65, 2}, 51);
  HostTensor ids = HostTensor::FromInts({4}, {0, 1, 2, 70});
  absl::StatusOr<HostTensor> result =
      TryEvaluate(OpKind::kEmbedding, F32({4, 2}), {}, {&table, &ids});
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(result.status().message(), "embedding: id 70 at position 3 outside [0, 65)");
}

TEST(EmbeddingGradKernel, SumsRowsIntoTheirIdsInIndexOrder) {
  HostTensor ids = HostTensor::FromInts({2, 2}, {1, 3, 1, 1});
  HostTensor dy = HostTensor::FromFloats({2, 2, 2}, {1, 2, 3, 4, 1e8f, 5, -1e8f, 6});
  // Row 1 gets (1 + 1e8) + -1e8 = 0 in f32 for the first column.
  EXPECT_THAT(Values(Evaluate(OpKind::kEmbeddingGrad, F32({4, 2}),
                              {{"num_embeddings", int64_t{4}}}, {&ids, &dy})),
              ElementsAre(0, 0, 0, 13, 0, 0, 3, 4));
}

TEST(EmbeddingGradKernel, RejectsAnIdOutsideTheTable) {
  HostTensor ids = HostTensor::FromInts({2}, {-3, 0});
  HostTensor dy = RandomTensor({2, 2}, 52);
  absl::StatusOr<HostTensor> result = TryEvaluate(
      OpKind::kEmbeddingGrad, F32({5, 2}), {{"num_embeddings", int64_t{5}}}, {&ids, &dy});
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(result.status().message(), "embedding_grad: id -3 at position 0 outside [0, 5)");
}

// ---------------------------------------------------------------- determinism

TEST(Kernels, SameInputsGiveTheSameBitsEveryRun) {
  const Shape x_shape = {4, 32, 64};
  HostTensor x = RandomTensor(x_shape, 61);
  HostTensor x_rows = x.Reshaped({128, 64});
  HostTensor w = RandomTensor({64, 96}, 62);
  HostTensor gamma = RandomTensor({64}, 63);
  HostTensor beta = RandomTensor({64}, 64);
  HostTensor scores = RandomTensor({4, 2, 32, 32}, 65);
  HostTensor dy = RandomTensor(x_shape, 66);
  HostTensor ids = HostTensor::FromInts({4, 32}, std::vector<int32_t>(128, 3));
  HostTensor labels = HostTensor::FromInts({4, 32}, std::vector<int32_t>(128, 7));
  auto run_all = [&]() {
    std::vector<HostTensor> results;
    results.push_back(Evaluate(OpKind::kMatMul, F32({4, 32, 96}), Flags(false, false), {&x, &w}));
    results.push_back(Evaluate(OpKind::kMatMul, F32({64, 64}), Flags(true, false),
                               {&x_rows, &x_rows}));
    results.push_back(
        Evaluate(OpKind::kLayerNorm, F32(x_shape), {{"eps", 1e-5}}, {&x, &gamma, &beta}));
    results.push_back(
        Evaluate(OpKind::kNormalizeGrad, F32(x_shape), {{"eps", 1e-5}}, {&x, &dy}));
    results.push_back(Evaluate(OpKind::kGelu, F32(x_shape), {}, {&x}));
    results.push_back(Evaluate(OpKind::kGeluGrad, F32(x_shape), {}, {&x, &dy}));
    HostTensor masked =
        Evaluate(OpKind::kCausalMask, F32({4, 2, 32, 32}), {{"fill", -kInf * 1.0}}, {&scores});
    results.push_back(Evaluate(OpKind::kSoftmax, F32({4, 2, 32, 32}), {}, {&masked}));
    results.push_back(Evaluate(OpKind::kReduceSum, F32({64}),
                               {{"axes", std::vector<int64_t>{0, 1}}}, {&dy}));
    results.push_back(Evaluate(OpKind::kCrossEntropy, F32({4, 32}), {}, {&x, &labels}));
    results.push_back(Evaluate(OpKind::kEmbeddingGrad, F32({8, 64}),
                               {{"num_embeddings", int64_t{8}}}, {&ids, &dy}));
    results.push_back(Evaluate(OpKind::kTranspose, F32({4, 64, 32}),
                               {{"permutation", std::vector<int64_t>{0, 2, 1}}}, {&x}));
    return results;
  };
  std::vector<HostTensor> first = run_all();
  std::vector<HostTensor> second = run_all();
  ASSERT_EQ(first.size(), second.size());
  for (size_t i = 0; i < first.size(); ++i) {
    EXPECT_TRUE(first[i].BitwiseEquals(second[i])) << "result " << i;
    EXPECT_NE(first[i].data(), second[i].data()) << "result " << i << " should be fresh";
  }
}

}  // namespace
}  // namespace tandem::ir
