// EvaluateNode: checks the operand count, hands the node to its family, and
// computes bf16 through the f32 kernels.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ir/kernels.h"
#include "ir/kernels/kernel_support.h"

namespace tandem::ir {
namespace {

absl::StatusOr<HostTensor> Dispatch(const Node& node, absl::Span<const HostTensor* const> operands) {
  switch (node.op) {
    case OpKind::kInput:
      return absl::InternalError(
          "input: not a kernel; its value is supplied by whoever runs the graph");
    case OpKind::kConstant:
    case OpKind::kNeg:
    case OpKind::kExp:
    case OpKind::kExpm1:
    case OpKind::kLog:
    case OpKind::kTanh:
    case OpKind::kSin:
    case OpKind::kCos:
    case OpKind::kSqrt:
    case OpKind::kRelu:
    case OpKind::kGelu:
    case OpKind::kSilu:
    case OpKind::kPipelineYield:
    case OpKind::kConvert:
    case OpKind::kAdd:
    case OpKind::kSub:
    case OpKind::kMul:
    case OpKind::kDiv:
    case OpKind::kPow:
    case OpKind::kMaximum:
    case OpKind::kEqual:
    case OpKind::kWhere:
    case OpKind::kGeluGrad:
    case OpKind::kSiluGrad:
    case OpKind::kReluGrad:
      return internal::EvaluateElementwise(node, operands);
    case OpKind::kReduceSum:
    case OpKind::kReduceMean:
    case OpKind::kReduceMax:
      return internal::EvaluateReduction(node, operands);
    case OpKind::kReshape:
    case OpKind::kTranspose:
    case OpKind::kBroadcast:
    case OpKind::kSlice:
    case OpKind::kConcat:
      return internal::EvaluateDataMovement(node, operands);
    case OpKind::kMatMul:
      return internal::EvaluateMatMul(node, operands);
    case OpKind::kSoftmax:
    case OpKind::kLogSoftmax:
    case OpKind::kSoftmaxGrad:
    case OpKind::kLogSoftmaxGrad:
    case OpKind::kCausalMask:
      return internal::EvaluateSoftmaxFamily(node, operands);
    case OpKind::kLayerNorm:
    case OpKind::kNormalize:
    case OpKind::kNormalizeGrad:
      return internal::EvaluateNormalization(node, operands);
    case OpKind::kCrossEntropy:
    case OpKind::kCrossEntropyGrad:
      return internal::EvaluateCrossEntropy(node, operands);
    case OpKind::kEmbedding:
    case OpKind::kEmbeddingGrad:
      return internal::EvaluateEmbedding(node, operands);
    case OpKind::kRotary:
      return internal::EvaluateRotary(node, operands);
  }
  return absl::InternalError(
      absl::StrCat("EvaluateNode: unknown op kind ", static_cast<int>(node.op)));
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
