// attention and attention_grad (ir/op.h): causal scaled dot-product
// attention a query row at a time, never holding more of the S x T scores
// than one row. This file is the rounding every backend follows (the CUDA
// kernels compute the same sums in the same order). For query row i of
// head h, over the keys j <= i (or j <= its position) of its key/value head
// g = h / (H / G):
//
//   s_j = (sum over d, in order, of q_d * k_jd) * scale
//   m   = max_j s_j;  e_j = exp(s_j - m);  l = sum over j, in order, of e_j
//   out_d = (sum over j, in order, of e_j * v_jd) / l
//
// and the gradient, for the cotangent row dy_i, with p_j = e_j / l:
//
//   dp_j  = sum over d, in order, of dy_d * v_jd
//   delta = sum over j, in order, of p_j * dp_j
//   ds_j  = p_j * (dp_j - delta)
//   dq_d  = (sum over j, in order, of ds_j * k_jd) * scale
//   dk_jd = (sum over (h, i) in order, of ds_j * q_id) * scale
//   dv_jd =  sum over (h, i) in order, of p_j * dy_id
//
// where the sums for dk and dv run over the query heads h of g in order and
// within each over the rows i >= j in order. Every sum starts from +0.
//
// Work split: the forward gives a piece whole (batch, head) pairs, the
// backward whole (batch, key/value head) pairs (a pair's dk and dv take
// every one of its query heads' rows), so the pieces never share a sum.
// Within a row the products are vectorized across keys (over a transposed
// copy of k or v, each key's own sum still in order of d) or across d.
#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/cpu/kernels/float_math.h"
#include "backends/cpu/kernels/kernel_support.h"
#include "backends/cpu/kernels/parallel.h"

namespace tandem::cpu::internal {
namespace {

// The shapes of an attention node's operands: q [B, H, S, D], k and v
// [B, G, T, D]; S == T unless the queries have positions.
struct AttentionShape {
  int64_t batch = 0, heads = 0, kv_heads = 0, queries = 0, keys = 0, width = 0;
  int64_t group() const { return heads / kv_heads; }
  int64_t q_matrix() const { return queries * width; }  // one query head's elements
  int64_t kv_matrix() const { return keys * width; }    // one key/value head's
};

// attention's operands (with positions i32 [B, S] when there are four), or
// attention_grad's (q, k, v, dy of q's shape).
absl::StatusOr<AttentionShape> CheckOperands(const ir::Node& node, Operands operands) {
  const bool positioned = node.op == ir::OpKind::kAttention && operands.size() > 3;
  const size_t floats = positioned ? 3 : operands.size();
  for (size_t i = 0; i < floats; ++i) {
    if (absl::Status s = ExpectDType(node, operands, static_cast<int>(i), ir::DType::kF32); !s.ok()) return s;
  }
  if (absl::Status s = ExpectResultDType(node, ir::DType::kF32); !s.ok()) return s;
  const ir::Shape &q = operands[0]->shape(), &k = operands[1]->shape();
  if (q.size() != 4 || k.size() != 4 || operands[2]->shape() != k || k[0] != q[0] || k[3] != q[3] || k[1] < 1 ||
      q[1] % k[1] != 0 || (!positioned && k[2] != q[2])) {
    return KernelTypeError(node, "needs q [B, H, S, D] and k, v [B, G, T, D] with G dividing H (S == T unless "
                                 "positioned)");
  }
  if (positioned) {
    if (absl::Status s = ExpectDType(node, operands, 3, ir::DType::kI32); !s.ok()) return s;
    if (absl::Status s = ExpectShape(node, operands, 3, {q[0], q[2]}); !s.ok()) return s;
  } else if (operands.size() > 3) {
    if (absl::Status s = ExpectShape(node, operands, 3, q); !s.ok()) return s;
  }
  return AttentionShape{
      .batch = q[0], .heads = q[1], .kv_heads = k[1], .queries = q[2], .keys = k[2], .width = q[3]};
}

// x [T, D] transposed into xt [D, T].
void Transpose(const float* __restrict x, int64_t seq, int64_t width, float* __restrict xt) {
  for (int64_t t = 0; t < seq; ++t) {
    for (int64_t d = 0; d < width; ++d) xt[d * seq + t] = x[t * width + d];
  }
}

// One query row against keys 0..n-1 (n = i + 1): s = the scaled scores,
// then e_j = exp(s_j - m) in place; returns l, their sum. kt is k
// transposed, [D, T].
TANDEM_KERNEL_CLONES
float RowWeights(const float* __restrict q, const float* __restrict kt, int64_t seq, int64_t width, int64_t n,
                 float scale, float* __restrict s) {
  for (int64_t j = 0; j < n; ++j) s[j] = 0.0f;
  for (int64_t d = 0; d < width; ++d) {
    const float q_d = q[d];
    const float* __restrict k_d = kt + d * seq;
    for (int64_t j = 0; j < n; ++j) s[j] = s[j] + q_d * k_d[j];
  }
  for (int64_t j = 0; j < n; ++j) s[j] = s[j] * scale;
  const float max = RowMax(s, n);
  for (int64_t j = 0; j < n; ++j) s[j] = ExpF32(s[j] - max);
  float sum = 0.0f;
  for (int64_t j = 0; j < n; ++j) sum += s[j];
  return sum;
}

// out = (sum_j e_j v_j) / l over rows j < n of v [T, D].
TANDEM_KERNEL_CLONES
void WeightedRows(const float* __restrict e, const float* __restrict v, int64_t width, int64_t n, float l,
                  float* __restrict out) {
  for (int64_t d = 0; d < width; ++d) out[d] = 0.0f;
  for (int64_t j = 0; j < n; ++j) {
    const float weight = e[j];
    const float* __restrict v_j = v + j * width;
    for (int64_t d = 0; d < width; ++d) out[d] = out[d] + weight * v_j[d];
  }
  for (int64_t d = 0; d < width; ++d) out[d] = out[d] / l;
}

absl::StatusOr<ir::HostTensor> Attention(const ir::Node& node, Operands operands) {
  absl::StatusOr<AttentionShape> checked = CheckOperands(node, operands);
  if (!checked.ok()) return checked.status();
  const AttentionShape shape = *checked;
  const int64_t S = shape.queries, T = shape.keys, D = shape.width;
  // Each query row's last key: its index, or its position.
  const int32_t* positions = operands.size() > 3 ? operands[3]->i32() : nullptr;
  for (int64_t row = 0; positions != nullptr && row < shape.batch * S; ++row) {
    if (positions[row] < 0 || positions[row] >= T) {
      return absl::InvalidArgumentError(absl::StrCat(OpName(node.op), ": position ", positions[row], " of query ",
                                                     row % S, " of sequence ", row / S, " outside the ", T,
                                                     " keys [0, ", T, ")"));
    }
  }
  absl::StatusOr<ir::HostTensor> allocated = AllocateOverwrittenResult(node);
  if (!allocated.ok()) return allocated.status();
  ir::HostTensor out = *std::move(allocated);
  const float scale = static_cast<float>(node.attributes.GetDouble("scale"));
  const float *q = operands[0]->f32(), *k = operands[1]->f32(), *v = operands[2]->f32();
  float* result = out.f32();
  ParallelFor(shape.batch * shape.heads, 1, [&](int64_t first, int64_t last) {
    std::vector<float> kt(static_cast<size_t>(shape.kv_matrix())), scores(static_cast<size_t>(T));
    for (int64_t pair = first; pair < last; ++pair) {
      const int64_t b = pair / shape.heads, h = pair % shape.heads;
      const int64_t kv = b * shape.kv_heads + h / shape.group();
      Transpose(k + kv * shape.kv_matrix(), T, D, kt.data());
      for (int64_t i = 0; i < S; ++i) {
        const int64_t n = (positions != nullptr ? positions[b * S + i] : i) + 1;
        const float* q_i = q + pair * shape.q_matrix() + i * D;
        const float l = RowWeights(q_i, kt.data(), T, D, n, scale, scores.data());
        WeightedRows(scores.data(), v + kv * shape.kv_matrix(), D, n, l, result + pair * shape.q_matrix() + i * D);
      }
    }
  });
  return out;
}

// The backward of one query row, given its weights e (RowWeights) and l:
// turns e into ds in place (p = e / l first), writes dq, and adds the row's
// share to dk_acc and dv_acc (unscaled dk). vt is v transposed, dp scratch.
TANDEM_KERNEL_CLONES
void RowGradient(const float* __restrict q, const float* __restrict dy, const float* __restrict k,
                 const float* __restrict vt, int64_t seq, int64_t width, int64_t n, float l, float scale,
                 float* __restrict e, float* __restrict dp, float* __restrict dq, float* __restrict dk_acc,
                 float* __restrict dv_acc) {
  for (int64_t j = 0; j < n; ++j) e[j] = e[j] / l;  // p
  for (int64_t j = 0; j < n; ++j) dp[j] = 0.0f;
  for (int64_t d = 0; d < width; ++d) {
    const float dy_d = dy[d];
    const float* __restrict v_d = vt + d * seq;
    for (int64_t j = 0; j < n; ++j) dp[j] = dp[j] + dy_d * v_d[j];
  }
  float delta = 0.0f;
  for (int64_t j = 0; j < n; ++j) delta += e[j] * dp[j];
  // dv takes p before it becomes ds.
  for (int64_t j = 0; j < n; ++j) {
    const float p = e[j];
    float* __restrict dv_j = dv_acc + j * width;
    for (int64_t d = 0; d < width; ++d) dv_j[d] = dv_j[d] + p * dy[d];
  }
  for (int64_t j = 0; j < n; ++j) e[j] = e[j] * (dp[j] - delta);  // ds
  for (int64_t d = 0; d < width; ++d) dq[d] = 0.0f;
  for (int64_t j = 0; j < n; ++j) {
    const float ds = e[j];
    const float* __restrict k_j = k + j * width;
    float* __restrict dk_j = dk_acc + j * width;
    for (int64_t d = 0; d < width; ++d) {
      dq[d] = dq[d] + ds * k_j[d];
      dk_j[d] = dk_j[d] + ds * q[d];
    }
  }
  for (int64_t d = 0; d < width; ++d) dq[d] = dq[d] * scale;
}

absl::StatusOr<ir::HostTensor> AttentionGrad(const ir::Node& node, Operands operands) {
  absl::StatusOr<AttentionShape> checked = CheckOperands(node, operands);
  if (!checked.ok()) return checked.status();
  const AttentionShape shape = *checked;
  const int64_t n_q = operands[0]->num_elements(), n_kv = operands[1]->num_elements();
  if (node.type.shape != ir::Shape{n_q + 2 * n_kv}) {
    return KernelTypeError(node, absl::StrCat("result should be [", n_q + 2 * n_kv, "]: dq, dk and dv"));
  }
  absl::StatusOr<ir::HostTensor> allocated = AllocateResult(node);  // dk and dv accumulate from zero
  if (!allocated.ok()) return allocated.status();
  ir::HostTensor out = *std::move(allocated);
  const float scale = static_cast<float>(node.attributes.GetDouble("scale"));
  const int64_t T = shape.keys, D = shape.width, matrix = shape.q_matrix();  // S == T
  const float *q = operands[0]->f32(), *k = operands[1]->f32(), *v = operands[2]->f32(), *dy = operands[3]->f32();
  float* dq = out.f32();
  float* dk = dq + n_q;
  float* dv = dk + n_kv;
  ParallelFor(shape.batch * shape.kv_heads, 1, [&](int64_t first, int64_t last) {
    std::vector<float> kt(static_cast<size_t>(matrix)), vt(kt.size());
    std::vector<float> weights(static_cast<size_t>(T)), dp(weights.size());
    for (int64_t kv = first; kv < last; ++kv) {
      const int64_t b = kv / shape.kv_heads, g = kv % shape.kv_heads;
      Transpose(k + kv * matrix, T, D, kt.data());
      Transpose(v + kv * matrix, T, D, vt.data());
      for (int64_t h = g * shape.group(); h < (g + 1) * shape.group(); ++h) {
        const int64_t pair = b * shape.heads + h;
        for (int64_t i = 0; i < T; ++i) {
          const float* q_i = q + pair * matrix + i * D;
          const float l = RowWeights(q_i, kt.data(), T, D, i + 1, scale, weights.data());
          RowGradient(q_i, dy + pair * matrix + i * D, k + kv * matrix, vt.data(), T, D, i + 1, l, scale,
                      weights.data(), dp.data(), dq + pair * matrix + i * D, dk + kv * matrix, dv + kv * matrix);
        }
      }
      for (int64_t e = 0; e < matrix; ++e) dk[kv * matrix + e] = dk[kv * matrix + e] * scale;
    }
  });
  return out;
}

}  // namespace

absl::StatusOr<ir::HostTensor> EvaluateAttention(const ir::Node& node, Operands operands) {
  switch (node.op) {
    case ir::OpKind::kAttention:
      return Attention(node, operands);
    case ir::OpKind::kAttentionGrad:
      return AttentionGrad(node, operands);
    default:
      KernelBug(absl::StrCat("EvaluateAttention: unexpected ", OpName(node.op)));
  }
}

}  // namespace tandem::cpu::internal
