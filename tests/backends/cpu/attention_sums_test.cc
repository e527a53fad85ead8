// The attention kernels compute exactly the sums their file documents
// (backends/cpu/kernels/attention.cc, the rounding every backend follows):
// a scalar transcription of that text, one query row and one sum at a time,
// gives their bits, at widths and lengths that fill no vector evenly, with
// grouped key/value heads.
#include <bit>
#include <cstdint>
#include <vector>

#include "backends/cpu/kernels/float_math.h"
#include "gtest/gtest.h"
#include "tests/backends/cpu/kernel_test_util.h"

namespace tandem::cpu {
namespace {

using namespace kernel_test;  // NOLINT: test helpers
using internal::ExpF32;

struct Shape {
  int64_t batch, heads, kv_heads, seq, width;
};

struct Documented {
  std::vector<float> out, dq, dk, dv;
};

// The file's formulas, written out: for query row i of head h, over the
// keys j <= i of its key/value head, every sum from +0 in the order shown.
Documented DocumentedSums(const Shape& s, const float* q, const float* k, const float* v, const float* dy,
                          float scale) {
  const int64_t T = s.seq, D = s.width, group = s.heads / s.kv_heads;
  Documented r;
  r.out.assign(static_cast<size_t>(s.batch * s.heads * T * D), 0.0f);
  r.dq = r.out;
  r.dk.assign(static_cast<size_t>(s.batch * s.kv_heads * T * D), 0.0f);
  r.dv = r.dk;
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t g = 0; g < s.kv_heads; ++g) {
      const float* k_g = k + (b * s.kv_heads + g) * T * D;
      const float* v_g = v + (b * s.kv_heads + g) * T * D;
      float* dk_g = r.dk.data() + (b * s.kv_heads + g) * T * D;
      float* dv_g = r.dv.data() + (b * s.kv_heads + g) * T * D;
      for (int64_t h = g * group; h < (g + 1) * group; ++h) {
        const int64_t row0 = (b * s.heads + h) * T;
        for (int64_t i = 0; i < T; ++i) {
          const float* q_i = q + (row0 + i) * D;
          const float* dy_i = dy + (row0 + i) * D;
          std::vector<float> e(static_cast<size_t>(i + 1));
          float m = 0.0f;
          for (int64_t j = 0; j <= i; ++j) {
            float dot = 0.0f;
            for (int64_t d = 0; d < D; ++d) dot = dot + q_i[d] * k_g[j * D + d];
            e[j] = dot * scale;
            m = j == 0 || e[j] > m ? e[j] : m;
          }
          float l = 0.0f;
          for (int64_t j = 0; j <= i; ++j) {
            e[j] = ExpF32(e[j] - m);
            l = l + e[j];
          }
          for (int64_t d = 0; d < D; ++d) {
            float sum = 0.0f;
            for (int64_t j = 0; j <= i; ++j) sum = sum + e[j] * v_g[j * D + d];
            r.out[(row0 + i) * D + d] = sum / l;
          }
          std::vector<float> p(e.size()), dp(e.size()), ds(e.size());
          float delta = 0.0f;
          for (int64_t j = 0; j <= i; ++j) {
            p[j] = e[j] / l;
            float dot = 0.0f;
            for (int64_t d = 0; d < D; ++d) dot = dot + dy_i[d] * v_g[j * D + d];
            dp[j] = dot;
            delta = delta + p[j] * dp[j];
          }
          for (int64_t j = 0; j <= i; ++j) ds[j] = p[j] * (dp[j] - delta);
          for (int64_t d = 0; d < D; ++d) {
            float sum = 0.0f;
            for (int64_t j = 0; j <= i; ++j) sum = sum + ds[j] * k_g[j * D + d];
            r.dq[(row0 + i) * D + d] = sum * scale;
          }
          for (int64_t j = 0; j <= i; ++j) {
            for (int64_t d = 0; d < D; ++d) {
              dk_g[j * D + d] = dk_g[j * D + d] + ds[j] * q_i[d];
              dv_g[j * D + d] = dv_g[j * D + d] + p[j] * dy_i[d];
            }
          }
        }
      }
      for (int64_t e = 0; e < T * D; ++e) dk_g[e] = dk_g[e] * scale;
    }
  }
  return r;
}

void ExpectBits(const float* actual, const std::vector<float>& expected, const char* what) {
  int64_t wrong = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    if (std::bit_cast<uint32_t>(actual[i]) != std::bit_cast<uint32_t>(expected[i]) && wrong++ < 5) {
      ADD_FAILURE() << what << " element " << i << ": " << actual[i] << " vs the documented " << expected[i];
    }
  }
  EXPECT_EQ(wrong, 0) << what;
}

TEST(AttentionKernels, ComputeTheDocumentedSumsBitForBit) {
  for (const Shape& s : {Shape{1, 1, 1, 1, 1}, Shape{2, 4, 2, 37, 24}, Shape{1, 2, 1, 70, 64}, Shape{1, 3, 3, 19, 7}}) {
    SCOPED_TRACE(testing::Message() << "B " << s.batch << " H " << s.heads << " G " << s.kv_heads << " T " << s.seq
                                    << " D " << s.width);
    const ir::Shape q_shape = {s.batch, s.heads, s.seq, s.width}, kv_shape = {s.batch, s.kv_heads, s.seq, s.width};
    const ir::HostTensor q = RandomTensor(q_shape, 91), k = RandomTensor(kv_shape, 92), v = RandomTensor(kv_shape, 93),
                         dy = RandomTensor(q_shape, 94);
    const double scale = 0.37;
    const Documented expected = DocumentedSums(s, q.f32(), k.f32(), v.f32(), dy.f32(), static_cast<float>(scale));
    const ir::HostTensor out = Evaluate(ir::OpKind::kAttention, F32(q_shape), {{"scale", scale}}, {&q, &k, &v});
    ExpectBits(out.f32(), expected.out, "out");
    const int64_t n_q = q.num_elements(), n_kv = k.num_elements();
    const ir::HostTensor grads =
        Evaluate(ir::OpKind::kAttentionGrad, F32({n_q + 2 * n_kv}), {{"scale", scale}}, {&q, &k, &v, &dy});
    ExpectBits(grads.f32(), expected.dq, "dq");
    ExpectBits(grads.f32() + n_q, expected.dk, "dk");
    ExpectBits(grads.f32() + n_q + n_kv, expected.dv, "dv");
  }
}

}  // namespace
}  // namespace tandem::cpu
