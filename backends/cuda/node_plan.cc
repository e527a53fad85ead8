#include "backends/cuda/node_plan.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "ir/op_def.h"
#include "ir/shape_rules.h"

namespace tandem::cuda::runner {
namespace {

// The plan of reducing `in` over node's axes (one operand).
absl::StatusOr<kernels::ReductionPlan> PlanReduction(const ir::Node& node, const Shape& in) {
  const std::vector<int64_t>& axes = node.attributes.GetInts("axes");
  const std::vector<int64_t> strides = RowMajorStrides(in);
  std::vector<int64_t> kept_extents, kept_strides, reduced_extents, reduced_strides;
  int64_t reduced_count = 1;
  for (int64_t axis = 0; axis < static_cast<int64_t>(in.size()); ++axis) {
    if (std::find(axes.begin(), axes.end(), axis) != axes.end()) {
      reduced_extents.push_back(in[axis]);
      reduced_strides.push_back(strides[axis]);
      reduced_count *= in[axis];
    } else {
      kept_extents.push_back(in[axis]);
      kept_strides.push_back(strides[axis]);
    }
  }
  kernels::ReductionPlan plan;
  plan.num_outputs = node.type.num_elements();
  plan.reduced_count = static_cast<float>(reduced_count);
  absl::StatusOr<kernels::StridedMap> kept = MakeStridedMap(node, kept_extents, {kept_strides});
  if (!kept.ok()) return kept.status();
  plan.kept = *kept;
  absl::StatusOr<kernels::StridedMap> reduced = MakeStridedMap(node, reduced_extents, {reduced_strides});
  if (!reduced.ok()) return reduced.status();
  plan.reduced_rank = reduced->rank;
  for (int axis = 0; axis < reduced->rank; ++axis) {
    plan.reduced_extents[axis] = reduced->extents[axis];
    plan.reduced_strides[axis] = reduced->strides[0][axis];
  }
  return plan;
}

// `node`'s attributes as its launch reads them.
NodePlan::Attributes TypedAttributes(const ir::Node& node) {
  NodePlan::Attributes typed;
  const ir::Attributes& a = node.attributes;
  switch (node.op) {
    case OpKind::kInput: typed.input_name = a.GetString("name"); break;
    case OpKind::kConstant: typed.value = a.GetDouble("value"); break;
    case OpKind::kSlice:
      typed.axis = a.GetInt("axis");
      typed.start = a.GetInt("start");
      typed.limit = a.GetInt("limit");
      break;
    case OpKind::kConcat: typed.axis = a.GetInt("axis"); break;
    case OpKind::kMatMul:
      typed.transpose_a = a.GetIntOr("transpose_a", 0) != 0;
      typed.transpose_b = a.GetIntOr("transpose_b", 0) != 0;
      break;
    case OpKind::kLayerNorm:
    case OpKind::kNormalize:
    case OpKind::kNormalizeGrad: typed.eps = static_cast<float>(a.GetDouble("eps")); break;
    case OpKind::kCausalMask: typed.fill = static_cast<float>(a.GetDouble("fill")); break;
    case OpKind::kRotary:
      typed.theta = a.GetDouble("theta");
      typed.inverse = a.GetInt("inverse") != 0;
      break;
    case OpKind::kAttention:
    case OpKind::kAttentionGrad: typed.scale = static_cast<float>(a.GetDouble("scale")); break;
    default: break;
  }
  return typed;
}

// The node's operand types fit its op and give its type (Internal, as the
// reference kernels report operands that do not fit: a graph the verifier
// would have rejected).
absl::Status CheckOperandTypes(const ir::Node& node, const std::vector<TensorType>& types) {
  if (node.op == OpKind::kConstant) return absl::OkStatus();
  absl::StatusOr<TensorType> inferred = ir::InferResultType(node.op, types, node.attributes);
  if (!inferred.ok()) return absl::InternalError(inferred.status().message());
  if (*inferred != node.type) {
    return absl::InternalError(absl::StrCat(ir::OpName(node.op), ": result type ",
                                            ir::TypeToString(node.type), " differs from ",
                                            ir::TypeToString(*inferred),
                                            ", the type of its operands' shape rule"));
  }
  // The shape rule of cross_entropy_grad leaves these to the kernel.
  if (node.op == OpKind::kCrossEntropyGrad &&
      (!ir::IsComputedFloat(types[0].dtype) || types[2].dtype != types[0].dtype)) {
    return absl::InternalError("cross_entropy_grad: logits and dy must be f32 or bf16, alike");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Unimplemented(const ir::Node& node, absl::string_view what) {
  return absl::UnimplementedError(absl::StrCat(ir::OpName(node.op), ": ", what));
}

std::vector<int64_t> RowMajorStrides(const Shape& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int axis = static_cast<int>(shape.size()) - 2; axis >= 0; --axis) {
    strides[axis] = strides[axis + 1] * shape[axis + 1];
  }
  return strides;
}

int64_t Product(const Shape& shape, size_t begin, size_t end) {
  int64_t product = 1;
  for (size_t axis = begin; axis < end; ++axis) product *= shape[axis];
  return product;
}

// A StridedMap over `extents` with strides[operand][axis], with extent-1
// axes dropped and each axis merged into its outer neighbour wherever every
// operand steps across both as over one axis (same-shape operands collapse
// to one axis). Unimplemented beyond kernels::kMaxRank merged axes.
absl::StatusOr<kernels::StridedMap> MakeStridedMap(const ir::Node& node,
                                                   const std::vector<int64_t>& extents,
                                                   const std::vector<std::vector<int64_t>>& strides) {
  kernels::StridedMap map;
  map.num_operands = static_cast<int>(strides.size());
  std::vector<int64_t> merged_extents;
  std::vector<std::vector<int64_t>> merged_strides(strides.size());
  for (size_t axis = 0; axis < extents.size(); ++axis) {
    if (extents[axis] == 1) continue;
    bool mergeable = !merged_extents.empty();
    for (size_t op = 0; mergeable && op < strides.size(); ++op) {
      mergeable = merged_strides[op].back() == strides[op][axis] * extents[axis];
    }
    if (mergeable) {
      merged_extents.back() *= extents[axis];
      for (size_t op = 0; op < strides.size(); ++op) merged_strides[op].back() = strides[op][axis];
    } else {
      merged_extents.push_back(extents[axis]);
      for (size_t op = 0; op < strides.size(); ++op) merged_strides[op].push_back(strides[op][axis]);
    }
  }
  if (merged_extents.size() > static_cast<size_t>(kernels::kMaxRank)) {
    return Unimplemented(node, absl::StrCat("more than ", kernels::kMaxRank,
                                            " axes after merging are not supported on the GPU"));
  }
  map.rank = static_cast<int>(merged_extents.size());
  for (int axis = 0; axis < map.rank; ++axis) {
    map.extents[axis] = merged_extents[axis];
    for (size_t op = 0; op < strides.size(); ++op) map.strides[op][axis] = merged_strides[op][axis];
  }
  return map;
}

// The NumPy broadcast of `inputs` to `out`: stride 0 along missing and
// extent-1 axes. The shape rules have checked that the shapes broadcast.
absl::StatusOr<kernels::StridedMap> MakeBroadcastMap(const ir::Node& node, const Shape& out,
                                                     const std::vector<const Shape*>& inputs) {
  std::vector<std::vector<int64_t>> strides;
  for (const Shape* input : inputs) {
    const std::vector<int64_t> contiguous = RowMajorStrides(*input);
    const int offset = static_cast<int>(out.size()) - static_cast<int>(input->size());
    std::vector<int64_t> aligned(out.size(), 0);
    for (int axis = std::max(offset, 0); axis < static_cast<int>(out.size()); ++axis) {
      if ((*input)[axis - offset] != 1) aligned[axis] = contiguous[axis - offset];
    }
    strides.push_back(std::move(aligned));
  }
  return MakeStridedMap(node, out, strides);
}

std::optional<kernels::ConvertOp> ConvertOpOf(DType from, DType to) {
  using kernels::ConvertOp;
  if (from == DType::kF32 && to == DType::kI32) return ConvertOp::kF32ToI32;
  if (from == DType::kI32 && to == DType::kF32) return ConvertOp::kI32ToF32;
  if (from == DType::kF32 && to == DType::kBF16) return ConvertOp::kF32ToBf16;
  if (from == DType::kBF16 && to == DType::kF32) return ConvertOp::kBf16ToF32;
  if (from == DType::kBF16 && to == DType::kI32) return ConvertOp::kBf16ToI32;
  if (from == DType::kI32 && to == DType::kBF16) return ConvertOp::kI32ToBf16;
  return std::nullopt;
}

// What `node`'s launches need that its operands' static types decide.
absl::StatusOr<NodePlan> PlanNode(const ir::Node& node, const std::vector<TensorType>& types) {
  NodePlan plan;
  plan.attributes = TypedAttributes(node);
  if (node.op == OpKind::kInput) return plan;
  if (absl::Status s = CheckOperandTypes(node, types); !s.ok()) return s;
  const ir::OpFamily family = ir::Def(node.op).family;
  if (family == ir::OpFamily::kReduction) {
    absl::StatusOr<kernels::ReductionPlan> reduction = PlanReduction(node, types[0].shape);
    if (!reduction.ok()) return reduction.status();
    plan.reduction = *reduction;
  } else if (node.op == OpKind::kTranspose) {
    const std::vector<int64_t> in_strides = RowMajorStrides(types[0].shape);
    std::vector<int64_t> strides;
    for (int64_t axis : node.attributes.GetInts("permutation")) strides.push_back(in_strides[axis]);
    absl::StatusOr<kernels::StridedMap> map = MakeStridedMap(node, node.type.shape, {strides});
    if (!map.ok()) return map.status();
    plan.map = *map;
  } else if (family == ir::OpFamily::kBinary || family == ir::OpFamily::kSelect || node.op == OpKind::kBroadcast) {
    std::vector<const Shape*> shapes;
    for (const TensorType& type : types) shapes.push_back(&type.shape);
    absl::StatusOr<kernels::StridedMap> map = MakeBroadcastMap(node, node.type.shape, shapes);
    if (!map.ok()) return map.status();
    plan.map = *map;
  }
  return plan;
}

GemmShape PlanGemm(const NodePlan::Attributes& attributes, const Shape& a, const Shape& b, const Shape& out) {
  GemmShape gemm;
  gemm.transpose_a = attributes.transpose_a;
  gemm.transpose_b = attributes.transpose_b;
  const size_t ra = a.size();
  const size_t rb = b.size();
  gemm.m = gemm.transpose_a ? a[ra - 1] : a[ra - 2];
  gemm.k = gemm.transpose_a ? a[ra - 2] : a[ra - 1];
  gemm.n = gemm.transpose_b ? b[rb - 2] : b[rb - 1];
  gemm.batch = Product(out, 0, out.size() - 2);
  gemm.a_step = ra == 2 ? 0 : gemm.m * gemm.k;
  gemm.b_step = rb == 2 ? 0 : gemm.k * gemm.n;
  if (ra > 2 && rb == 2 && !gemm.transpose_a) {
    gemm.m *= gemm.batch;
    gemm.batch = 1;
    gemm.a_step = 0;
  }
  gemm.lda = gemm.transpose_a ? gemm.m : gemm.k;
  gemm.ldb = gemm.transpose_b ? gemm.k : gemm.n;
  return gemm;
}

BiasEpilogues PlanBiasEpilogues(const ir::Graph& graph, const std::vector<bool>& needed) {
  const size_t count = static_cast<size_t>(graph.size());
  // Each value's readers (an operand read twice by one node counts twice),
  // and the last of them.
  std::vector<int32_t> readers(count, 0);
  std::vector<ir::ValueId> reader(count, -1);
  for (ir::ValueId id = 0; id < graph.size(); ++id) {
    if (!needed[id]) continue;
    for (ir::ValueId operand : graph.node(id).operands) {
      ++readers[operand];
      reader[operand] = id;
    }
  }
  std::vector<bool> output(count, false);
  for (const ir::GraphOutput& out : graph.outputs()) output[out.value] = true;

  BiasEpilogues result;
  result.of_matmul.assign(count, -1);
  for (ir::ValueId matmul = 0; matmul < graph.size(); ++matmul) {
    const ir::Node& m = graph.node(matmul);
    if (!needed[matmul] || m.op != OpKind::kMatMul || m.type.dtype != DType::kF32 || output[matmul] ||
        readers[matmul] != 1) {
      continue;
    }
    const ir::ValueId add = reader[matmul];
    const ir::Node& a = graph.node(add);
    if (a.op != OpKind::kAdd || a.operands.size() != 2 || a.type != m.type) continue;
    const ir::ValueId bias = a.operands[0] == matmul ? a.operands[1] : a.operands[0];
    const TensorType& bias_type = graph.type(bias);
    if (bias >= matmul || bias_type.dtype != DType::kF32 || bias_type.shape.size() != 1 ||
        bias_type.shape[0] != m.type.shape.back()) {
      continue;
    }
    result.of_matmul[matmul] = static_cast<int32_t>(result.pairs.size());
    result.pairs.push_back({matmul, add, bias});
  }
  return result;
}

RunPlan PlanRun(const ir::Graph& graph, const std::vector<ir::ValueId>& members, const std::vector<int32_t>& last_use) {
  RunPlan plan;
  plan.members = members;
  const ir::Node& last = graph.node(members.back());
  plan.elements = last.type.num_elements();
  ir::RunOperands operands = ir::OperandsOf(graph, members);
  for (size_t i = 0; i < operands.inputs.size(); ++i) {
    const TensorType& type = graph.type(operands.inputs[i]);
    kernels::FusedInput& read = plan.program.inputs[i];
    read.bf16 = type.dtype == DType::kBF16;
    read.period = ir::RepeatPeriod(type.shape, last.type.shape, kFusedRunRules.bias);
  }
  for (size_t m = 0; m < members.size(); ++m) {
    const ir::Node& node = graph.node(members[m]);
    kernels::FusedStep& step = plan.program.steps[m];
    step.op = node.op;
    step.arity = static_cast<int>(node.operands.size());
    step.bf16 = node.type.dtype == DType::kBF16;
    for (size_t k = 0; k < node.operands.size(); ++k) step.operands[k] = operands.sources[m][k];
    plan.stored.push_back(last_use[members[m]] > members.back());
  }
  plan.inputs = std::move(operands.inputs);
  plan.program.num_steps = static_cast<int>(members.size());
  plan.program.num_inputs = static_cast<int>(plan.inputs.size());
  return plan;
}

}  // namespace tandem::cuda::runner
