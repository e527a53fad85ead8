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
// copy of k or v, each key's own sum still in order of d) or across d, 64
// sums at a time held in vector registers while their terms are added; the
// backward takes kGradRows query rows at once, so that each key's dk and dv
// rows are read and written once for them, taking the rows in order.
// tests/backends/cpu/attention_sums_test.cc holds this text to the bit.
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

// The sums below keep a chunk of kChunk results in vector registers while
// their terms are added in order (GCC's vector extension, which each clone
// lowers to its own width; -ffp-contract=off keeps every product and sum
// rounded once), instead of loading and storing every partial sum once per
// term; what does not fill a chunk runs the same order through memory.
typedef float Lanes __attribute__((vector_size(64)));  // 16 floats
// The same, at any float's address.
typedef float UnalignedLanes __attribute__((vector_size(64), aligned(4), may_alias));
constexpr int64_t kChunk = 4 * 16;

// No function takes or returns a vector by value: the clones without
// AVX-512 would pass them otherwise than the AVX-512 one.
struct Chunk {
  Lanes v0, v1, v2, v3;

  void SetZero() { v0 = v1 = v2 = v3 = Lanes{}; }
  void LoadFrom(const float* from) {
    v0 = *reinterpret_cast<const UnalignedLanes*>(from);
    v1 = *reinterpret_cast<const UnalignedLanes*>(from + 16);
    v2 = *reinterpret_cast<const UnalignedLanes*>(from + 32);
    v3 = *reinterpret_cast<const UnalignedLanes*>(from + 48);
  }
  void StoreTo(float* to) const {
    *reinterpret_cast<UnalignedLanes*>(to) = v0;
    *reinterpret_cast<UnalignedLanes*>(to + 16) = v1;
    *reinterpret_cast<UnalignedLanes*>(to + 32) = v2;
    *reinterpret_cast<UnalignedLanes*>(to + 48) = v3;
  }
  // this += w * x[0..kChunk), lane by lane.
  void AddScaled(float w, const float* x) {
    v0 = v0 + w * *reinterpret_cast<const UnalignedLanes*>(x);
    v1 = v1 + w * *reinterpret_cast<const UnalignedLanes*>(x + 16);
    v2 = v2 + w * *reinterpret_cast<const UnalignedLanes*>(x + 32);
    v3 = v3 + w * *reinterpret_cast<const UnalignedLanes*>(x + 48);
  }
};

// out[j] = sum over d, in order, of x[d] * xt[d * seq + j], for keys j < n
// and possibly more, up to the next whole chunk within seq (each key's sum
// is its own: the extra ones are never read). xt is [width, seq].
inline void KeySums(const float* __restrict x, const float* __restrict xt, int64_t seq, int64_t width, int64_t n,
                    float* __restrict out) {
  int64_t j0 = 0;
  for (; j0 < n && j0 + kChunk <= seq; j0 += kChunk) {
    Chunk acc;
    acc.SetZero();
    for (int64_t d = 0; d < width; ++d) acc.AddScaled(x[d], xt + d * seq + j0);
    acc.StoreTo(out + j0);
  }
  if (j0 >= n) return;
  for (int64_t j = j0; j < n; ++j) out[j] = 0.0f;
  for (int64_t d = 0; d < width; ++d) {
    const float x_d = x[d];
    const float* __restrict xt_d = xt + d * seq;
    for (int64_t j = j0; j < n; ++j) out[j] = out[j] + x_d * xt_d[j];
  }
}

// dst[d] += w[r * w_stride] * x[r * width + d] for rows r = first..rows-1,
// one row after the other.
inline void AddWeightedRows(const float* __restrict w, int64_t w_stride, const float* __restrict x, int64_t width,
                            int64_t first, int64_t rows, float* __restrict dst) {
  int64_t d0 = 0;
  for (; d0 + kChunk <= width; d0 += kChunk) {
    Chunk acc;
    acc.LoadFrom(dst + d0);
    for (int64_t r = first; r < rows; ++r) acc.AddScaled(w[r * w_stride], x + r * width + d0);
    acc.StoreTo(dst + d0);
  }
  for (int64_t r = first; r < rows && d0 < width; ++r) {
    const float w_r = w[r * w_stride];
    const float* __restrict x_r = x + r * width;
    for (int64_t d = d0; d < width; ++d) dst[d] = dst[d] + w_r * x_r[d];
  }
}

// out[d] = sum over j < n, in order, of w[j] * x[j * width + d].
inline void WeightedSum(const float* __restrict w, const float* __restrict x, int64_t width, int64_t n,
                        float* __restrict out) {
  for (int64_t d = 0; d < width; ++d) out[d] = 0.0f;
  AddWeightedRows(w, 1, x, width, 0, n, out);
}

// One query row against keys 0..n-1 (n = i + 1): s = the scaled scores,
// then e_j = exp(s_j - m) in place; returns l, their sum. kt is k
// transposed, [D, T]; s holds seq floats.
TANDEM_KERNEL_CLONES
float RowWeights(const float* __restrict q, const float* __restrict kt, int64_t seq, int64_t width, int64_t n,
                 float scale, float* __restrict s) {
  KeySums(q, kt, seq, width, n, s);
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
  WeightedSum(e, v, width, n, out);
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

// Query rows the backward takes at once (BlockGradient).
constexpr int64_t kGradRows = 8;

// The backward of query rows first..first + rows - 1 of one head (row r of
// the block reads keys j <= first + r), given each row's weights e[r * seq
// ...] (RowWeights) and l[r]: turns e into ds in place (p = e / l first),
// writes dq, and adds the rows' shares to dk_acc and dv_acc (unscaled dk).
// vt is v transposed; dp scratch of rows * seq. A key's dk and dv rows take
// the block's rows one after the other (AddWeightedRows), so they come from
// memory once a block and every sum still adds its terms in the documented
// order.
TANDEM_KERNEL_CLONES
void BlockGradient(const float* __restrict q, const float* __restrict dy, const float* __restrict k,
                   const float* __restrict vt, int64_t seq, int64_t width, int64_t first, int64_t rows,
                   const float* __restrict l, float scale, float* __restrict e, float* __restrict dp,
                   float* __restrict dq, float* __restrict dk_acc, float* __restrict dv_acc) {
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t n = first + r + 1;
    float* __restrict p_r = e + r * seq;
    for (int64_t j = 0; j < n; ++j) p_r[j] = p_r[j] / l[r];
    KeySums(dy + r * width, vt, seq, width, n, dp + r * seq);
  }
  const int64_t keys = first + rows;  // the last row's
  const auto first_reader = [first](int64_t j) { return j > first ? j - first : 0; };  // of key j
  // dv takes p before it becomes ds.
  for (int64_t j = 0; j < keys; ++j) AddWeightedRows(e + j, seq, dy, width, first_reader(j), rows, dv_acc + j * width);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t n = first + r + 1;
    float* __restrict ds_r = e + r * seq;
    const float* __restrict dp_r = dp + r * seq;
    float delta = 0.0f;
    for (int64_t j = 0; j < n; ++j) delta += ds_r[j] * dp_r[j];
    for (int64_t j = 0; j < n; ++j) ds_r[j] = ds_r[j] * (dp_r[j] - delta);
    float* __restrict dq_r = dq + r * width;
    WeightedSum(ds_r, k, width, n, dq_r);
    for (int64_t d = 0; d < width; ++d) dq_r[d] = dq_r[d] * scale;
  }
  for (int64_t j = 0; j < keys; ++j) AddWeightedRows(e + j, seq, q, width, first_reader(j), rows, dk_acc + j * width);
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
    std::vector<float> weights(static_cast<size_t>(kGradRows * T)), dp(weights.size()), l(kGradRows);
    for (int64_t kv = first; kv < last; ++kv) {
      const int64_t b = kv / shape.kv_heads, g = kv % shape.kv_heads;
      Transpose(k + kv * matrix, T, D, kt.data());
      Transpose(v + kv * matrix, T, D, vt.data());
      for (int64_t h = g * shape.group(); h < (g + 1) * shape.group(); ++h) {
        const int64_t pair = b * shape.heads + h;
        for (int64_t i = 0; i < T; i += kGradRows) {
          const int64_t rows = T - i < kGradRows ? T - i : kGradRows;
          const float* q_i = q + pair * matrix + i * D;
          for (int64_t r = 0; r < rows; ++r) {
            l[r] = RowWeights(q_i + r * D, kt.data(), T, D, i + r + 1, scale, weights.data() + r * T);
          }
          BlockGradient(q_i, dy + pair * matrix + i * D, k + kv * matrix, vt.data(), T, D, i, rows, l.data(), scale,
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
