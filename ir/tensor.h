// tandem::Tensor and the tensor API that models are written in.
//
// A Tensor is a symbolic value being traced: a handle to a node of the graph
// a GraphBuilder is recording. Every function below records one op (or a few)
// and returns the result; nothing is computed. The names follow NumPy's
// (`matmul`, `reduce_sum`, `softmax`, ...) so model code reads like the math;
// `pipeline_yield(x)` closes the current pipeline stage.
//
// Errors: a shape or dtype mismatch does not throw. The builder records the
// first one with the op and the caller's file:line, later ops return invalid
// tensors, and the trace function (TraceTrainStep, ...) returns the error.
// Each function takes a std::source_location defaulted to its call site.
//
// A Tensor does not own anything; it is valid while its builder lives.
// Not thread-safe.
#ifndef TANDEM_IR_TENSOR_H_
#define TANDEM_IR_TENSOR_H_

#include <cstdint>
#include <initializer_list>
#include <source_location>
#include <vector>

#include "ir/graph_builder.h"

namespace tandem {

#if defined(__cpp_lib_source_location)
using SourceLoc = std::source_location;
#else
// Clang before 15 lacks the builtin behind libstdc++'s std::source_location
// (the fuzz build, tests/fuzz/, uses clang 14): the two parts Tandem reads,
// from the builtins that also default to the call site.
class SourceLoc {
 public:
  static constexpr SourceLoc current(const char* file = __builtin_FILE(), unsigned line = __builtin_LINE()) {
    return SourceLoc(file, line);
  }
  constexpr const char* file_name() const { return file_; }
  constexpr unsigned line() const { return line_; }

 private:
  constexpr SourceLoc(const char* file, unsigned line) : file_(file), line_(line) {}
  const char* file_;
  unsigned line_;
};
#endif

class Tensor {
 public:
  Tensor() = default;
  Tensor(ir::GraphBuilder* builder, ir::ValueId id) : builder_(builder), id_(id) {}

  ir::GraphBuilder* builder() const { return builder_; }
  ir::ValueId id() const { return id_; }
  // False after an error earlier in the trace.
  bool valid() const { return builder_ != nullptr && id_ != ir::kInvalidValue; }

  // The traced type; an f32 scalar type for an invalid tensor. By value:
  // recording an op may move the graph's nodes, so no reference into them
  // may outlive the next op.
  ir::TensorType type() const;
  ir::Shape shape() const { return type().shape; }
  int64_t rank() const { return type().rank(); }
  ir::DType dtype() const { return type().dtype; }
  // The extent of `axis`; negative axes count from the end.
  int64_t dim(int64_t axis) const;

 private:
  ir::GraphBuilder* builder_ = nullptr;
  ir::ValueId id_ = ir::kInvalidValue;
};

// A tensor operand that remembers where the caller wrote it; lets the
// arithmetic operators report the user's line.
struct Located {
  Located(const Tensor& tensor, SourceLoc location = SourceLoc::current())
      : tensor(tensor), location(location) {}
  const Tensor& tensor;
  SourceLoc location;
};

// ---- Arithmetic, with NumPy broadcasting, on f32 or bf16 (every operand the
// same; convert to mix). Scalars become constants of the other operand's
// dtype (f32 beside an i32).
Tensor operator+(Located a, const Tensor& b);
Tensor operator-(Located a, const Tensor& b);
Tensor operator*(Located a, const Tensor& b);
Tensor operator/(Located a, const Tensor& b);
Tensor operator+(Located a, double b);
Tensor operator-(Located a, double b);
Tensor operator*(Located a, double b);
Tensor operator/(Located a, double b);
Tensor operator+(double a, Located b);
Tensor operator-(double a, Located b);
Tensor operator*(double a, Located b);
Tensor operator/(double a, Located b);
Tensor operator-(Located a);

Tensor exp(const Tensor& x, SourceLoc loc = SourceLoc::current());
// exp(x) - 1 without the cancellation near 0.
Tensor expm1(const Tensor& x, SourceLoc loc = SourceLoc::current());
Tensor log(const Tensor& x, SourceLoc loc = SourceLoc::current());
Tensor tanh(const Tensor& x, SourceLoc loc = SourceLoc::current());
Tensor sin(const Tensor& x, SourceLoc loc = SourceLoc::current());
Tensor cos(const Tensor& x, SourceLoc loc = SourceLoc::current());
Tensor sqrt(const Tensor& x, SourceLoc loc = SourceLoc::current());
// 1 / sqrt(x) in one op, bit for bit (RMSNorm's scale).
Tensor rsqrt(const Tensor& x, SourceLoc loc = SourceLoc::current());
Tensor relu(const Tensor& x, SourceLoc loc = SourceLoc::current());
Tensor gelu(const Tensor& x, SourceLoc loc = SourceLoc::current());
// x * sigmoid(x) (SiLU, the swish of SwiGLU).
Tensor silu(const Tensor& x, SourceLoc loc = SourceLoc::current());
Tensor pow(const Tensor& x, const Tensor& y, SourceLoc loc = SourceLoc::current());
Tensor pow(double x, const Tensor& y, SourceLoc loc = SourceLoc::current());
Tensor maximum(const Tensor& x, const Tensor& y, SourceLoc loc = SourceLoc::current());
// 1 where x == y, else 0.
Tensor equal(const Tensor& x, const Tensor& y, SourceLoc loc = SourceLoc::current());
// x where cond != 0, else y.
Tensor where(const Tensor& cond, const Tensor& x, const Tensor& y,
             SourceLoc loc = SourceLoc::current());
// A tensor of `shape` filled with `value`, recorded by `like`'s builder, of
// like's dtype where that is f32 or bf16, else f32.
Tensor full(const Tensor& like, ir::Shape shape, double value, SourceLoc loc = SourceLoc::current());
// x as `dtype` (backends/cpu/kernels.h says how each pair converts); x itself
// when it already is. Mixed precision converts f32 parameters to bf16 where
// they are used, and the gradient converts back.
Tensor convert(const Tensor& x, ir::DType dtype, SourceLoc loc = SourceLoc::current());

// ---- Reductions over `axes` (negative axes count from the end).
Tensor reduce_sum(const Tensor& x, std::vector<int64_t> axes, bool keep_dims = false,
                  SourceLoc loc = SourceLoc::current());
Tensor reduce_mean(const Tensor& x, std::vector<int64_t> axes, bool keep_dims = false,
                   SourceLoc loc = SourceLoc::current());
Tensor reduce_max(const Tensor& x, std::vector<int64_t> axes, bool keep_dims = false,
                  SourceLoc loc = SourceLoc::current());
// Over every axis, to a scalar.
Tensor sum(const Tensor& x, SourceLoc loc = SourceLoc::current());
Tensor mean(const Tensor& x, SourceLoc loc = SourceLoc::current());

// ---- Data movement.
Tensor reshape(const Tensor& x, ir::Shape shape, SourceLoc loc = SourceLoc::current());
Tensor transpose(const Tensor& x, std::vector<int64_t> permutation,
                 SourceLoc loc = SourceLoc::current());
Tensor broadcast_to(const Tensor& x, ir::Shape shape, SourceLoc loc = SourceLoc::current());
// Elements [start, limit) along `axis` (negative axis counts from the end).
Tensor slice(const Tensor& x, int64_t axis, int64_t start, int64_t limit,
             SourceLoc loc = SourceLoc::current());
Tensor concat(const std::vector<Tensor>& xs, int64_t axis, SourceLoc loc = SourceLoc::current());

// ---- Linear algebra and layers.
struct MatMulOptions {
  bool transpose_a = false;
  bool transpose_b = false;
};
Tensor matmul(const Tensor& a, const Tensor& b, MatMulOptions options = {},
              SourceLoc loc = SourceLoc::current());
Tensor softmax(const Tensor& x, SourceLoc loc = SourceLoc::current());
Tensor log_softmax(const Tensor& x, SourceLoc loc = SourceLoc::current());
Tensor layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps = 1e-5,
                  SourceLoc loc = SourceLoc::current());
// Per position: logsumexp(logits) - logits[label]; labels are i32.
Tensor cross_entropy(const Tensor& logits, const Tensor& labels,
                     SourceLoc loc = SourceLoc::current());
Tensor embedding(const Tensor& table, const Tensor& ids, SourceLoc loc = SourceLoc::current());
// Entries above the diagonal of the last two axes become `fill`.
Tensor causal_mask(const Tensor& x, double fill = -1.0 / 0.0, SourceLoc loc = SourceLoc::current());
// Causal scaled dot-product attention (ir/op.h kAttention) of q[B, H, T, D]
// over k, v[B, G, T, D], G dividing H (grouped KV heads).
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                 SourceLoc loc = SourceLoc::current());
// The same for queries q[B, H, S, D] at `positions` i32[B, S] against a
// cache k, v[B, G, T, D]: query i of sequence b attends to the keys
// 0..positions[b, i] (decoding with a KV cache).
Tensor attention_at(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& positions, double scale,
                    SourceLoc loc = SourceLoc::current());
// Rotary position embedding of x[..., T, D] (ir/op.h kRotary): position t
// is the index along axis -2; `inverse` rotates back.
Tensor rotary(const Tensor& x, double theta = 10000.0, bool inverse = false,
              SourceLoc loc = SourceLoc::current());
// The same with each row's position given: positions i32[..., T].
Tensor rotary_at(const Tensor& x, const Tensor& positions, double theta = 10000.0, bool inverse = false,
                 SourceLoc loc = SourceLoc::current());

// Closes the current pipeline stage: `x` is handed to the next stage, and
// every op traced after it belongs to that stage.
Tensor pipeline_yield(const Tensor& x, SourceLoc loc = SourceLoc::current());

namespace ir {
// Records `op` through the builder of the first valid operand. For gradient
// rules and other library code that builds ops generically.
Tensor Apply(OpKind op, const std::vector<Tensor>& operands, Attributes attributes,
             const SourceLocation& location);
SourceLocation ToLocation(const SourceLoc& loc);
}  // namespace ir

}  // namespace tandem

#endif  // TANDEM_IR_TENSOR_H_
