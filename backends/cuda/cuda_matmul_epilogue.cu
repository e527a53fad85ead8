// The CUDA graph runner's matmul with its bias add as one cuBLASLt GEMM
// (CUBLASLT_EPILOGUE_BIAS; the pairs: runner::PlanBiasEpilogues): cuBLASLt
// loaded at the first such matmul, a plan per GEMM shape (descriptors,
// layouts, the heuristic's algorithm, asked once and kept, no split-K), and
// the launch on the runner's stream. A shape cuBLASLt does not take falls
// back, remembered, to MatMul and the add (cuda_node_launches.cu).
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <optional>

#include "backends/cuda/cuda_graph_runner_impl.h"
#include "backends/cuda/cuda_status.h"

namespace tandem::cuda {

using runner::CublasStatus;
using runner::DType;
using runner::GemmShape;
using runner::PlanGemm;
using runner::TensorType;

bool CudaGraphRunner::Impl::CublasLtReady() {
  if (!lt_tried) {
    lt_tried = true;
    absl::StatusOr<std::unique_ptr<CublasLtLibrary>> loaded = LoadCublasLt();
    cublasLtHandle_t handle = nullptr;
    if (loaded.ok() && (*loaded)->create(&handle) == CUBLAS_STATUS_SUCCESS) {
      lt = *std::move(loaded);
      lt_handle = handle;
    }
  }
  return lt != nullptr;
}

std::unique_ptr<runner::EpiloguePlan> CudaGraphRunner::Impl::PlanEpilogue(const GemmShape& gemm, bool bf16,
                                                                          const void* bias) {
  auto plan = std::make_unique<runner::EpiloguePlan>(*lt);
  // The compute type cublasSgemm's math mode gives (Init): f32 products
  // and sums, TF32 tensor cores only for kTf32 (cuBLASLt ignores the math
  // mode); bf16 operands accumulate in f32, as cublasGemmStridedBatchedEx's.
  const cublasComputeType_t compute =
      options.precision == Precision::kTf32 && !bf16 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  const cudaDataType operand_type = bf16 ? CUDA_R_16BF : CUDA_R_32F;
  bool ok = lt->matmul_desc_create(&plan->operation, compute, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS;
  const auto set = [&](cublasLtMatmulDescAttributes_t attribute, const auto& value) {
    ok =
        ok && lt->matmul_desc_set_attribute(plan->operation, attribute, &value, sizeof(value)) == CUBLAS_STATUS_SUCCESS;
  };
  // cuBLAS's A is the matmul's b, its B the matmul's a (GemmShape).
  set(CUBLASLT_MATMUL_DESC_TRANSA, static_cast<int32_t>(gemm.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N));
  set(CUBLASLT_MATMUL_DESC_TRANSB, static_cast<int32_t>(gemm.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N));
  set(CUBLASLT_MATMUL_DESC_EPILOGUE, static_cast<uint32_t>(CUBLASLT_EPILOGUE_BIAS));
  set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, static_cast<int32_t>(CUDA_R_32F));
  set(CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, int64_t{0});  // one bias for every batch entry
  set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
  const auto layout = [&](cublasLtMatrixLayout_t& made, cudaDataType type, int64_t rows, int64_t columns,
                          int64_t leading, int64_t step) {
    ok = ok && lt->matrix_layout_create(&made, type, static_cast<uint64_t>(rows), static_cast<uint64_t>(columns),
                                        leading) == CUBLAS_STATUS_SUCCESS;
    const int32_t batch = static_cast<int32_t>(gemm.batch);
    ok = ok && lt->matrix_layout_set_attribute(made, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof(batch)) ==
                   CUBLAS_STATUS_SUCCESS;
    ok = ok && lt->matrix_layout_set_attribute(made, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &step,
                                               sizeof(step)) == CUBLAS_STATUS_SUCCESS;
  };
  // Column-major, as stored: b is n x k (k x n transposed), a is k x m
  // (m x k transposed), the result n x m.
  layout(plan->a, operand_type, gemm.transpose_b ? gemm.k : gemm.n, gemm.transpose_b ? gemm.n : gemm.k, gemm.ldb,
         gemm.b_step);
  layout(plan->b, operand_type, gemm.transpose_a ? gemm.m : gemm.k, gemm.transpose_a ? gemm.k : gemm.m, gemm.lda,
         gemm.a_step);
  layout(plan->d, CUDA_R_32F, gemm.n, gemm.m, gemm.n, gemm.m * gemm.n);
  // The reduction scheme pinned: no split-K partials (each sum over k in
  // one sequence), a fixed workspace, and the heuristic's first algorithm
  // kept for every later call of this shape.
  cublasLtMatmulPreference_t preference = nullptr;
  ok = ok && lt->preference_create(&preference) == CUBLAS_STATUS_SUCCESS;
  const uint64_t workspace_bytes = runner::kCublasWorkspaceBytes;
  const uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_NONE;
  ok = ok && lt->preference_set_attribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes,
                                          sizeof(workspace_bytes)) == CUBLAS_STATUS_SUCCESS;
  ok = ok && lt->preference_set_attribute(preference, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes,
                                          sizeof(schemes)) == CUBLAS_STATUS_SUCCESS;
  cublasLtMatmulHeuristicResult_t found{};
  int count = 0;
  ok = ok &&
       lt->algo_get_heuristic(lt_handle, plan->operation, plan->a, plan->b, plan->d, plan->d, preference, 1, &found,
                              &count) == CUBLAS_STATUS_SUCCESS &&
       count == 1 && found.state == CUBLAS_STATUS_SUCCESS && found.workspaceSize <= runner::kCublasWorkspaceBytes;
  if (preference != nullptr) lt->preference_destroy(preference);
  plan->algorithm = found.algo;
  plan->supported = ok;
  return plan;
}

absl::StatusOr<std::optional<DeviceValue>> CudaGraphRunner::Impl::MatMulBias(const ir::Node& node, const NodePlan& plan,
                                                                             const DeviceValue& a, const DeviceValue& b,
                                                                             const DeviceValue& bias,
                                                                             const TensorType& type) {
  if (!a.defined() || !b.defined() || !bias.defined() || a.type.dtype != DType::kF32 || b.type.dtype != DType::kF32) {
    return std::nullopt;  // the matmul's own evaluation reports a missing operand
  }
  const GemmShape gemm = PlanGemm(plan.attributes, a.type.shape, b.type.shape, node.type.shape);
  constexpr int64_t kIntMax = std::numeric_limits<int>::max();
  if (gemm.m == 0 || gemm.n == 0 || gemm.k == 0 || gemm.batch == 0 || gemm.m > kIntMax || gemm.n > kIntMax ||
      gemm.k > kIntMax || gemm.batch > kIntMax) {
    return std::nullopt;
  }
  if (!CublasLtReady()) return std::nullopt;
  // Precision bf16: the operands narrowed as MatMul narrows them.
  const bool bf16 = options.precision == Precision::kBf16;
  const runner::EpilogueKey key{.m = gemm.m,
                                .n = gemm.n,
                                .k = gemm.k,
                                .batch = gemm.batch,
                                .lda = gemm.lda,
                                .ldb = gemm.ldb,
                                .a_step = gemm.a_step,
                                .b_step = gemm.b_step,
                                .transpose_a = gemm.transpose_a,
                                .transpose_b = gemm.transpose_b,
                                .bf16 = bf16};
  auto [found, inserted] = epilogue_plans.try_emplace(key, nullptr);
  if (inserted) found->second = PlanEpilogue(gemm, bf16, bias.data());
  runner::EpiloguePlan& epilogue = *found->second;
  if (!epilogue.supported) return std::nullopt;  // before any narrowing or allocation: MatMul does its own
  absl::StatusOr<const void*> a_data = bf16 ? Narrowed(a) : absl::StatusOr<const void*>(a.data());
  if (!a_data.ok()) return a_data.status();
  absl::StatusOr<const void*> b_data = bf16 ? Narrowed(b) : absl::StatusOr<const void*>(b.data());
  if (!b_data.ok()) return b_data.status();
  absl::StatusOr<DeviceValue> out = Allocate(type);
  if (!out.ok()) return out.status();
  for (const void* pointer : std::initializer_list<const void*>{*a_data, *b_data, bias.data(), out->data()}) {
    if (reinterpret_cast<uintptr_t>(pointer) % runner::kEpilogueAlignment != 0) return std::nullopt;
  }
  const void* bias_data = bias.data();
  if (absl::Status s = CublasStatus(*lt,
                                    lt->matmul_desc_set_attribute(epilogue.operation, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                                  &bias_data, sizeof(bias_data)),
                                    "cublasLtMatmulDescSetAttribute");
      !s.ok()) {
    return s;
  }
  const float alpha = 1.0f;
  const float beta = 0.0f;
  const cublasStatus_t status = lt->matmul(lt_handle, epilogue.operation, &alpha, *b_data, epilogue.a, *a_data,
                                           epilogue.b, &beta, out->data(), epilogue.d, out->data(), epilogue.d,
                                           &epilogue.algorithm, workspace, runner::kCublasWorkspaceBytes, stream);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED) {
    epilogue.supported = false;  // this shape runs unfused from now on
    return std::nullopt;
  }
  if (absl::Status s = CublasStatus(*lt, status, "cublasLtMatmul"); !s.ok()) return s;
  ++epilogue_launches;
  return std::optional<DeviceValue>(*std::move(out));
}

}  // namespace tandem::cuda
