// EvaluateNode: checks the operand count, hands the node to the kernel of its
// family (ir/op_def.h), and
// computes bf16 through the f32 kernels.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/kernels/kernel_support.h"
#include "ir/op_def.h"

namespace tandem::cpu {
namespace {

absl::StatusOr<ir::HostTensor> Dispatch(const ir::Node& node, absl::Span<const ir::HostTensor* const> operands) {
  switch (ir::Def(node.op).family) {
    case ir::OpFamily::kSource:
      if (node.op == ir::OpKind::kInput) {
        return absl::InternalError("input: not a kernel; its value is supplied by whoever runs the graph");
      }
      return internal::EvaluateElementwise(node, operands);
    case ir::OpFamily::kUnary:
    case ir::OpFamily::kBinary:
    case ir::OpFamily::kSelect:
    case ir::OpFamily::kConvert:
      return internal::EvaluateElementwise(node, operands);
    case ir::OpFamily::kReduction:
      return internal::EvaluateReduction(node, operands);
    case ir::OpFamily::kDataMovement:
      return internal::EvaluateDataMovement(node, operands);
    case ir::OpFamily::kMatMul:
      return internal::EvaluateMatMul(node, operands);
    case ir::OpFamily::kRowwise:
      return internal::EvaluateSoftmaxFamily(node, operands);
    case ir::OpFamily::kNormalization:
      return internal::EvaluateNormalization(node, operands);
    case ir::OpFamily::kCrossEntropy:
      return internal::EvaluateCrossEntropy(node, operands);
    case ir::OpFamily::kEmbedding:
      return internal::EvaluateEmbedding(node, operands);
    case ir::OpFamily::kRotary:
      return internal::EvaluateRotary(node, operands);
    case ir::OpFamily::kAttention:
      return internal::EvaluateAttention(node, operands);
  }
  return absl::InternalError(absl::StrCat("EvaluateNode: unknown op kind ", static_cast<int>(node.op)));
}

// Whether `node` computes on bf16: it is arithmetic (ir::MovesAnyDType)
// and an operand or its result is bf16.
bool ComputesOnBf16(const ir::Node& node, absl::Span<const ir::HostTensor* const> operands) {
  if (ir::MovesAnyDType(node.op)) return false;
  if (node.type.dtype == ir::DType::kBF16) return true;
  for (const ir::HostTensor* operand : operands) {
    if (operand->dtype() == ir::DType::kBF16) return true;
  }
  return false;
}

// The f32 kernel on the bf16 operands widened exactly, its result rounded to
// bf16 once where the node's type is bf16.
absl::StatusOr<ir::HostTensor> EvaluateThroughF32(const ir::Node& node,
                                                  absl::Span<const ir::HostTensor* const> operands) {
  std::vector<ir::HostTensor> widened(operands.size());
  std::vector<const ir::HostTensor*> f32_operands(operands.begin(), operands.end());
  for (size_t i = 0; i < operands.size(); ++i) {
    if (operands[i]->dtype() != ir::DType::kBF16) continue;
    absl::StatusOr<ir::HostTensor> wide = internal::WidenBf16(node, *operands[i]);
    if (!wide.ok()) return wide.status();
    widened[i] = *std::move(wide);
    f32_operands[i] = &widened[i];
  }
  ir::Node f32_node = node;
  if (f32_node.type.dtype == ir::DType::kBF16) f32_node.type.dtype = ir::DType::kF32;
  absl::StatusOr<ir::HostTensor> result = Dispatch(f32_node, f32_operands);
  if (!result.ok() || node.type.dtype != ir::DType::kBF16) return result;
  return internal::NarrowToBf16(node, *result);
}

}  // namespace

absl::StatusOr<ir::HostTensor> EvaluateNode(const ir::Node& node, absl::Span<const ir::HostTensor* const> operands) {
  const std::string problem = ir::OperandCountProblem(node.op, operands.size());
  if (!problem.empty() || operands.size() != node.operands.size()) {
    internal::KernelBug(absl::StrCat("EvaluateNode: ", OpName(node.op), " given ", operands.size(),
                                     " operand tensors for ", node.operands.size(), " operands (", problem, ")"));
  }
  for (const ir::HostTensor* operand : operands) {
    if (operand == nullptr || !operand->defined()) {
      return absl::InternalError(
          absl::StrCat(OpName(node.op), ": an operand tensor is missing (not computed)"));
    }
  }
  if (ComputesOnBf16(node, operands)) return EvaluateThroughF32(node, operands);
  return Dispatch(node, operands);
}

}  // namespace tandem::cpu
