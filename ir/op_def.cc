#include "ir/op_def.h"

#include <array>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <variant>

#include "absl/strings/str_cat.h"
#include "ir/graph.h"
#include "ir/ops/op_rules.h"

namespace tandem::ir {
namespace {

using Table = std::array<const OpDef*, kNumOpKinds>;

// The families' definitions indexed by kind. A kind defined twice or not at
// all, or a name used twice, is a bug in ir/ops/: reported and aborted the
// first time the table is read (every test reads it).
Table BuildTable() {
  Table table{};
  for (absl::Span<const OpDef> family :
       {ops::SourceOps(), ops::ElementwiseOps(), ops::ReductionOps(), ops::DataMovementOps(), ops::MatMulOps(),
        ops::NormalizationOps(), ops::AttentionOps(), ops::LossOps(), ops::EmbeddingOps()}) {
    for (const OpDef& def : family) {
      const int index = static_cast<int>(def.kind);
      bool fits = index >= 0 && index < kNumOpKinds && table[index] == nullptr && def.name != nullptr;
      for (const OpDef* other : table) fits = fits && (other == nullptr || std::strcmp(other->name, def.name) != 0);
      if (!fits) {
        std::cerr << "ir/ops: op kind " << index << " (" << (def.name ? def.name : "?")
                  << ") is defined twice, out of range or under a name already taken\n";
        std::abort();
      }
      table[index] = &def;
    }
  }
  for (int index = 0; index < kNumOpKinds; ++index) {
    if (table[index] == nullptr) {
      std::cerr << "ir/ops: op kind " << index << " has no definition\n";
      std::abort();
    }
  }
  return table;
}

const Table& TheTable() {
  static const Table table = BuildTable();
  return table;
}

}  // namespace

const OpDef& Def(OpKind op) { return *TheTable()[static_cast<int>(op)]; }

const char* OpName(OpKind op) { return Def(op).name; }

std::optional<OpKind> OpFromName(absl::string_view name) {
  for (const OpDef* def : TheTable()) {
    if (name == def->name) return def->kind;
  }
  return std::nullopt;
}

int OpArity(OpKind op) { return Def(op).arity; }

std::string OperandCountProblem(OpKind op, size_t count) {
  const OpDef& def = Def(op);
  const int n = static_cast<int>(count);
  if (def.arity < 0) return n > 0 ? "" : "takes at least 1 operand, got 0";
  if (n >= def.arity && n <= def.arity + def.optional_operands) return "";
  const std::string takes =
      def.optional_operands == 0
          ? absl::StrCat(def.arity)
          : absl::StrCat(def.arity, def.optional_operands == 1 ? " or " : " to ", def.arity + def.optional_operands);
  const bool one = def.arity == 1 && def.optional_operands == 0;
  return absl::StrCat("takes ", takes, " operand", one ? "" : "s", ", got ", n);
}

bool MovesAnyDType(OpKind op) { return Def(op).moves_any_dtype; }

const char* AttributeKindName(AttributeKind kind) {
  switch (kind) {
    case AttributeKind::kInt: return "int";
    case AttributeKind::kDouble: return "double";
    case AttributeKind::kString: return "string";
    case AttributeKind::kInts: return "ints";
  }
  return "?";
}

bool HoldsKind(const AttributeValue& value, AttributeKind kind) {
  switch (kind) {
    case AttributeKind::kInt: return std::holds_alternative<int64_t>(value);
    case AttributeKind::kDouble: return std::holds_alternative<double>(value);
    case AttributeKind::kString: return std::holds_alternative<std::string>(value);
    case AttributeKind::kInts: return std::holds_alternative<std::vector<int64_t>>(value);
  }
  return false;
}

const char* OpFamilyName(OpFamily family) {
  switch (family) {
    case OpFamily::kSource: return "source";
    case OpFamily::kUnary: return "unary";
    case OpFamily::kBinary: return "binary";
    case OpFamily::kSelect: return "select";
    case OpFamily::kConvert: return "convert";
    case OpFamily::kReduction: return "reduction";
    case OpFamily::kDataMovement: return "data movement";
    case OpFamily::kMatMul: return "matmul";
    case OpFamily::kRowwise: return "row-wise";
    case OpFamily::kNormalization: return "normalization";
    case OpFamily::kCrossEntropy: return "cross entropy";
    case OpFamily::kEmbedding: return "embedding";
    case OpFamily::kRotary: return "rotary";
    case OpFamily::kAttention: return "attention";
  }
  return "?";
}

const AttributeSpec* OpDef::FindAttribute(absl::string_view attribute) const {
  for (int i = 0; i < num_attributes(); ++i) {
    if (attribute == attributes[i].name) return &attributes[i];
  }
  return nullptr;
}

OpCost NodeCost(const Node& node, absl::Span<const TensorType> operand_types) {
  const OpDef& def = Def(node.op);
  return def.cost != nullptr ? def.cost(node, operand_types) : OpCost{};
}

OpCost GraphCost(const Graph& graph) {
  OpCost total;
  std::vector<TensorType> operands;
  for (ValueId id = 0; id < graph.size(); ++id) {
    const Node& node = graph.node(id);
    operands.clear();
    for (ValueId operand : node.operands) operands.push_back(graph.type(operand));
    total += NodeCost(node, operands);
  }
  return total;
}

}  // namespace tandem::ir
