// The reference kernels of reductions and data movement.
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/ir/kernel_test_util.h"

namespace tandem::ir {
namespace {

using namespace kernel_test;  // NOLINT: test helpers
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::FloatEq;
using ::testing::FloatNear;
using ::testing::HasSubstr;
using ::testing::Pointwise;

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

}  // namespace
}  // namespace tandem::ir
