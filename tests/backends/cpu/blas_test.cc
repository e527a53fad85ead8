// backends/cpu/kernels/blas.h: OpenBLAS's kernels chosen by the CPU's
// features, the choice handed to every process Tandem starts, and the
// chosen kernels' products right (older OpenBLAS builds are known to
// compute wrong results with some core types on some processors).
#include "backends/cpu/kernels/blas.h"

#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace tandem::cpu::internal {
namespace {

// Whether the user chose a core type before the test started (read at
// static initialization, before anything loads OpenBLAS).
const bool kCoreTypeGiven = std::getenv("OPENBLAS_CORETYPE") != nullptr;

TEST(Blas, TheCoreTypeFollowsTheFeaturesNotTheModelName) {
  CpuFeatures none;
  EXPECT_EQ(CoreTypeFor(none), "");
  CpuFeatures avx{.avx = true};
  EXPECT_EQ(CoreTypeFor(avx), "Sandybridge");
  CpuFeatures avx2 = avx;
  avx2.avx2 = true;
  EXPECT_EQ(CoreTypeFor(avx2), "Sandybridge");  // no FMA: not Haswell's kernels
  avx2.fma = true;
  EXPECT_EQ(CoreTypeFor(avx2), "Haswell");
  CpuFeatures avx512 = avx2;
  avx512.avx512f = avx512.avx512cd = avx512.avx512bw = avx512.avx512dq = true;
  EXPECT_EQ(CoreTypeFor(avx512), "Haswell");  // SkylakeX's kernels need VL too
  avx512.avx512vl = true;
  EXPECT_EQ(CoreTypeFor(avx512), "SkylakeX");
}

TEST(Blas, ThisProcessRunsTheChosenKernelsAndHandsTheChoiceOn) {
  const Blas& blas = GetBlas();
  ASSERT_NE(blas.sgemm, nullptr);
  EXPECT_FALSE(blas.core.empty());
  EXPECT_TRUE(absl::StrContains(blas.config, "OpenBLAS")) << blas.config;
  const char* variable = std::getenv("OPENBLAS_CORETYPE");
  ASSERT_NE(variable, nullptr);
  EXPECT_TRUE(absl::EqualsIgnoreCase(variable, blas.core)) << variable << " vs " << blas.core;
  const std::string wanted = CoreTypeFor(ThisCpu());
  if (!kCoreTypeGiven && !wanted.empty()) {
    EXPECT_EQ(blas.chosen_by, "the CPU's features");
    EXPECT_TRUE(absl::EqualsIgnoreCase(blas.core, wanted)) << blas.core << " vs " << wanted;
  }
}

// c = op(a) op(b) by the chosen kernels against a double-precision loop,
// for every transpose and sizes around the kernels' blocking.
TEST(Blas, TheChosenKernelsMultiplyRightInEveryLayout) {
  std::mt19937 random(7);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  const int sizes[][3] = {{1, 1, 1}, {3, 5, 7}, {16, 16, 16}, {17, 33, 65}, {64, 1, 300}, {129, 257, 100},
                          {1, 384, 768}, {200, 48, 1}};
  for (const auto& [m, n, k] : sizes) {
    for (const bool ta : {false, true}) {
      for (const bool tb : {false, true}) {
        SCOPED_TRACE(testing::Message() << m << "x" << n << "x" << k << (ta ? " a^T" : "") << (tb ? " b^T" : ""));
        std::vector<float> a(static_cast<size_t>(m) * k), b(static_cast<size_t>(k) * n), c(static_cast<size_t>(m) * n);
        for (float& x : a) x = uniform(random);
        for (float& x : b) x = uniform(random);
        const int lda = ta ? m : k, ldb = tb ? k : n;
        GetBlas().sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k,
                        1.0f, a.data(), lda, b.data(), ldb, 0.0f, c.data(), n);
        double worst = 0;
        for (int i = 0; i < m; ++i) {
          for (int j = 0; j < n; ++j) {
            double sum = 0, magnitude = 0;
            for (int p = 0; p < k; ++p) {
              const double x = ta ? a[static_cast<size_t>(p) * lda + i] : a[static_cast<size_t>(i) * lda + p];
              const double y = tb ? b[static_cast<size_t>(j) * ldb + p] : b[static_cast<size_t>(p) * ldb + j];
              sum += x * y;
              magnitude += std::abs(x * y);
            }
            worst = std::max(worst, std::abs(c[static_cast<size_t>(i) * n + j] - sum) / (magnitude + 1e-30));
          }
        }
        // f32 accumulation over k terms: a few ulps of the terms' magnitude.
        EXPECT_LE(worst, 1e-6 * (1 + k / 16.0));
      }
    }
  }
}

}  // namespace
}  // namespace tandem::cpu::internal
