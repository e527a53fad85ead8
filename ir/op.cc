#include "ir/op.h"

namespace tandem::ir {
namespace {

struct OpInfo {
  const char* name;
  int arity;
};

constexpr OpInfo kOpInfo[kNumOpKinds] = {
    {"input", 0},          {"constant", 0},        {"neg", 1},
    {"exp", 1},            {"expm1", 1},           {"log", 1},
    {"tanh", 1},           {"sin", 1},             {"cos", 1},
    {"sqrt", 1},           {"relu", 1},            {"gelu", 1},
    {"silu", 1},           {"pipeline_yield", 1},  {"convert", 1},
    {"add", 2},            {"sub", 2},             {"mul", 2},
    {"div", 2},            {"pow", 2},             {"maximum", 2},
    {"equal", 2},          {"where", 3},           {"reduce_sum", 1},
    {"reduce_mean", 1},    {"reduce_max", 1},      {"reshape", 1},
    {"transpose", 1},      {"broadcast", 1},       {"slice", 1},
    {"concat", -1},        {"matmul", 2},          {"softmax", 1},
    {"log_softmax", 1},    {"layer_norm", 3},      {"normalize", 1},
    {"cross_entropy", 2},  {"embedding", 2},       {"causal_mask", 1},
    {"rotary", 1},         {"softmax_grad", 2},    {"log_softmax_grad", 2},
    {"normalize_grad", 2}, {"gelu_grad", 2},       {"silu_grad", 2},
    {"relu_grad", 2},      {"cross_entropy_grad", 3}, {"embedding_grad", 2},
};

}  // namespace

const char* OpName(OpKind op) { return kOpInfo[static_cast<int>(op)].name; }

std::optional<OpKind> OpFromName(absl::string_view name) {
  for (int i = 0; i < kNumOpKinds; ++i) {
    if (name == kOpInfo[i].name) return static_cast<OpKind>(i);
  }
  return std::nullopt;
}

int OpArity(OpKind op) { return kOpInfo[static_cast<int>(op)].arity; }

bool MovesAnyDType(OpKind op) {
  switch (op) {
    case OpKind::kInput:
    case OpKind::kPipelineYield:
    case OpKind::kConvert:
    case OpKind::kReshape:
    case OpKind::kTranspose:
    case OpKind::kBroadcast:
    case OpKind::kSlice:
    case OpKind::kConcat:
      return true;
    default:
      return false;
  }
}

}  // namespace tandem::ir
