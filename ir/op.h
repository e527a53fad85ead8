// The closed set of IR operations and what each one means.
//
// Every op has a definition in the op table (op_def.h: its attributes and
// its result-type, gradient and cost rules, by family in ops/) and a CPU
// reference kernel (kernels/). The reference kernels are the meaning of an
// op; the comments below say it in words. Unless stated
// otherwise an op takes and returns f32, and "last axis" means axis rank-1.
//
// Broadcasting follows NumPy: shapes are aligned at their trailing axes and
// an extent of 1 (or a missing leading axis) stretches to the other extent.
#ifndef TANDEM_IR_OP_H_
#define TANDEM_IR_OP_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace tandem::ir {

enum class OpKind : uint8_t {
  // ---- Sources.
  // A graph input. Attributes: name (string), role (string, compared as
  // ir::InputRole of graph.h: "parameter", "data", "label",
  // "optimizer_state", "accumulator", "gradient", "step"). The value is
  // supplied by whoever runs the graph.
  kInput,
  // A tensor of the result type filled with `value` (double, converted to
  // the dtype). Attributes: value.
  kConstant,

  // ---- Elementwise, one operand, same type out.
  kNeg,
  kExp,
  kExpm1,  // exp(x) - 1, accurate near 0
  kLog,
  kTanh,
  kSin,
  kCos,
  kSqrt,
  // 1 / sqrt(x): the square root rounded, then divided into 1 (IEEE on every
  // backend, never an approximate reciprocal square root), so rsqrt(x) ==
  // 1 / sqrt(x) bit for bit; one kernel instead of two.
  kRsqrt,
  kRelu,  // max(x, 0)
  // GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
  kGelu,
  // SiLU (swish): x * sigmoid(x), sigmoid evaluated without overflow.
  kSilu,
  // Identity that closes the current pipeline stage (`pipeline_yield`).
  kPipelineYield,
  // Element type conversion. Attributes: dtype (string). f32→i32 truncates.
  kConvert,

  // ---- Elementwise, two operands, broadcast.
  kAdd,
  kSub,
  kMul,
  kDiv,
  kPow,      // x^y (std::pow in f32)
  kMaximum,  // max(x, y)
  kEqual,    // 1.0f where x == y, else 0.0f
  // where(cond, x, y): three operands broadcast together; cond is f32 and
  // true where nonzero.
  kWhere,

  // ---- Reductions. Attributes: axes (sorted, unique, in range), keep_dims
  // (0 or 1: keep reduced axes with extent 1). Sums run in index order over
  // the reduced elements, accumulating in f32.
  kReduceSum,
  kReduceMean,  // sum, then divided by the number of reduced elements
  kReduceMax,

  // ---- Data movement.
  kReshape,    // Attributes: shape. Same number of elements; row-major.
  kTranspose,  // Attributes: permutation. out.shape[i] = in.shape[perm[i]].
  kBroadcast,  // Attributes: shape. Broadcast the operand to `shape`.
  // Attributes: axis, start, limit. Elements [start, limit) along axis.
  kSlice,
  // Attributes: axis. Any number (>= 1) of operands, concatenated along axis.
  kConcat,

  // ---- Linear algebra.
  // matmul(a, b): a[..., M, K] x b[..., K, N] -> [..., M, N]. Attributes:
  // transpose_a, transpose_b (0/1: the operand's last two axes are swapped
  // before the product). Batch axes: equal in both, or one operand has rank
  // 2 and is used for every batch entry of the other.
  kMatMul,

  // ---- Normalization and losses, over the last axis.
  kSoftmax,
  kLogSoftmax,
  // layer_norm(x, gamma, beta): normalize(x) * gamma + beta, gamma and beta
  // of shape [last extent]. Attributes: eps (double).
  kLayerNorm,
  // (x - mean) / sqrt(var + eps), with the biased variance. Attributes: eps.
  kNormalize,
  // cross_entropy(logits[..., V], labels i32[...]) -> [...]: per position,
  // logsumexp(logits) - logits[label]. A label outside [0, V) is an error
  // at run time.
  kCrossEntropy,
  // embedding(table[V, D], ids i32[...]) -> [..., D]: rows of the table.
  // An id outside [0, V) is an error at run time.
  kEmbedding,
  // causal_mask(x[..., T, T]): x where column <= row, else `fill`.
  // Attributes: fill (double, e.g. -inf).
  kCausalMask,
  // rotary(x[..., T, D] [, positions i32[..., T]]): rotary position
  // embedding (RoFormer), in the half-split layout of Hugging Face's LLaMA.
  // Position t is the index along axis rank-2, or, with `positions` (x's
  // shape without its last axis), each row's own; with h = D/2 and angle
  // a = t * w_i, where w_i = theta^(-2i/D) for i in [0, h):
  //   out[i] = x[i] cos a - x[i+h] sin a,  out[i+h] = x[i+h] cos a + x[i] sin a.
  // Attributes: theta (double, above 1), inverse (0/1: rotate by -a, the
  // gradient). D must be even; a position below 0 is an error at run time.
  kRotary,
  // attention(q[B, H, S, D], k[B, G, T, D], v[B, G, T, D]
  //           [, positions i32[B, S]]) -> [B, H, S, D]:
  // causal scaled dot-product attention, softmax(q k^T * scale, masked
  // above the diagonal) v, computed a query row at a time without the S x T
  // scores (backends/cpu/kernels/attention.cc says how it rounds). Query
  // head h reads key/value head h / (H / G): grouped KV heads, G dividing H.
  // Query row i attends to the keys 0..i (then S == T), or, with
  // `positions`, of sequence b to the keys 0..positions[b, i]: queries
  // against a cache of T keys (decoding; a position outside [0, T) is an
  // error at run time). Row i's result does not depend on S or T, so a
  // row computed against a cache equals the same row of the whole causal
  // attention bit for bit. Differentiable without positions only.
  // Attributes: scale (double, finite, e.g. 1/sqrt(D)).
  kAttention,

  // ---- Backward helpers that have no cheaper composition.
  kSoftmaxGrad,     // (y = softmax(x), dy) -> y * (dy - sum(dy * y, last axis))
  kLogSoftmaxGrad,  // (y = log_softmax(x), dy) -> dy - exp(y) * sum(dy, last axis)
  kNormalizeGrad,   // (x, dy) -> d normalize(x) / dx applied to dy. Attributes: eps.
  kGeluGrad,        // (x, dy) -> dy * gelu'(x)
  kSiluGrad,        // (x, dy) -> dy * silu'(x)
  kReluGrad,        // (x, dy) -> dy where x > 0, else 0
  // (logits[..., V], labels i32[...], dy[...]) -> [..., V]:
  // (softmax(logits) - onehot(label)) * dy.
  kCrossEntropyGrad,
  // (ids i32[...], dy[..., D]) -> [V, D]: dy rows summed into the row of
  // their id, in index order. Attributes: num_embeddings (V).
  kEmbeddingGrad,
  // (q, k, v, dy) -> [N_q + 2 N_kv] of q's dtype: the gradients of
  // attention(q, k, v) for the cotangent dy with respect to q, k and v,
  // flattened one after another (dq's N_q elements, then dk's and dv's N_kv
  // each), computed in one pass that recomputes the scores. Attributes:
  // scale.
  kAttentionGrad,
};

inline constexpr int kNumOpKinds = static_cast<int>(OpKind::kAttentionGrad) + 1;

// "matmul", "reduce_sum", "pipeline_yield", ...: the name in the text form.
const char* OpName(OpKind op);
std::optional<OpKind> OpFromName(absl::string_view name);

// The number of operands the op takes, or -1 for a variable number (concat).
// An op with optional operands (ir/op_def.h) takes from its arity to its
// arity plus those.
int OpArity(OpKind op);
// "" when the op takes `count` operands, else what it takes: "takes 3 or 4
// operands, got 5".
std::string OperandCountProblem(OpKind op, size_t count);

// Whether the op moves or converts elements whatever their dtype: input,
// pipeline_yield, convert and the data movement ops. Every other op is
// arithmetic; on bf16 it computes as on f32 from the exact widened operands
// and rounds its result once (backends/cpu/kernels.h), on every backend.
bool MovesAnyDType(OpKind op);

}  // namespace tandem::ir

#endif  // TANDEM_IR_OP_H_
