// The op table: every op's facts as data, one OpDef per ir::OpKind.
//
// ir/op.h says in words what each op means; its OpDef says the rest, and
// everything that would otherwise switch on an op kind reads it: the
// verifier its operands and attributes, shape inference its result-type
// rule, autodiff its gradient rule, a backend its kernel family, cost
// estimates its cost rule. An op's OpDef, its rules and the tandem::Tensor
// function that builds it live together in one file of ir/ops/ (one file
// per family), so a new op touches that file, ir/op.h, tensor.h and its
// kernels, nothing else.
#ifndef TANDEM_IR_OP_DEF_H_
#define TANDEM_IR_OP_DEF_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "ir/attributes.h"
#include "ir/dtype.h"
#include "ir/op.h"

namespace tandem {
class Tensor;
}  // namespace tandem

namespace tandem::ir {

class Graph;
struct Node;

// The kind of an attribute's value (ir::AttributeValue's alternatives).
enum class AttributeKind : uint8_t { kInt, kDouble, kString, kInts };
const char* AttributeKindName(AttributeKind kind);  // "int", "double", "string", "ints"
bool HoldsKind(const AttributeValue& value, AttributeKind kind);

// One attribute an op reads. An optional attribute has a default its rules
// and kernels apply when it is absent (matmul's transpose_a is 0).
struct AttributeSpec {
  const char* name = nullptr;  // nullptr ends an OpDef's list
  AttributeKind kind = AttributeKind::kInt;
  bool required = true;
};
inline constexpr int kMaxOpAttributes = 3;

// How a backend finds an op's kernel. The ops of one family share one
// kernel that the op kind parameterizes (every unary op is one elementwise
// map given the OpKind), so a new op of an existing family needs a case in
// that kernel, not a new dispatch.
enum class OpFamily : uint8_t {
  kSource,         // input, constant: no operands; the value is supplied or filled
  kUnary,          // f(x) per element, f32 or bf16
  kBinary,         // f(x, y) per element, NumPy broadcasting
  kSelect,         // where(cond, x, y)
  kConvert,        // element type conversion
  kReduction,      // over `axes`
  kDataMovement,   // pipeline_yield, reshape, transpose, broadcast, slice, concat
  kMatMul,
  kRowwise,        // over the last axis (softmax and its kin) or the last two (causal_mask)
  kNormalization,  // layer_norm, normalize, normalize_grad
  kCrossEntropy,   // cross_entropy and its gradient
  kEmbedding,      // embedding and its gradient
  kRotary,
  kAttention,      // attention and its gradient
};
const char* OpFamilyName(OpFamily family);

// What one application of an op costs at its shapes, in the terms of XLA's
// HloCostAnalysis: floating-point operations (a multiply-add is 2),
// transcendental evaluations (exp, log, tanh, sin, ... counted apart), and
// bytes read and written once each. The static estimate the planner and the
// simulator use before anything is measured.
struct OpCost {
  double flops = 0.0;
  double transcendentals = 0.0;
  double bytes = 0.0;

  OpCost& operator+=(const OpCost& other) {
    flops += other.flops;
    transcendentals += other.transcendentals;
    bytes += other.bytes;
    return *this;
  }
};

// What a gradient rule sees: the node, its operands and result as tensors
// of the graph being extended, and the cotangent of its result.
struct GradientArgs {
  const Node& node;
  const std::vector<Tensor>& x;  // the operands
  const Tensor& y;               // the result
  const Tensor& dy;              // d loss / d result
  const std::vector<bool>& wanted;

  bool want(size_t operand) const { return operand < wanted.size() && wanted[operand]; }
};

// The result type of the op on operands of `operands` types, or
// InvalidArgument saying what does not fit ("matmul: contracting
// dimensions differ: 64 vs 32 (operands: f32[8,64], f32[32,10])"). Called
// with the operand count already checked against the arity.
using ResultTypeRule = absl::StatusOr<TensorType> (*)(OpKind op, absl::Span<const TensorType> operands,
                                                      const Attributes& attributes);
// Records the ops that pull `args.dy` back to each wanted operand i, into
// d[i] (d has one slot per operand; slots left invalid get no gradient).
using GradientRule = void (*)(const GradientArgs& args, std::vector<Tensor>& d);
// The cost of `node` given its operands' types (its own type is node.type).
using CostRule = OpCost (*)(const Node& node, absl::Span<const TensorType> operands);

struct OpDef {
  OpKind kind = OpKind::kInput;
  const char* name = nullptr;  // the text form's spelling: "matmul"
  int arity = 0;               // -1: one or more (concat)
  // Operands it may take after the `arity` it needs (attention's and
  // rotary's positions): OperandCountProblem accepts arity..arity+these.
  int optional_operands = 0;
  OpFamily family = OpFamily::kSource;
  // Moves or converts elements whatever their dtype (ir::MovesAnyDType).
  bool moves_any_dtype = false;
  AttributeSpec attributes[kMaxOpAttributes] = {};
  ResultTypeRule result_type = nullptr;  // nullptr for sources: their type is declared
  GradientRule gradient = nullptr;       // nullptr: no gradient rule (the backward helpers)
  CostRule cost = nullptr;

  int num_attributes() const {
    int n = 0;
    while (n < kMaxOpAttributes && attributes[n].name != nullptr) ++n;
    return n;
  }
  // The spec of attribute `name`, or nullptr when the op reads no such one.
  const AttributeSpec* FindAttribute(absl::string_view name) const;
};

// The definition of `op`. Every OpKind has exactly one (checked, with the
// names' uniqueness, when the table is first read).
const OpDef& Def(OpKind op);

// The cost of `node` (operands' types from `operand_types`).
OpCost NodeCost(const Node& node, absl::Span<const TensorType> operand_types);
// The sum of NodeCost over every node of `graph`: one run of it.
OpCost GraphCost(const Graph& graph);

}  // namespace tandem::ir

#endif  // TANDEM_IR_OP_DEF_H_
