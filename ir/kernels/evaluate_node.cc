// EvaluateNode: checks the operand count, hands the node to the kernel of its
// family (ir/op_def.h), and
// computes bf16 through the f32 kernels.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ir/kernels.h"
#include "ir/op_def.h"
#include "ir/kernels/kernel_support.h"

namespace tandem::ir {
namespace {

absl::StatusOr<HostTensor> Dispatch(const Node& node, absl::Span<const HostTensor* const> operands) {
  switch (Def(node.op).family) {
    case OpFamily::kSource:
      if (node.op == OpKind::kInput) {
        return absl::InternalError("input: not a kernel; its value is supplied by whoever runs the graph");
      }
      return internal::EvaluateElementwise(node, operands);
    case OpFamily::kUnary:
    case OpFamily::kBinary:
    case OpFamily::kSelect:
    case OpFamily::kConvert:
      return internal::EvaluateElementwise(node, operands);
    case OpFamily::kReduction:
      return internal::EvaluateReduction(node, operands);
    case OpFamily::kDataMovement:
      return internal::EvaluateDataMovement(node, operands);
    case OpFamily::kMatMul:
      return internal::EvaluateMatMul(node, operands);
    case OpFamily::kRowwise:
      return internal::EvaluateSoftmaxFamily(node, operands);
    case OpFamily::kNormalization:
      return internal::EvaluateNormalization(node, operands);
    case OpFamily::kCrossEntropy:
      return internal::EvaluateCrossEntropy(node, operands);
    case OpFamily::kEmbedding:
      return internal::EvaluateEmbedding(node, operands);
    case OpFamily::kRotary:
      return internal::EvaluateRotary(node, operands);
  }
  return absl::InternalError(absl::StrCat("EvaluateNode: unknown op kind ", static_cast<int>(node.op)));
}

// Whether `node` computes on bf16: it is arithmetic (ir::MovesAnyDType)
// and an operand or its result is bf16.
bool ComputesOnBf16(const Node& node, absl::Span<const HostTensor* const> operands) {
  if (MovesAnyDType(node.op)) return false;
  if (node.type.dtype == DType::kBF16) return true;
  for (const HostTensor* operand : operands) {
    if (operand->dtype() == DType::kBF16) return true;
  }
  return false;
}

// The f32 kernel on the bf16 operands widened exactly, its result rounded to
// bf16 once where the node's type is bf16.
absl::StatusOr<HostTensor> EvaluateThroughF32(const Node& node, absl::Span<const HostTensor* const> operands) {
  std::vector<HostTensor> widened(operands.size());
  std::vector<const HostTensor*> f32_operands(operands.begin(), operands.end());
  for (size_t i = 0; i < operands.size(); ++i) {
    if (operands[i]->dtype() != DType::kBF16) continue;
    absl::StatusOr<HostTensor> wide = internal::WidenBf16(node, *operands[i]);
    if (!wide.ok()) return wide.status();
    widened[i] = *std::move(wide);
    f32_operands[i] = &widened[i];
  }
  Node f32_node = node;
  if (f32_node.type.dtype == DType::kBF16) f32_node.type.dtype = DType::kF32;
  absl::StatusOr<HostTensor> result = Dispatch(f32_node, f32_operands);
  if (!result.ok() || node.type.dtype != DType::kBF16) return result;
  return internal::NarrowToBf16(node, *result);
}

}  // namespace

absl::StatusOr<HostTensor> EvaluateNode(const Node& node,
                                        absl::Span<const HostTensor* const> operands) {
  const int arity = OpArity(node.op);
  const bool count_fits = arity < 0 ? !operands.empty() : static_cast<int>(operands.size()) == arity;
  if (!count_fits || operands.size() != node.operands.size()) {
    internal::KernelBug(absl::StrCat("EvaluateNode: ", OpName(node.op), " given ", operands.size(),
                                     " operand tensors for ", node.operands.size(),
                                     " operands (arity ", arity, ")"));
  }
  for (const HostTensor* operand : operands) {
    if (operand == nullptr || !operand->defined()) {
      return absl::InternalError(
          absl::StrCat(OpName(node.op), ": an operand tensor is missing (not computed)"));
    }
  }
  if (ComputesOnBf16(node, operands)) return EvaluateThroughF32(node, operands);
  return Dispatch(node, operands);
}

}  // namespace tandem::ir
