// EvaluateNode: checks the operand count and hands the node to its family.
#include <string>

#include "absl/strings/str_cat.h"
#include "ir/kernels.h"
#include "ir/kernels/kernel_support.h"

namespace tandem::ir {

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

}  // namespace tandem::ir
