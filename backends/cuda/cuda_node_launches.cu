// The CUDA graph runner's launches (cuda_graph_runner_impl.h), an op family
// each: constants and conversions, elementwise maps, reductions, data
// movement, matmuls through cuBLAS, the row-wise ops, embeddings and
// attention. Each allocates its result from the runner's memory and
// launches on its stream (cuda_kernels.cuh); nothing here waits.
#include <bit>
#include <limits>
#include <optional>

#include "backends/cuda/cuda_graph_runner_impl.h"
#include "backends/cuda/cuda_status.h"
#include "ir/op_def.h"

namespace tandem::cuda {

using runner::ConvertOpOf;
using runner::CublasStatus;
using runner::DataOf;
using runner::DType;
using runner::GemmShape;
using runner::MakeBroadcastMap;
using runner::MakeStridedMap;
using runner::OpKind;
using runner::PlanGemm;
using runner::Product;
using runner::RowMajorStrides;
using runner::Shape;
using runner::TensorType;
using runner::Unimplemented;

absl::StatusOr<DeviceValue> CudaGraphRunner::Impl::Constant(const ir::Node& node, const NodePlan& plan) {
  const double value = plan.attributes.value;
  uint32_t bits = 0;
  switch (node.type.dtype) {
    case DType::kF32:
      bits = std::bit_cast<uint32_t>(static_cast<float>(value));
      break;
    case DType::kI32:
      bits = static_cast<uint32_t>(static_cast<int32_t>(value));
      break;
    case DType::kBF16:  // the f32 value rounded once, as the reference rounds it
      bits = ir::FloatToBf16(static_cast<float>(value));
      break;
    default:
      return Unimplemented(node, absl::StrCat("dtype ", ir::DTypeName(node.type.dtype),
                                              " is not computed on the GPU"));
  }
  absl::StatusOr<DeviceValue> out = Allocate(node.type);
  if (!out.ok()) return out.status();
  if (absl::Status s = CudaStatus(
          kernels::LaunchFill(bits, static_cast<int>(ir::DTypeSize(node.type.dtype)), out->data(),
                              node.type.num_elements(), stream),
          "Fill launch");
      !s.ok()) {
    return s;
  }
  return out;
}

absl::StatusOr<DeviceValue> CudaGraphRunner::Impl::Convert(const ir::Node& node,
                                                           const DeviceValue& x) {
  return ConvertTo(node, x, node.type.dtype);
}

absl::StatusOr<DeviceValue> CudaGraphRunner::Impl::ConvertTo(const ir::Node& node, const DeviceValue& x,
                                                             DType to) {
  const DType from = x.type.dtype;
  const std::optional<kernels::ConvertOp> op = ConvertOpOf(from, to);
  if (!op.has_value() && from != to) {
    return Unimplemented(node, absl::StrCat(ir::DTypeName(from), " to ", ir::DTypeName(to),
                                            " is not computed on the GPU"));
  }
  absl::StatusOr<DeviceValue> out = Allocate(TensorType{to, x.type.shape});
  if (!out.ok()) return out.status();
  if (!op.has_value()) {
    if (out->type.num_bytes() > 0) {
      if (absl::Status s = CudaStatus(
              cudaMemcpyAsync(out->data(), x.data(), static_cast<size_t>(out->type.num_bytes()),
                              cudaMemcpyDeviceToDevice, stream),
              "cudaMemcpyAsync (convert)");
          !s.ok()) {
        return s;
      }
    }
    return out;
  }
  if (absl::Status s = CudaStatus(
          kernels::LaunchConvert(*op, x.data(), out->data(), x.type.num_elements(), stream),
          "Convert launch");
      !s.ok()) {
    return s;
  }
  return out;
}

absl::StatusOr<DeviceValue> CudaGraphRunner::Impl::Elementwise(
    const ir::Node& node, const NodePlan& plan, const std::vector<const DeviceValue*>& operands) {
  absl::StatusOr<DeviceValue> out = Allocate(node.type);
  if (!out.ok()) return out.status();
  // f32 or bf16 storage each; the kernels compute in f32.
  auto in = [&](size_t i) { return operands[i]->elements(); };
  const kernels::ElementsOut result = out->mutable_elements();
  cudaError_t error = cudaSuccess;
  switch (ir::Def(node.op).family) {
    case ir::OpFamily::kUnary:
      error = kernels::LaunchUnary(node.op, in(0), result, node.type.num_elements(), stream);
      break;
    case ir::OpFamily::kBinary:
      error = kernels::LaunchBinary(node.op, in(0), in(1), result, *plan.map, stream);
      break;
    case ir::OpFamily::kSelect:
      error = kernels::LaunchWhere(in(0), in(1), in(2), result, *plan.map, stream);
      break;
    default:
      return absl::InternalError(absl::StrCat("CudaGraphRunner: ", ir::OpName(node.op), " is not elementwise"));
  }
  if (absl::Status s = CudaStatus(error, "elementwise launch"); !s.ok()) return s;
  return out;
}

absl::Status CudaGraphRunner::Impl::EvaluateRun(const ir::Graph& graph, const runner::RunPlan& run,
                                                std::vector<DeviceValue>& values) {
  kernels::FusedProgram program = run.program;
  for (size_t k = 0; k < run.inputs.size(); ++k) {
    const DeviceValue& input = values[run.inputs[k]];
    if (!input.defined()) {
      return absl::InternalError(absl::StrCat(ir::DescribeValue(graph, run.members.front()),
                                              ": an operand tensor of its fused run is missing (not computed)"));
    }
    program.inputs[k].data = input.data();
  }
  for (size_t m = 0; m < run.members.size(); ++m) {
    if (!run.stored[m]) continue;
    const ir::ValueId id = run.members[m];
    absl::StatusOr<DeviceValue> out = Allocate(graph.node(id).type);
    if (!out.ok()) {
      return absl::Status(out.status().code(), absl::StrCat(ir::DescribeValue(graph, id), ": ", out.status().message()));
    }
    program.steps[m].out = out->data();
    values[id] = *std::move(out);
  }
  const cudaError_t error = kernels::LaunchFused(program, run.elements, stream);
  if (error == cudaSuccess) return absl::OkStatus();
  return CudaStatus(error, absl::StrCat("fused launch of ", ir::DescribeValue(graph, run.members.front()), " to ",
                                        ir::DescribeValue(graph, run.members.back())));
}

absl::StatusOr<DeviceValue> CudaGraphRunner::Impl::Reduce(const ir::Node& node, const NodePlan& plan,
                                                          const DeviceValue& x) {
  kernels::ReduceOp op = kernels::ReduceOp::kSum;
  if (node.op == OpKind::kReduceMean) op = kernels::ReduceOp::kMean;
  if (node.op == OpKind::kReduceMax) op = kernels::ReduceOp::kMax;
  absl::StatusOr<DeviceValue> out = Allocate(node.type);
  if (!out.ok()) return out.status();
  // Freed in stream order after the launch, like any value.
  absl::StatusOr<Buffer> scratch = AllocateBytes(static_cast<int64_t>(kernels::ReduceScratchBytes(*plan.reduction)));
  if (!scratch.ok()) return scratch.status();
  if (absl::Status s = CudaStatus(
          kernels::LaunchReduce(op, x.elements(), out->mutable_elements(), *plan.reduction, DataOf(*scratch), stream),
          "Reduce launch");
      !s.ok()) {
    return s;
  }
  return out;
}

absl::StatusOr<DeviceValue> CudaGraphRunner::Impl::DataMovement(
    const ir::Node& node, const NodePlan& plan, const std::vector<const DeviceValue*>& operands) {
  const DeviceValue& x = *operands[0];
  // reshape and pipeline_yield share the operand's storage, as on the CPU.
  if (node.op == OpKind::kReshape || node.op == OpKind::kPipelineYield) {
    return DeviceValue{node.type, x.buffer};
  }
  const int element_size = static_cast<int>(ir::DTypeSize(node.type.dtype));
  absl::StatusOr<DeviceValue> out = Allocate(node.type);
  if (!out.ok()) return out.status();
  const Shape& out_shape = node.type.shape;
  cudaError_t error = cudaSuccess;
  switch (node.op) {
    case OpKind::kTranspose:
    case OpKind::kBroadcast:
      error = kernels::LaunchGather(x.data(), out->data(), element_size, *plan.map, stream);
      break;
    case OpKind::kSlice: {
      const Shape& in = x.type.shape;
      const size_t axis = static_cast<size_t>(plan.attributes.axis);
      const int64_t start = plan.attributes.start;
      const int64_t limit = plan.attributes.limit;
      const int64_t outer = Product(in, 0, axis);
      const int64_t inner = Product(in, axis + 1, in.size());
      const auto* src = static_cast<const std::byte*>(x.data());
      error = kernels::LaunchCopyRows(src + start * inner * element_size, in[axis] * inner,
                                      out->data(), (limit - start) * inner, outer,
                                      (limit - start) * inner, element_size, stream);
      break;
    }
    case OpKind::kConcat: {
      const size_t axis = static_cast<size_t>(plan.attributes.axis);
      const int64_t outer = Product(out_shape, 0, axis);
      const int64_t inner = Product(out_shape, axis + 1, out_shape.size());
      auto* dst = static_cast<std::byte*>(out->data());
      int64_t column = 0;
      for (const DeviceValue* operand : operands) {
        const int64_t row_length = operand->type.shape[axis] * inner;
        error = kernels::LaunchCopyRows(operand->data(), row_length, dst + column * element_size,
                                        out_shape[axis] * inner, outer, row_length, element_size,
                                        stream);
        if (error != cudaSuccess) break;
        column += row_length;
      }
      break;
    }
    default:
      return absl::InternalError(
          absl::StrCat("CudaGraphRunner: ", ir::OpName(node.op), " does not move data"));
  }
  if (absl::Status s = CudaStatus(error, "data movement launch"); !s.ok()) return s;
  return out;
}

absl::StatusOr<DeviceValue> CudaGraphRunner::Impl::MatMul(const ir::Node& node, const NodePlan& plan,
                                                          const DeviceValue& a, const DeviceValue& b) {
  const GemmShape gemm = PlanGemm(plan.attributes, a.type.shape, b.type.shape, node.type.shape);
  const int64_t m = gemm.m, n = gemm.n, k = gemm.k, batch = gemm.batch;
  const int64_t lda = gemm.lda, ldb = gemm.ldb, a_step = gemm.a_step, b_step = gemm.b_step;
  if (m == 0 || n == 0 || batch == 0 || k == 0) {  // empty, or all zeros
    absl::StatusOr<DeviceValue> out = Allocate(node.type);
    if (!out.ok() || out->type.num_bytes() == 0) return out;
    if (absl::Status s = CudaStatus(
            cudaMemsetAsync(out->data(), 0, static_cast<size_t>(node.type.num_bytes()), stream), "cudaMemsetAsync");
        !s.ok()) {
      return s;
    }
    return out;
  }
  // bf16 operands (a bf16 model's; the shape rules give both one type) go
  // to the tensor cores as they are: the sum accumulated in f32, then
  // rounded to bf16 once, as the reference rounds it.
  const bool bf16_operands = a.type.dtype == DType::kBF16;
  absl::StatusOr<DeviceValue> out = Allocate(TensorType{DType::kF32, node.type.shape});
  if (!out.ok()) return out.status();
  constexpr int64_t kIntMax = std::numeric_limits<int>::max();
  if (m > kIntMax || n > kIntMax || k > kIntMax || batch > kIntMax) {
    return Unimplemented(node, "a GEMM extent beyond the int range is not supported on the GPU");
  }
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: cuBLAS
  // gets the operands swapped, each with its row-major leading dimension.
  const cublasOperation_t op_a = gemm.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = gemm.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const float alpha = 1.0f;
  const float beta = 0.0f;
  if (!bf16_operands && options.precision != Precision::kBf16) {
    if (absl::Status s = CublasStatus(
            *blas,
            blas->sgemm_strided_batched(cublas, op_b, op_a, static_cast<int>(n), static_cast<int>(m),
                                      static_cast<int>(k), &alpha, b.f32(), static_cast<int>(ldb),
                                      b_step, a.f32(), static_cast<int>(lda), a_step, &beta,
                                      out->mutable_f32(), static_cast<int>(n), m * n,
                                      static_cast<int>(batch)),
            "cublasSgemmStridedBatched");
        !s.ok()) {
      return s;
    }
    return out;
  }
  // Precision bf16: both f32 operands rounded to bf16 on the device (once
  // per operand: Narrowed), f32 accumulation; bf16 operands as they are.
  absl::StatusOr<const void*> a16 = bf16_operands ? a.data() : Narrowed(a);
  if (!a16.ok()) return a16.status();
  absl::StatusOr<const void*> b16 = bf16_operands ? b.data() : Narrowed(b);
  if (!b16.ok()) return b16.status();
  if (absl::Status s = CublasStatus(
          *blas,
          blas->gemm_strided_batched_ex(cublas, op_b, op_a, static_cast<int>(n), static_cast<int>(m),
                                     static_cast<int>(k), &alpha, *b16, CUDA_R_16BF,
                                     static_cast<int>(ldb), b_step, *a16, CUDA_R_16BF,
                                     static_cast<int>(lda), a_step, &beta, out->data(),
                                     CUDA_R_32F, static_cast<int>(n), m * n,
                                     static_cast<int>(batch), CUBLAS_COMPUTE_32F,
                                     CUBLAS_GEMM_DEFAULT),
          "cublasGemmStridedBatchedEx");
      !s.ok()) {
    return s;
  }
  if (node.type.dtype == DType::kBF16) return ConvertTo(node, *out, DType::kBF16);
  return out;
}

absl::StatusOr<const void*> CudaGraphRunner::Impl::Narrowed(const DeviceValue& x) {
  absl::erase_if(narrowed, [](const auto& entry) { return entry.second.source.expired(); });
  const int64_t elements = x.type.num_elements();
  auto found = narrowed.find(x.buffer.get());
  if (found != narrowed.end() && found->second.elements == elements) return DataOf(found->second.copy);
  absl::StatusOr<Buffer> copy = AllocateBytes(elements * 2);
  if (!copy.ok()) return copy.status();
  if (absl::Status s = CudaStatus(kernels::LaunchToBf16(x.f32(), DataOf(*copy), elements, stream), "ToBf16 launch");
      !s.ok()) {
    return s;
  }
  narrowed[x.buffer.get()] = NarrowedCopy{x.buffer, elements, *copy};
  ++narrowings;
  return DataOf(*copy);
}

absl::StatusOr<DeviceValue> CudaGraphRunner::Impl::RowWise(
    ir::ValueId id, const ir::Node& node, const NodePlan& plan, const std::vector<const DeviceValue*>& operands) {
  absl::StatusOr<DeviceValue> out = Allocate(node.type);
  if (!out.ok()) return out.status();
  const Shape& shape = operands[0]->type.shape;
  const int64_t length = shape.empty() ? 1 : shape.back();
  const int64_t rows = shape.empty() ? 1 : Product(shape, 0, shape.size() - 1);
  auto in = [&](size_t i) { return i < operands.size() ? operands[i]->elements() : kernels::ElementsIn{}; };
  const kernels::ElementsOut stored = out->mutable_elements();
  cudaError_t error = cudaSuccess;
  switch (node.op) {
    case OpKind::kSoftmax:
      error = kernels::LaunchRows(kernels::RowOp::kSoftmax, in(0), {}, stored, rows, length, stream);
      break;
    case OpKind::kLogSoftmax:
      error = kernels::LaunchRows(kernels::RowOp::kLogSoftmax, in(0), {}, stored, rows, length, stream);
      break;
    case OpKind::kSoftmaxGrad:
      error = kernels::LaunchRows(kernels::RowOp::kSoftmaxGrad, in(0), in(1), stored, rows, length, stream);
      break;
    case OpKind::kLogSoftmaxGrad:
      error = kernels::LaunchRows(kernels::RowOp::kLogSoftmaxGrad, in(0), in(1), stored, rows, length, stream);
      break;
    case OpKind::kNormalize:
    case OpKind::kLayerNorm:
    case OpKind::kNormalizeGrad: {
      const float eps = plan.attributes.eps;
      kernels::NormOp op = kernels::NormOp::kNormalize;
      if (node.op == OpKind::kLayerNorm) op = kernels::NormOp::kLayerNorm;
      if (node.op == OpKind::kNormalizeGrad) op = kernels::NormOp::kNormalizeGrad;
      error = kernels::LaunchNormalization(op, in(0), in(1), in(2), stored, rows, length, eps, stream);
      break;
    }
    case OpKind::kCausalMask: {
      const int64_t matrix_rows = shape[shape.size() - 2];
      const int64_t matrices = Product(shape, 0, shape.size() - 2);
      error = kernels::LaunchCausalMask(in(0), stored, matrices, matrix_rows, length, plan.attributes.fill, stream);
      break;
    }
    case OpKind::kRotary: {
      const int64_t positions = shape[shape.size() - 2];
      const int32_t* given = nullptr;
      if (operands.size() > 1) {
        // A position's angle needs no bound but 0 below it.
        if (absl::Status s = CheckRange(id, *operands[1], std::numeric_limits<int32_t>::max(), "position");
            !s.ok()) {
          return s;
        }
        given = operands[1]->i32();
      }
      error = kernels::LaunchRotary(in(0), given, stored, Product(shape, 0, shape.size() - 2), positions, length,
                                    plan.attributes.theta, plan.attributes.inverse,
                                    stream);
      break;
    }
    case OpKind::kCrossEntropy:
    case OpKind::kCrossEntropyGrad: {
      // logits [rows, length] (f32: the op's rule), labels [rows]; the
      // check runs first so its answer covers exactly the labels this
      // kernel reads.
      const DeviceValue& labels = *operands[1];
      if (absl::Status s = CheckRange(id, labels, length, "label"); !s.ok()) return s;
      const float* logits = operands[0]->f32();
      if (node.op == OpKind::kCrossEntropy) {
        error = kernels::LaunchCrossEntropy(logits, labels.i32(), out->mutable_f32(), rows, length, stream);
      } else {
        error = kernels::LaunchCrossEntropyGrad(logits, labels.i32(), operands[2]->f32(), out->mutable_f32(), rows,
                                                length, stream);
      }
      break;
    }
    default:
      return absl::InternalError(
          absl::StrCat("CudaGraphRunner: ", ir::OpName(node.op), " is not row-wise"));
  }
  if (absl::Status s = CudaStatus(error, "row kernel launch"); !s.ok()) return s;
  return out;
}

absl::StatusOr<DeviceValue> CudaGraphRunner::Impl::Embedding(
    ir::ValueId id, const ir::Node& node, const std::vector<const DeviceValue*>& operands) {
  absl::StatusOr<DeviceValue> out = Allocate(node.type);
  if (!out.ok()) return out.status();
  cudaError_t error = cudaSuccess;
  if (node.op == OpKind::kEmbedding) {
    const DeviceValue& table = *operands[0];
    const DeviceValue& ids = *operands[1];
    const int64_t num_rows = table.type.shape[0];
    const int64_t width = table.type.shape[1];
    if (absl::Status s = CheckRange(id, ids, num_rows, "id"); !s.ok()) return s;
    error = kernels::LaunchEmbedding(table.elements(), ids.i32(), out->mutable_elements(), ids.type.num_elements(),
                                     num_rows, width, stream);
  } else {
    const DeviceValue& ids = *operands[0];
    const DeviceValue& dy = *operands[1];
    const int64_t num_rows = node.type.shape[0];
    const int64_t width = node.type.shape[1];
    const int64_t positions = ids.type.num_elements();
    if (positions > std::numeric_limits<int32_t>::max()) {
      return Unimplemented(node, absl::StrCat(positions, " ids (the sort takes at most 2^31 - 1)"));
    }
    if (absl::Status s = CheckRange(id, ids, num_rows, "id"); !s.ok()) return s;
    // Freed in stream order after the launch, like any value.
    absl::StatusOr<Buffer> scratch =
        AllocateBytes(static_cast<int64_t>(kernels::EmbeddingGradScratchBytes(positions)));
    if (!scratch.ok()) return scratch.status();
    error = kernels::LaunchEmbeddingGrad(ids.i32(), dy.elements(), out->mutable_elements(), positions, num_rows,
                                         width, DataOf(*scratch), stream);
  }
  if (absl::Status s = CudaStatus(error, "embedding launch"); !s.ok()) return s;
  return out;
}

absl::StatusOr<DeviceValue> CudaGraphRunner::Impl::Attention(ir::ValueId id, const ir::Node& node,
                                                             const NodePlan& plan,
                                                             const std::vector<const DeviceValue*>& operands) {
  absl::StatusOr<DeviceValue> out = Allocate(node.type);
  if (!out.ok()) return out.status();
  const ir::Shape& q = operands[0]->type.shape;
  const int64_t batch = q[0], heads = q[1], seq = q[2], width = q[3];
  const int64_t kv_heads = operands[1]->type.shape[1], keys = operands[1]->type.shape[2];
  // q, k, v (and dy) and the result share one dtype, f32 or bf16 (the op's
  // rule). Precision bf16 takes attention's two products as it takes a
  // matmul's: on f32 operands rounded to bf16 (once per operand: Narrowed),
  // on tensor cores, the result f32; at the widths the tensor cores take.
  const bool narrow = options.precision == Precision::kBf16 && node.type.dtype == DType::kF32 &&
                      kernels::AttentionOnTensorCores(width);
  const size_t floats = node.op == OpKind::kAttention ? 3 : 4;  // q, k, v (, dy); then the forward's positions
  std::vector<kernels::ElementsIn> in;
  for (size_t i = 0; i < floats; ++i) {
    if (!narrow) {
      in.push_back(operands[i]->elements());
      continue;
    }
    absl::StatusOr<const void*> narrowed = Narrowed(*operands[i]);
    if (!narrowed.ok()) return narrowed.status();
    in.push_back({*narrowed, /*bf16=*/true});
  }
  const kernels::ElementsIn k = in[1], v = in[2];
  cudaError_t error = cudaSuccess;
  if (node.op == OpKind::kAttention) {
    const int32_t* positions = nullptr;
    if (operands.size() > 3) {  // queries against a cache: each reads keys up to its position
      if (absl::Status s = CheckRange(id, *operands[3], keys, "position"); !s.ok()) return s;
      positions = operands[3]->i32();
    }
    error = kernels::LaunchAttention(in[0], k, v, positions, out->mutable_elements(), batch, heads, kv_heads, seq,
                                     keys, width, plan.attributes.scale, stream);
  } else {
    // Freed in stream order after the launch, like any value.
    absl::StatusOr<Buffer> scratch =
        AllocateBytes(static_cast<int64_t>(kernels::AttentionGradScratchBytes(batch * heads * seq)));
    if (!scratch.ok()) return scratch.status();
    // The result is dq, dk and dv one after another.
    const kernels::ElementsOut dq = out->mutable_elements();
    kernels::ElementsOut dk = dq, dv = dq;
    dk.data = static_cast<char*>(dq.data) + operands[0]->type.num_bytes();
    dv.data = static_cast<char*>(dk.data) + operands[1]->type.num_bytes();
    error = kernels::LaunchAttentionGrad(in[0], k, v, in[3], dq, dk, dv, batch, heads, kv_heads, seq, width,
                                         plan.attributes.scale, DataOf(*scratch), stream);
  }
  if (absl::Status s = CudaStatus(error, "attention launch"); !s.ok()) return s;
  return out;
}

}  // namespace tandem::cuda
