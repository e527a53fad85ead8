// The reference kernels of reductions and data movement.
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

// ---------------------------------------------------------------- reductions

// Reference reduction in index order: for each output element, a plain loop
// over its reduced elements in row-major order.
std::vector<float> NaiveReduceSum(const ir::HostTensor& x, const std::vector<int64_t>& axes) {
  const ir::Shape& shape = x.shape();
  ir::Shape out_shape;
  for (size_t axis = 0; axis < shape.size(); ++axis) {
    if (std::find(axes.begin(), axes.end(), static_cast<int64_t>(axis)) == axes.end()) {
      out_shape.push_back(shape[axis]);
    }
  }
  std::vector<float> out(ir::NumElements(out_shape), 0.0f);
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
  ir::HostTensor x = ir::HostTensor::FromFloats({2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_THAT(Values(Evaluate(ir::OpKind::kReduceSum, F32({2}), {{"axes", std::vector<int64_t>{1}}}, {&x})),
              ElementsAre(6, 15));
  EXPECT_THAT(Values(Evaluate(ir::OpKind::kReduceSum, F32({2, 1}),
                              {{"axes", std::vector<int64_t>{1}}, {"keep_dims", int64_t{1}}}, {&x})),
              ElementsAre(6, 15));
}

TEST(ReduceSumKernel, OverLeadingAxesLikeABiasGradient) {
  ir::HostTensor x = ir::HostTensor::FromFloats({2, 2, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  EXPECT_THAT(Values(Evaluate(ir::OpKind::kReduceSum, F32({3}), {{"axes", std::vector<int64_t>{0, 1}}}, {&x})),
              ElementsAre(22, 26, 30));
}

TEST(ReduceSumKernel, OverSeveralAxesWithAndWithoutKeepDims) {
  ir::HostTensor x = RandomTensor({3, 4, 5, 6}, 11);
  const std::vector<std::vector<int64_t>> axis_sets = {{0, 2}, {1, 3}, {0, 1, 2, 3}, {2}, {0, 3}};
  for (const std::vector<int64_t>& axes : axis_sets) {
    const std::vector<float> expected = NaiveReduceSum(x, axes);
    ir::Shape dropped;
    ir::Shape kept;
    for (int64_t axis = 0; axis < 4; ++axis) {
      const bool reduced = std::find(axes.begin(), axes.end(), axis) != axes.end();
      if (!reduced) dropped.push_back(x.shape()[axis]);
      kept.push_back(reduced ? 1 : x.shape()[axis]);
    }
    ir::HostTensor out = Evaluate(ir::OpKind::kReduceSum, F32(dropped), {{"axes", axes}}, {&x});
    EXPECT_THAT(Values(out), ElementsAreArray(expected));
    ir::HostTensor kept_out =
        Evaluate(ir::OpKind::kReduceSum, F32(kept), {{"axes", axes}, {"keep_dims", int64_t{1}}}, {&x});
    EXPECT_THAT(Values(kept_out), ElementsAreArray(expected));
  }
}

TEST(ReduceSumKernel, AccumulatesInIndexOrderInF32) {
  // In index order: ((1e8 + 1) + -1e8) + 1 = 1 in f32; a pairwise sum gives 0.
  ir::HostTensor row = ir::HostTensor::FromFloats({4}, {1e8f, 1.0f, -1e8f, 1.0f});
  EXPECT_THAT(Values(Evaluate(ir::OpKind::kReduceSum, F32({}), {{"axes", std::vector<int64_t>{0}}}, {&row})),
              ElementsAre(1.0f));
  ir::HostTensor column = ir::HostTensor::FromFloats({4, 2}, {1e8f, 0, 1, 0, -1e8f, 0, 1, 0});
  EXPECT_THAT(Values(Evaluate(ir::OpKind::kReduceSum, F32({2}), {{"axes", std::vector<int64_t>{0}}}, {&column})),
              ElementsAre(1.0f, 0.0f));
}

TEST(ReduceMeanKernel, DividesTheSumByTheReducedCount) {
  ir::HostTensor x = ir::HostTensor::FromFloats({2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  EXPECT_THAT(Values(Evaluate(ir::OpKind::kReduceMean, F32({2}), {{"axes", std::vector<int64_t>{0, 2}}}, {&x})),
              ElementsAre(3.5f, 5.5f));
  EXPECT_THAT(Values(Evaluate(ir::OpKind::kReduceMean, F32({1, 1, 1}),
                              {{"axes", std::vector<int64_t>{0, 1, 2}}, {"keep_dims", int64_t{1}}}, {&x})),
              ElementsAre(4.5f));
}

TEST(ReduceMaxKernel, TakesTheLargestOverAxes) {
  ir::HostTensor x = ir::HostTensor::FromFloats({2, 3}, {1, 9, -3, -4, -5, -6});
  EXPECT_THAT(Values(Evaluate(ir::OpKind::kReduceMax, F32({2}), {{"axes", std::vector<int64_t>{1}}}, {&x})),
              ElementsAre(9, -4));
  EXPECT_THAT(Values(Evaluate(ir::OpKind::kReduceMax, F32({1, 3}),
                              {{"axes", std::vector<int64_t>{0}}, {"keep_dims", int64_t{1}}}, {&x})),
              ElementsAre(1, 9, -3));
}

TEST(ReduceKernels, RejectUnsortedAxes) {
  ir::HostTensor x = RandomTensor({2, 3, 4}, 3);
  absl::StatusOr<ir::HostTensor> result =
      TryEvaluate(ir::OpKind::kReduceSum, F32({3}), {{"axes", std::vector<int64_t>{2, 0}}}, {&x});
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInternal);
}

// ---------------------------------------------------------------- data movement

ir::HostTensor NaiveTranspose(const ir::HostTensor& x, const std::vector<int64_t>& perm) {
  ir::Shape out_shape;
  for (int64_t axis : perm) out_shape.push_back(x.shape()[axis]);
  ir::HostTensor out(ir::TensorType{x.dtype(), out_shape});
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
  ir::HostTensor x = ir::HostTensor::FromFloats({2, 3}, {1, 2, 3, 4, 5, 6});
  ir::HostTensor y = Evaluate(ir::OpKind::kReshape, F32({3, 2}), {{"shape", std::vector<int64_t>{3, 2}}}, {&x});
  EXPECT_EQ(y.data(), x.data());
  EXPECT_EQ(y.shape(), (ir::Shape{3, 2}));
}

TEST(TransposeKernel, SwapsAMatrix) {
  ir::HostTensor x = ir::HostTensor::FromFloats({2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_THAT(
      Values(Evaluate(ir::OpKind::kTranspose, F32({3, 2}), {{"permutation", std::vector<int64_t>{1, 0}}}, {&x})),
      ElementsAre(1, 4, 2, 5, 3, 6));
}

TEST(TransposeKernel, PermutationsMatchNaiveIndexing) {
  const std::vector<std::pair<ir::Shape, std::vector<int64_t>>> cases = {
      {{3, 17, 19}, {0, 2, 1}},          // last two axes, tiles with remainders
      {{2, 5, 3, 4}, {0, 2, 1, 3}},      // attention heads
      {{2, 3, 4}, {2, 0, 1}},            // general
      {{4, 1, 3, 2}, {3, 2, 1, 0}},      // reversal through an extent-1 axis
      {{2, 3, 4, 5}, {1, 0, 3, 2}},      // two swaps
      {{2, 3, 4}, {0, 1, 2}},            // identity
  };
  uint32_t seed = 100;
  for (const auto& [shape, perm] : cases) {
    ir::HostTensor x = RandomTensor(shape, seed++);
    ir::HostTensor expected = NaiveTranspose(x, perm);
    ir::HostTensor out = Evaluate(ir::OpKind::kTranspose, expected.type(), {{"permutation", perm}}, {&x});
    EXPECT_TRUE(out.BitwiseEquals(expected)) << ir::ShapeToString(shape);
  }
}

TEST(TransposeKernel, MovesI32Elements) {
  ir::HostTensor x = ir::HostTensor::FromInts({2, 3}, {1, 2, 3, 4, 5, 6});
  ir::HostTensor out =
      Evaluate(ir::OpKind::kTranspose, I32({3, 2}), {{"permutation", std::vector<int64_t>{1, 0}}}, {&x});
  EXPECT_THAT(out.ints(), ElementsAre(1, 4, 2, 5, 3, 6));
}

TEST(BroadcastKernel, StretchesExtentOneAndMissingAxes) {
  ir::HostTensor x = ir::HostTensor::FromFloats({2, 1}, {1, 2});
  EXPECT_THAT(
      Values(Evaluate(ir::OpKind::kBroadcast, F32({2, 2, 3}), {{"shape", std::vector<int64_t>{2, 2, 3}}}, {&x})),
      ElementsAre(1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2));
  ir::HostTensor row = ir::HostTensor::FromInts({3}, {7, 8, 9});
  ir::HostTensor out = Evaluate(ir::OpKind::kBroadcast, I32({2, 3}), {{"shape", std::vector<int64_t>{2, 3}}}, {&row});
  EXPECT_THAT(out.ints(), ElementsAre(7, 8, 9, 7, 8, 9));
}

TEST(SliceKernel, TakesARangeAlongAMiddleAxis) {
  ir::HostTensor x = ir::HostTensor::FromFloats({2, 4, 2}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15});
  EXPECT_THAT(Values(Evaluate(ir::OpKind::kSlice, F32({2, 2, 2}),
                              {{"axis", int64_t{1}}, {"start", int64_t{1}}, {"limit", int64_t{3}}}, {&x})),
              ElementsAre(2, 3, 4, 5, 10, 11, 12, 13));
}

TEST(SliceKernel, SplitsI32LabelsAlongTheBatch) {
  ir::HostTensor labels = ir::HostTensor::FromInts({4, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  ir::HostTensor out = Evaluate(ir::OpKind::kSlice, I32({2, 2}),
                                {{"axis", int64_t{0}}, {"start", int64_t{2}}, {"limit", int64_t{4}}}, {&labels});
  EXPECT_THAT(out.ints(), ElementsAre(5, 6, 7, 8));
}

TEST(ConcatKernel, JoinsAnyNumberOfOperandsAlongAnAxis) {
  ir::HostTensor a = ir::HostTensor::FromFloats({2, 1}, {1, 2});
  ir::HostTensor b = ir::HostTensor::FromFloats({2, 2}, {3, 4, 5, 6});
  ir::HostTensor c = ir::HostTensor::FromFloats({2, 1}, {7, 8});
  EXPECT_THAT(Values(Evaluate(ir::OpKind::kConcat, F32({2, 4}), {{"axis", int64_t{1}}}, {&a, &b, &c})),
              ElementsAre(1, 3, 4, 7, 2, 5, 6, 8));
  ir::HostTensor d = ir::HostTensor::FromFloats({1, 2}, {9, 10});
  EXPECT_THAT(Values(Evaluate(ir::OpKind::kConcat, F32({3, 2}), {{"axis", int64_t{0}}}, {&b, &d})),
              ElementsAre(3, 4, 5, 6, 9, 10));
  EXPECT_THAT(Values(Evaluate(ir::OpKind::kConcat, F32({2, 1}), {{"axis", int64_t{0}}}, {&a})), ElementsAre(1, 2));
}

}  // namespace
}  // namespace tandem::cpu
