// The reference kernels of matmul, the softmax family, normalization,
// losses and lookups; and determinism across all of them.
#include <bit>
#include <cmath>
#include <cstdint>

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
using ::testing::Not;
using ::testing::Pointwise;

// ---------------------------------------------------------------- matmul

// a[batch..., M, K] x b[batch..., K, N] in double, with the flags and batch
// modes of matmul.
std::vector<float> NaiveMatMul(const ir::HostTensor& a, const ir::HostTensor& b, bool ta, bool tb) {
  const ir::Shape& as = a.shape();
  const ir::Shape& bs = b.shape();
  const size_t ra = as.size();
  const size_t rb = bs.size();
  const int64_t m = ta ? as[ra - 1] : as[ra - 2];
  const int64_t k = ta ? as[ra - 2] : as[ra - 1];
  const int64_t n = tb ? bs[rb - 2] : bs[rb - 1];
  const int64_t a_batch = ir::NumElements(as) / (m * k);
  const int64_t b_batch = ir::NumElements(bs) / (k * n);
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

ir::Attributes Flags(bool ta, bool tb) {
  return {{"transpose_a", int64_t{ta}}, {"transpose_b", int64_t{tb}}};
}

TEST(MatMulKernel, MatchesHandComputedProduct) {
  ir::HostTensor a = ir::HostTensor::FromFloats({2, 3}, {1, 2, 3, 4, 5, 6});
  ir::HostTensor b = ir::HostTensor::FromFloats({3, 2}, {7, 8, 9, 10, 11, 12});
  EXPECT_THAT(Values(Evaluate(ir::OpKind::kMatMul, F32({2, 2}), Flags(false, false), {&a, &b})),
              ElementsAre(58, 64, 139, 154));
}

TEST(MatMulKernel, TransposeFlagsMatchNaiveProduct) {
  const int64_t m = 5, k = 7, n = 3;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      ir::HostTensor a = RandomTensor(ta ? ir::Shape{k, m} : ir::Shape{m, k}, 1 + ta);
      ir::HostTensor b = RandomTensor(tb ? ir::Shape{n, k} : ir::Shape{k, n}, 3 + tb);
      ir::HostTensor out = Evaluate(ir::OpKind::kMatMul, F32({m, n}), Flags(ta, tb), {&a, &b});
      EXPECT_THAT(Values(out), Pointwise(FloatNear(1e-5f), NaiveMatMul(a, b, ta, tb)))
          << "transpose_a=" << ta << " transpose_b=" << tb;
    }
  }
}

TEST(MatMulKernel, EqualBatchAxesMultiplyEntryByEntry) {
  const int64_t m = 4, k = 6, n = 5;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      ir::HostTensor a = RandomTensor(ta ? ir::Shape{2, 3, k, m} : ir::Shape{2, 3, m, k}, 10 + ta);
      ir::HostTensor b = RandomTensor(tb ? ir::Shape{2, 3, n, k} : ir::Shape{2, 3, k, n}, 20 + tb);
      ir::HostTensor out = Evaluate(ir::OpKind::kMatMul, F32({2, 3, m, n}), Flags(ta, tb), {&a, &b});
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
      ir::HostTensor a = RandomTensor(ta ? ir::Shape{2, 5, k, m} : ir::Shape{2, 5, m, k}, 30 + ta);
      ir::HostTensor b = RandomTensor(tb ? ir::Shape{n, k} : ir::Shape{k, n}, 40 + tb);
      ir::HostTensor out = Evaluate(ir::OpKind::kMatMul, F32({2, 5, m, n}), Flags(ta, tb), {&a, &b});
      EXPECT_THAT(Values(out), Pointwise(FloatNear(1e-5f), NaiveMatMul(a, b, ta, tb)))
          << "rank-2 b, transpose_a=" << ta << " transpose_b=" << tb;
      // Rank-2 a.
      ir::HostTensor a2 = RandomTensor(ta ? ir::Shape{k, m} : ir::Shape{m, k}, 50 + ta);
      ir::HostTensor b2 = RandomTensor(tb ? ir::Shape{7, n, k} : ir::Shape{7, k, n}, 60 + tb);
      ir::HostTensor out2 = Evaluate(ir::OpKind::kMatMul, F32({7, m, n}), Flags(ta, tb), {&a2, &b2});
      EXPECT_THAT(Values(out2), Pointwise(FloatNear(1e-5f), NaiveMatMul(a2, b2, ta, tb)))
          << "rank-2 a, transpose_a=" << ta << " transpose_b=" << tb;
    }
  }
}

TEST(MatMulKernel, RejectsMismatchedContractingExtents) {
  ir::HostTensor a = RandomTensor({2, 3}, 1);
  ir::HostTensor b = RandomTensor({4, 2}, 2);
  absl::StatusOr<ir::HostTensor> result =
      TryEvaluate(ir::OpKind::kMatMul, F32({2, 2}), Flags(false, false), {&a, &b});
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(result.status().message(), HasSubstr("matmul: contracting"));
}

// ---------------------------------------------------------------- softmax family

TEST(SoftmaxKernel, RowsSumToOneAndMatchHandValues) {
  ir::HostTensor x = ir::HostTensor::FromFloats({2, 3}, {1.0f, 2.0f, 3.0f, 1000.0f, 1000.0f, -kInf});
  std::vector<float> y = Values(Evaluate(ir::OpKind::kSoftmax, F32({2, 3}), {}, {&x}));
  EXPECT_THAT(y, ElementsAre(FloatEq(0.09003057f), FloatEq(0.24472847f), FloatEq(0.66524096f),
                             0.5f, 0.5f, 0.0f));
  ir::HostTensor big = RandomTensor({7, 33}, 5);
  std::vector<float> rows = Values(Evaluate(ir::OpKind::kSoftmax, F32({7, 33}), {}, {&big}));
  for (int r = 0; r < 7; ++r) {
    double sum = 0;
    for (int i = 0; i < 33; ++i) sum += rows[r * 33 + i];
    EXPECT_NEAR(sum, 1.0, 1e-6) << "row " << r;
  }
}

TEST(LogSoftmaxKernel, IsTheLogOfSoftmax) {
  ir::HostTensor x = ir::HostTensor::FromFloats({1, 3}, {1.0f, 2.0f, 3.0f});
  EXPECT_THAT(Values(Evaluate(ir::OpKind::kLogSoftmax, F32({1, 3}), {}, {&x})),
              ElementsAre(FloatEq(-2.40760596f), FloatEq(-1.40760596f), FloatEq(-0.40760596f)));
}

TEST(SoftmaxGradKernel, MatchesTheFormula) {
  ir::HostTensor x = RandomTensor({3, 5}, 7);
  ir::HostTensor dy = RandomTensor({3, 5}, 8);
  ir::HostTensor y = Evaluate(ir::OpKind::kSoftmax, F32({3, 5}), {}, {&x});
  std::vector<float> dx = Values(Evaluate(ir::OpKind::kSoftmaxGrad, F32({3, 5}), {}, {&y, &dy}));
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
  ir::HostTensor x = RandomTensor({2, 4}, 9);
  ir::HostTensor dy = RandomTensor({2, 4}, 10);
  ir::HostTensor y = Evaluate(ir::OpKind::kLogSoftmax, F32({2, 4}), {}, {&x});
  std::vector<float> dx = Values(Evaluate(ir::OpKind::kLogSoftmaxGrad, F32({2, 4}), {}, {&y, &dy}));
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
  ir::HostTensor x =
      ir::HostTensor::FromFloats({2, 3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9, -1, -2, -3, -4, -5, -6, -7, -8, -9});
  EXPECT_THAT(Values(Evaluate(ir::OpKind::kCausalMask, F32({2, 3, 3}), {{"fill", -kInf * 1.0}}, {&x})),
              ElementsAre(1, -kInf, -kInf, 4, 5, -kInf, 7, 8, 9, -1, -kInf, -kInf, -4, -5, -kInf, -7, -8, -9));
}

// ---------------------------------------------------------------- normalization

// rotary rotates pair (i, i + D/2) of row t by t * theta^(-2i/D) (the
// half-split layout of Hugging Face's LLaMA), checked here in double.
TEST(RotaryKernel, RotatesEachPairByItsPositionTimesItsFrequency) {
  const int64_t heads = 2, positions = 5, width = 6, half = 3;
  std::vector<float> values;
  for (int64_t i = 0; i < heads * positions * width; ++i) values.push_back(0.1f * static_cast<float>(i % 17) - 0.7f);
  ir::HostTensor x = ir::HostTensor::FromFloats({heads, positions, width}, values);
  const double theta = 100.0;
  std::vector<float> out = Values(
      Evaluate(ir::OpKind::kRotary, F32({heads, positions, width}), {{"theta", theta}, {"inverse", int64_t{0}}}, {&x}));
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t t = 0; t < positions; ++t) {
      const float* row = values.data() + (h * positions + t) * width;
      const float* got = out.data() + (h * positions + t) * width;
      for (int64_t i = 0; i < half; ++i) {
        const double angle = static_cast<double>(t) * std::pow(theta, -2.0 * static_cast<double>(i) / width);
        EXPECT_NEAR(got[i], row[i] * std::cos(angle) - row[i + half] * std::sin(angle), 1e-6) << h << "," << t << "," << i;
        EXPECT_NEAR(got[i + half], row[i + half] * std::cos(angle) + row[i] * std::sin(angle), 1e-6);
      }
    }
  }
  // Position 0 is not rotated at all: cos 0 = 1 and sin 0 = 0 exactly.
  for (int64_t i = 0; i < width; ++i) EXPECT_EQ(out[static_cast<size_t>(i)], values[static_cast<size_t>(i)]);
}

TEST(RotaryKernel, TheInverseRotatesBack) {
  std::vector<float> values;
  for (int i = 0; i < 4 * 16; ++i) values.push_back(std::sin(0.37f * static_cast<float>(i)));
  ir::HostTensor x = ir::HostTensor::FromFloats({4, 16}, values);
  ir::HostTensor rotated =
      Evaluate(ir::OpKind::kRotary, F32({4, 16}), {{"theta", 10000.0}, {"inverse", int64_t{0}}}, {&x});
  ir::HostTensor back =
      Evaluate(ir::OpKind::kRotary, F32({4, 16}), {{"theta", 10000.0}, {"inverse", int64_t{1}}}, {&rotated});
  EXPECT_THAT(Values(back), Pointwise(FloatNear(1e-6f), values));
  EXPECT_THAT(Values(rotated), Not(Pointwise(FloatNear(1e-3f), values)));
}

TEST(RotaryKernel, GivenPositionsRotateEachRowAsTheRowAtThatPositionIsRotated) {
  // Rows at their own positions (decoding) get the bits the same rows get
  // at those indices of a whole sequence.
  std::vector<float> values;
  for (int i = 0; i < 7 * 8; ++i) values.push_back(std::cos(0.21f * static_cast<float>(i)));
  const ir::HostTensor whole = ir::HostTensor::FromFloats({7, 8}, values);
  const ir::HostTensor rotated =
      Evaluate(ir::OpKind::kRotary, F32({7, 8}), {{"theta", 500.0}, {"inverse", int64_t{0}}}, {&whole});
  const std::vector<int32_t> at = {6, 0, 3};
  std::vector<float> rows;
  for (int32_t t : at) rows.insert(rows.end(), values.begin() + t * 8, values.begin() + (t + 1) * 8);
  const ir::HostTensor x = ir::HostTensor::FromFloats({3, 8}, rows);
  const ir::HostTensor positions = ir::HostTensor::FromInts({3}, at);
  const std::vector<float> got = Values(
      Evaluate(ir::OpKind::kRotary, F32({3, 8}), {{"theta", 500.0}, {"inverse", int64_t{0}}}, {&x, &positions}));
  for (size_t r = 0; r < at.size(); ++r) {
    for (int d = 0; d < 8; ++d) {
      EXPECT_EQ(std::bit_cast<uint32_t>(got[r * 8 + d]), std::bit_cast<uint32_t>(rotated.f32()[at[r] * 8 + d]))
          << "row " << r << ", " << d;
    }
  }
  const ir::HostTensor negative = ir::HostTensor::FromInts({3}, {1, -2, 0});
  absl::StatusOr<ir::HostTensor> refused =
      TryEvaluate(ir::OpKind::kRotary, F32({3, 8}), {{"theta", 500.0}, {"inverse", int64_t{0}}}, {&x, &negative});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(refused.status().message(), "rotary: position -2 of row 1 is below 0");
}

TEST(NormalizeKernel, CentersAndScalesEachRow) {
  ir::HostTensor x = ir::HostTensor::FromFloats({2, 4}, {1, 2, 3, 4, 0, 0, 4, 4});
  std::vector<float> y = Values(Evaluate(ir::OpKind::kNormalize, F32({2, 4}), {{"eps", 0.0}}, {&x}));
  // Row 0: mean 2.5, biased variance 1.25; row 1: mean 2, variance 4.
  const float s = 1.0f / std::sqrt(1.25f);
  EXPECT_THAT(y, ElementsAre(FloatEq(-1.5f * s), FloatEq(-0.5f * s), FloatEq(0.5f * s),
                             FloatEq(1.5f * s), -1, -1, 1, 1));
  std::vector<float> eps = Values(Evaluate(ir::OpKind::kNormalize, F32({2, 4}), {{"eps", 1.0}}, {&x}));
  EXPECT_THAT(eps[0], FloatEq(-1.5f / std::sqrt(2.25f)));
}

TEST(LayerNormKernel, EqualsNormalizeThenMulThenAddBitwise) {
  const ir::Shape shape = {6, 64};
  ir::HostTensor x = RandomTensor(shape, 21);
  ir::HostTensor gamma = RandomTensor({64}, 22);
  ir::HostTensor beta = RandomTensor({64}, 23);
  const ir::Attributes eps = {{"eps", 1e-5}};
  ir::HostTensor fused = Evaluate(ir::OpKind::kLayerNorm, F32(shape), eps, {&x, &gamma, &beta});
  ir::HostTensor xhat = Evaluate(ir::OpKind::kNormalize, F32(shape), eps, {&x});
  ir::HostTensor scaled = Evaluate(ir::OpKind::kMul, F32(shape), {}, {&xhat, &gamma});
  ir::HostTensor composed = Evaluate(ir::OpKind::kAdd, F32(shape), {}, {&scaled, &beta});
  EXPECT_TRUE(fused.BitwiseEquals(composed));
}

TEST(NormalizeGradKernel, MatchesCentralDifferencesInDouble) {
  const int64_t n = 6;
  ir::HostTensor x = RandomTensor({2, n}, 31);
  ir::HostTensor dy = RandomTensor({2, n}, 32);
  const double eps = 1e-3;
  std::vector<float> dx =
      Values(Evaluate(ir::OpKind::kNormalizeGrad, F32({2, n}), {{"eps", eps}}, {&x, &dy}));
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
  ir::HostTensor logits = ir::HostTensor::FromFloats({2, 3}, {1.0f, 2.0f, 3.0f, 0.5f, -0.5f, 0.0f});
  ir::HostTensor labels = ir::HostTensor::FromInts({2}, {2, 1});
  std::vector<float> loss =
      Values(Evaluate(ir::OpKind::kCrossEntropy, F32({2}), {}, {&logits, &labels}));
  auto expected = [](std::vector<double> row, int label) {
    double sum = 0;
    for (double v : row) sum += std::exp(v);
    return std::log(sum) - row[label];
  };
  EXPECT_NEAR(loss[0], expected({1.0, 2.0, 3.0}, 2), 1e-6);
  EXPECT_NEAR(loss[1], expected({0.5, -0.5, 0.0}, 1), 1e-6);
}

TEST(CrossEntropyGradKernel, IsSoftmaxMinusOneHotTimesDy) {
  ir::HostTensor logits = ir::HostTensor::FromFloats({2, 3}, {1.0f, 2.0f, 3.0f, 0.5f, -0.5f, 0.0f});
  ir::HostTensor labels = ir::HostTensor::FromInts({2}, {2, 0});
  ir::HostTensor dy = ir::HostTensor::FromFloats({2}, {0.5f, 2.0f});
  std::vector<float> grad =
      Values(Evaluate(ir::OpKind::kCrossEntropyGrad, F32({2, 3}), {}, {&logits, &labels, &dy}));
  ir::HostTensor p = Evaluate(ir::OpKind::kSoftmax, F32({2, 3}), {}, {&logits});
  for (int r = 0; r < 2; ++r) {
    for (int i = 0; i < 3; ++i) {
      const float target = i == labels.i32()[r] ? 1.0f : 0.0f;
      EXPECT_NEAR(grad[r * 3 + i], (p.f32()[r * 3 + i] - target) * dy.f32()[r], 1e-6);
    }
  }
}

TEST(CrossEntropyGradKernel, AgreesBitwiseWithSoftmaxOffTheLabel) {
  // Different loops of different kernels compute exp; all must agree.
  ir::HostTensor logits = RandomTensor({4, 37}, 43);
  ir::HostTensor labels = ir::HostTensor::FromInts({4}, {0, 5, 36, 17});
  ir::HostTensor ones = ir::HostTensor::FromFloats({4}, {1.0f, 1.0f, 1.0f, 1.0f});
  ir::HostTensor grad = Evaluate(ir::OpKind::kCrossEntropyGrad, F32({4, 37}), {}, {&logits, &labels, &ones});
  ir::HostTensor p = Evaluate(ir::OpKind::kSoftmax, F32({4, 37}), {}, {&logits});
  for (int r = 0; r < 4; ++r) {
    for (int i = 0; i < 37; ++i) {
      if (i == labels.i32()[r]) continue;
      ASSERT_EQ(grad.f32()[r * 37 + i], p.f32()[r * 37 + i]) << "row " << r << " column " << i;
    }
  }
}

TEST(CrossEntropyKernels, RowsOfAVocabularyGiveTheSameBitsOnOneThreadAndOnSeveral) {
  // 96 rows of 4099 classes: pieces of 8 rows, so 2 threads split them.
  // Row 0 has a maximum of both signs of zero, row 1 -inf everywhere but
  // its label, as a masked row has.
  ir::HostTensor logits = RandomTensor({96, 4099}, 44);
  for (int64_t i = 0; i < 4099; ++i) {
    logits.f32()[i] = i % 2 == 0 ? -std::fabs(logits.f32()[i]) : -0.0f;
    logits.f32()[4099 + i] = -kInf;
  }
  logits.f32()[8] = 0.0f;
  std::vector<int32_t> label_values(96);
  for (int32_t r = 0; r < 96; ++r) label_values[r] = (r * 613) % 4099;
  logits.f32()[4099 + label_values[1]] = 2.0f;
  ir::HostTensor labels = ir::HostTensor::FromInts({96}, label_values);
  ir::HostTensor dy = RandomTensor({96}, 45);
  auto run = [&](int threads) {
    cpu::KernelThreads kernel_threads(threads);
    return kernel_threads.Run([&] {
      return std::vector<ir::HostTensor>{
          Evaluate(ir::OpKind::kCrossEntropy, F32({96}), {}, {&logits, &labels}),
          Evaluate(ir::OpKind::kCrossEntropyGrad, F32({96, 4099}), {}, {&logits, &labels, &dy})};
    });
  };
  const std::vector<ir::HostTensor> one = run(1), two = run(2);
  EXPECT_TRUE(one[0].BitwiseEquals(two[0]));
  EXPECT_TRUE(one[1].BitwiseEquals(two[1]));
  EXPECT_EQ(one[0].f32()[1], 0.0f) << "a row certain of its label";
  EXPECT_EQ(one[1].f32()[4099 + label_values[1]], 0.0f);
  // Off the label, the gradient is softmax(logits) * dy, bit for bit.
  ir::HostTensor p = Evaluate(ir::OpKind::kSoftmax, F32({96, 4099}), {}, {&logits});
  for (int64_t r : {0, 2, 95}) {
    for (int64_t i : {int64_t{0}, int64_t{1}, int64_t{4098}}) {
      if (i == label_values[r]) continue;
      EXPECT_EQ(one[1].f32()[r * 4099 + i], p.f32()[r * 4099 + i] * dy.f32()[r]) << r << ", " << i;
    }
  }
}

TEST(CrossEntropyKernels, RejectALabelOutsideTheClasses) {
  ir::HostTensor logits = RandomTensor({3, 4}, 41);
  ir::HostTensor labels = ir::HostTensor::FromInts({3}, {0, 4, 1});
  absl::StatusOr<ir::HostTensor> loss =
      TryEvaluate(ir::OpKind::kCrossEntropy, F32({3}), {}, {&logits, &labels});
  EXPECT_EQ(loss.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(loss.status().message(), "cross_entropy: label 4 at position 1 outside [0, 4)");
  ir::HostTensor negative = ir::HostTensor::FromInts({3}, {0, 1, -1});
  ir::HostTensor dy = RandomTensor({3}, 42);
  absl::StatusOr<ir::HostTensor> grad =
      TryEvaluate(ir::OpKind::kCrossEntropyGrad, F32({3, 4}), {}, {&logits, &negative, &dy});
  EXPECT_EQ(grad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(grad.status().message(),
            "cross_entropy_grad: label -1 at position 2 outside [0, 4)");
}

// Causal attention in double precision, written out: for each query row i
// of head h (key/value head h / group), softmax over j <= i of q_i . k_j *
// scale, times v.
std::vector<double> AttentionInDouble(const ir::HostTensor& q, const ir::HostTensor& k, const ir::HostTensor& v,
                                      double scale) {
  const int64_t B = q.shape()[0], H = q.shape()[1], T = q.shape()[2], D = q.shape()[3], G = k.shape()[1];
  std::vector<double> out(static_cast<size_t>(q.num_elements()));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      const int64_t kv = b * G + h / (H / G), pair = b * H + h;
      for (int64_t i = 0; i < T; ++i) {
        std::vector<double> s(static_cast<size_t>(i + 1));
        double max = -1e300, sum = 0;
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += double{q.f32()[(pair * T + i) * D + d]} * k.f32()[(kv * T + j) * D + d];
          s[j] = dot * scale;
          max = std::max(max, s[j]);
        }
        for (double& x : s) sum += (x = std::exp(x - max));
        for (int64_t d = 0; d < D; ++d) {
          double o = 0;
          for (int64_t j = 0; j <= i; ++j) o += s[j] / sum * v.f32()[(kv * T + j) * D + d];
          out[(pair * T + i) * D + d] = o;
        }
      }
    }
  }
  return out;
}

TEST(AttentionKernel, IsTheSoftmaxOfTheMaskedScoresTimesTheValuesWithGroupedHeads) {
  const ir::HostTensor q = RandomTensor({2, 4, 9, 5}, 71), k = RandomTensor({2, 2, 9, 5}, 72),
                       v = RandomTensor({2, 2, 9, 5}, 73);
  const ir::HostTensor out =
      Evaluate(ir::OpKind::kAttention, F32({2, 4, 9, 5}), {{"scale", 0.45}}, {&q, &k, &v});
  const std::vector<double> expected = AttentionInDouble(q, k, v, static_cast<double>(0.45f));
  for (int64_t i = 0; i < out.num_elements(); ++i) {
    ASSERT_NEAR(out.f32()[i], expected[i], 2e-6 * (1 + std::fabs(expected[i]))) << "element " << i;
  }
  // The first row of each head attends to its first key alone: v's row 0.
  EXPECT_EQ(out.f32()[0], v.f32()[0]);
}

TEST(AttentionKernels, GiveTheSameBitsOnOneThreadAndOnSeveral) {
  const ir::HostTensor q = RandomTensor({2, 8, 33, 16}, 74), k = RandomTensor({2, 2, 33, 16}, 75),
                       v = RandomTensor({2, 2, 33, 16}, 76), dy = RandomTensor({2, 8, 33, 16}, 77);
  auto run = [&](int threads) {
    cpu::KernelThreads kernel_threads(threads);
    return kernel_threads.Run([&] {
      return std::vector<ir::HostTensor>{
          Evaluate(ir::OpKind::kAttention, F32({2, 8, 33, 16}), {{"scale", 0.25}}, {&q, &k, &v}),
          Evaluate(ir::OpKind::kAttentionGrad, F32({2 * 8 * 33 * 16 + 2 * 2 * 2 * 33 * 16}), {{"scale", 0.25}},
                   {&q, &k, &v, &dy})};
    });
  };
  const std::vector<ir::HostTensor> one = run(1), two = run(2);
  EXPECT_TRUE(one[0].BitwiseEquals(two[0]));
  EXPECT_TRUE(one[1].BitwiseEquals(two[1]));
}

TEST(AttentionKernels, RejectOperandsOfOtherShapes) {
  const ir::HostTensor q = RandomTensor({1, 3, 4, 2}, 78), k = RandomTensor({1, 2, 4, 2}, 79);
  absl::StatusOr<ir::HostTensor> result =
      TryEvaluate(ir::OpKind::kAttention, F32({1, 3, 4, 2}), {{"scale", 1.0}}, {&q, &k, &k});
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(result.status().message(), ::testing::HasSubstr("G dividing H"));
}

TEST(AttentionKernels, QueriesAtPositionsGetTheBitsOfTheWholeCausalRows) {
  // A cache of 9 keys; queries at positions of their own: each row equals
  // the causal attention's row at that index, bit for bit.
  const ir::HostTensor q = RandomTensor({2, 4, 9, 5}, 80), k = RandomTensor({2, 2, 9, 5}, 81),
                       v = RandomTensor({2, 2, 9, 5}, 82);
  const ir::HostTensor whole = Evaluate(ir::OpKind::kAttention, F32({2, 4, 9, 5}), {{"scale", 0.45}}, {&q, &k, &v});
  const std::vector<int32_t> at = {8, 0, 4, 4};  // [batch 2, queries 2]
  std::vector<float> rows;
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t h = 0; h < 4; ++h) {
      for (int64_t i = 0; i < 2; ++i) {
        const float* row = q.f32() + ((b * 4 + h) * 9 + at[b * 2 + i]) * 5;
        rows.insert(rows.end(), row, row + 5);
      }
    }
  }
  const ir::HostTensor queries = ir::HostTensor::FromFloats({2, 4, 2, 5}, rows);
  const ir::HostTensor positions = ir::HostTensor::FromInts({2, 2}, at);
  const ir::HostTensor got =
      Evaluate(ir::OpKind::kAttention, F32({2, 4, 2, 5}), {{"scale", 0.45}}, {&queries, &k, &v, &positions});
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t h = 0; h < 4; ++h) {
      for (int64_t i = 0; i < 2; ++i) {
        for (int64_t d = 0; d < 5; ++d) {
          const float expected = whole.f32()[((b * 4 + h) * 9 + at[b * 2 + i]) * 5 + d];
          EXPECT_EQ(std::bit_cast<uint32_t>(got.f32()[((b * 4 + h) * 2 + i) * 5 + d]),
                    std::bit_cast<uint32_t>(expected))
              << b << "," << h << "," << i << "," << d;
        }
      }
    }
  }
  const ir::HostTensor past = ir::HostTensor::FromInts({2, 2}, {1, 2, 9, 0});
  absl::StatusOr<ir::HostTensor> refused =
      TryEvaluate(ir::OpKind::kAttention, F32({2, 4, 2, 5}), {{"scale", 0.45}}, {&queries, &k, &v, &past});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(refused.status().message(), "attention: position 9 of query 0 of sequence 1 outside the 9 keys [0, 9)");
}

TEST(EmbeddingKernel, GathersTableRowsById) {
  ir::HostTensor table = ir::HostTensor::FromFloats({3, 2}, {0, 1, 10, 11, 20, 21});
  ir::HostTensor ids = ir::HostTensor::FromInts({2, 2}, {2, 0, 1, 2});
  EXPECT_THAT(Values(Evaluate(ir::OpKind::kEmbedding, F32({2, 2, 2}), {}, {&table, &ids})),
              ElementsAre(20, 21, 0, 1, 10, 11, 20, 21));
}

TEST(EmbeddingKernel, RejectsAnIdOutsideTheTable) {
  ir::HostTensor table = RandomTensor({65, 2}, 51);
  ir::HostTensor ids = ir::HostTensor::FromInts({4}, {0, 1, 2, 70});
  absl::StatusOr<ir::HostTensor> result =
      TryEvaluate(ir::OpKind::kEmbedding, F32({4, 2}), {}, {&table, &ids});
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(result.status().message(), "embedding: id 70 at position 3 outside [0, 65)");
}

TEST(EmbeddingGradKernel, SumsRowsIntoTheirIdsInIndexOrder) {
  ir::HostTensor ids = ir::HostTensor::FromInts({2, 2}, {1, 3, 1, 1});
  ir::HostTensor dy = ir::HostTensor::FromFloats({2, 2, 2}, {1, 2, 3, 4, 1e8f, 5, -1e8f, 6});
  // Row 1 gets (1 + 1e8) + -1e8 = 0 in f32 for the first column.
  EXPECT_THAT(Values(Evaluate(ir::OpKind::kEmbeddingGrad, F32({4, 2}), {{"num_embeddings", int64_t{4}}}, {&ids, &dy})),
              ElementsAre(0, 0, 0, 13, 0, 0, 3, 4));
}

TEST(EmbeddingGradKernel, RejectsAnIdOutsideTheTable) {
  ir::HostTensor ids = ir::HostTensor::FromInts({2}, {-3, 0});
  ir::HostTensor dy = RandomTensor({2, 2}, 52);
  absl::StatusOr<ir::HostTensor> result =
      TryEvaluate(ir::OpKind::kEmbeddingGrad, F32({5, 2}), {{"num_embeddings", int64_t{5}}}, {&ids, &dy});
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(result.status().message(), "embedding_grad: id -3 at position 0 outside [0, 5)");
}

// ---------------------------------------------------------------- determinism

TEST(Kernels, SameInputsGiveTheSameBitsEveryRun) {
  const ir::Shape x_shape = {4, 32, 64};
  ir::HostTensor x = RandomTensor(x_shape, 61);
  ir::HostTensor x_rows = x.Reshaped({128, 64});
  ir::HostTensor w = RandomTensor({64, 96}, 62);
  ir::HostTensor gamma = RandomTensor({64}, 63);
  ir::HostTensor beta = RandomTensor({64}, 64);
  ir::HostTensor scores = RandomTensor({4, 2, 32, 32}, 65);
  ir::HostTensor dy = RandomTensor(x_shape, 66);
  ir::HostTensor ids = ir::HostTensor::FromInts({4, 32}, std::vector<int32_t>(128, 3));
  ir::HostTensor labels = ir::HostTensor::FromInts({4, 32}, std::vector<int32_t>(128, 7));
  auto run_all = [&]() {
    std::vector<ir::HostTensor> results;
    results.push_back(Evaluate(ir::OpKind::kMatMul, F32({4, 32, 96}), Flags(false, false), {&x, &w}));
    results.push_back(Evaluate(ir::OpKind::kMatMul, F32({64, 64}), Flags(true, false), {&x_rows, &x_rows}));
    results.push_back(
        Evaluate(ir::OpKind::kLayerNorm, F32(x_shape), {{"eps", 1e-5}}, {&x, &gamma, &beta}));
    results.push_back(
        Evaluate(ir::OpKind::kNormalizeGrad, F32(x_shape), {{"eps", 1e-5}}, {&x, &dy}));
    results.push_back(Evaluate(ir::OpKind::kGelu, F32(x_shape), {}, {&x}));
    results.push_back(Evaluate(ir::OpKind::kGeluGrad, F32(x_shape), {}, {&x, &dy}));
    ir::HostTensor masked =
        Evaluate(ir::OpKind::kCausalMask, F32({4, 2, 32, 32}), {{"fill", -kInf * 1.0}}, {&scores});
    results.push_back(Evaluate(ir::OpKind::kSoftmax, F32({4, 2, 32, 32}), {}, {&masked}));
    results.push_back(Evaluate(ir::OpKind::kReduceSum, F32({64}), {{"axes", std::vector<int64_t>{0, 1}}}, {&dy}));
    results.push_back(Evaluate(ir::OpKind::kCrossEntropy, F32({4, 32}), {}, {&x, &labels}));
    results.push_back(
        Evaluate(ir::OpKind::kEmbeddingGrad, F32({8, 64}), {{"num_embeddings", int64_t{8}}}, {&ids, &dy}));
    results.push_back(
        Evaluate(ir::OpKind::kTranspose, F32({4, 64, 32}), {{"permutation", std::vector<int64_t>{0, 2, 1}}}, {&x}));
    return results;
  };
  std::vector<ir::HostTensor> first = run_all();
  std::vector<ir::HostTensor> second = run_all();
  ASSERT_EQ(first.size(), second.size());
  for (size_t i = 0; i < first.size(); ++i) {
    EXPECT_TRUE(first[i].BitwiseEquals(second[i])) << "result " << i;
    EXPECT_NE(first[i].data(), second[i].data()) << "result " << i << " should be fresh";
  }
}

}  // namespace
}  // namespace tandem::cpu
