// The cuBLAS function table (cublas_library.h) for the CUDA backend built
// on CUDA's execution model (cuda_on_cpu.h): the GEMMs Tandem calls,
// computed on the host in cuBLAS's column-major convention, so the graph
// runner's own calls (operand order, leading dimensions, strides, bf16
// operands) are what is tested. Each output element is one f32 sum over k
// in increasing order; a GPU's cuBLAS sums in its own order, so the two
// agree within rounding, as the runner's contract says. Handles, streams,
// modes and workspaces are accepted and ignored.
//
// And cuBLASLt's table, for the GEMMs with a bias epilogue: its descriptors
// are host structs holding the attributes the runner sets (any other is
// CUBLAS_STATUS_NOT_SUPPORTED, as is a combination this table does not
// compute); its heuristic offers one algorithm, and its matmul is the same
// Gemm (so the same sums, in the same order, as cuBLAS's table here) with
// the bias added to each stored element after it: the bits of the GEMM
// followed by the runner's add kernel. A test can have it decline the bias
// epilogue as cuBLASLt declines a shape (cuda_on_cpu::BiasEpilogueAnswer).
#include <cuda_bf16.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>

#include "backends/cuda/cublas_library.h"
#include "backends/cuda/cuda_on_cpu.h"

namespace tandem::cuda {
namespace {

struct HandleOnCpu {};

std::atomic<int64_t> f32_gemms{0}, bf16_gemms{0}, bias_epilogues{0};
std::atomic<int64_t> bias_epilogue_heuristics{0}, bias_epilogues_declined{0};
std::atomic<cuda_on_cpu::BiasEpilogueAnswer> bias_epilogue_answer{cuda_on_cpu::BiasEpilogueAnswer::kTaken};

float Element(const void* data, cudaDataType type, int64_t index) {
  if (type == CUDA_R_16BF) return __bfloat162float(static_cast<const __nv_bfloat16*>(data)[index]);
  return static_cast<const float*>(data)[index];
}

// C[i + j ldc] = alpha sum_p op(A)[i, p] op(B)[p, j] + beta C[...], column
// major, for each of `batch` matrices `stride_*` elements apart.
cublasStatus_t Gemm(cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k, float alpha,
                    const void* a, cudaDataType a_type, int lda, long long a_stride, const void* b,
                    cudaDataType b_type, int ldb, long long b_stride, float beta, float* c, int ldc,
                    long long c_stride, int batch) {
  if (tandem::cuda_on_cpu::KernelsSkipped()) return CUBLAS_STATUS_SUCCESS;
  if (m < 0 || n < 0 || k < 0 || batch < 0) return CUBLAS_STATUS_INVALID_VALUE;
  ++(a_type == CUDA_R_16BF && b_type == CUDA_R_16BF ? bf16_gemms : f32_gemms);
  for (int matrix = 0; matrix < batch; ++matrix) {
    const int64_t a_base = matrix * a_stride, b_base = matrix * b_stride, c_base = matrix * c_stride;
    for (int j = 0; j < n; ++j) {
      for (int i = 0; i < m; ++i) {
        float sum = 0.0f;
        for (int p = 0; p < k; ++p) {
          const int64_t a_index = transa == CUBLAS_OP_N ? i + int64_t{p} * lda : p + int64_t{i} * lda;
          const int64_t b_index = transb == CUBLAS_OP_N ? p + int64_t{j} * ldb : j + int64_t{p} * ldb;
          sum += Element(a, a_type, a_base + a_index) * Element(b, b_type, b_base + b_index);
        }
        float& out = c[c_base + i + int64_t{j} * ldc];
        out = beta == 0.0f ? alpha * sum : alpha * sum + beta * out;
      }
    }
  }
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t Create(cublasHandle_t* handle) {
  *handle = reinterpret_cast<cublasHandle_t>(new HandleOnCpu);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t Destroy(cublasHandle_t handle) {
  delete reinterpret_cast<HandleOnCpu*>(handle);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t SetStream(cublasHandle_t, cudaStream_t) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t SetAtomicsMode(cublasHandle_t, cublasAtomicsMode_t) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t SetMathMode(cublasHandle_t, cublasMath_t) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t SetWorkspace(cublasHandle_t, void*, size_t) { return CUBLAS_STATUS_SUCCESS; }

cublasStatus_t SgemmStridedBatched(cublasHandle_t, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                                   int k, const float* alpha, const float* a, int lda, long long a_stride,
                                   const float* b, int ldb, long long b_stride, const float* beta, float* c, int ldc,
                                   long long c_stride, int batch) {
  return Gemm(transa, transb, m, n, k, *alpha, a, CUDA_R_32F, lda, a_stride, b, CUDA_R_32F, ldb, b_stride, *beta, c,
              ldc, c_stride, batch);
}

cublasStatus_t GemmStridedBatchedEx(cublasHandle_t, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                                    int k, const void* alpha, const void* a, cudaDataType a_type, int lda,
                                    long long a_stride, const void* b, cudaDataType b_type, int ldb,
                                    long long b_stride, const void* beta, void* c, cudaDataType c_type, int ldc,
                                    long long c_stride, int batch, cublasComputeType_t compute, cublasGemmAlgo_t) {
  const bool supported_input = [](cudaDataType type) { return type == CUDA_R_32F || type == CUDA_R_16BF; }(a_type) &&
                               (b_type == CUDA_R_32F || b_type == CUDA_R_16BF);
  if (!supported_input || c_type != CUDA_R_32F || compute != CUBLAS_COMPUTE_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  return Gemm(transa, transb, m, n, k, *static_cast<const float*>(alpha), a, a_type, lda, a_stride, b, b_type, ldb,
              b_stride, *static_cast<const float*>(beta), static_cast<float*>(c), ldc, c_stride, batch);
}

const char* StatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    default:
      return "cuBLAS status (on the CPU)";
  }
}

// ---- cuBLASLt.

struct LtHandleOnCpu {};

// The attributes of a cublasLtMatmulDesc_t the runner sets, with cuBLASLt's
// defaults (cublasLt.h).
struct MatmulDescOnCpu {
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  cudaDataType_t scale = CUDA_R_32F;
  int32_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
  int64_t bias_batch_stride = 0;
  int32_t bias_type = -1;  // -1: D's type
};

// A cublasLtMatrixLayout_t: column-major, strided batches.
struct LayoutOnCpu {
  cudaDataType type = CUDA_R_32F;
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0;
  int32_t batch = 1;
  int64_t batch_stride = 0;
};

// Held and not consulted: the one algorithm needs no workspace and sums
// each element in one sequence (no split-K) whatever the preference allows.
struct PreferenceOnCpu {
  uint64_t max_workspace = 0;
  uint32_t reduction_schemes = CUBLASLT_REDUCTION_SCHEME_MASK;
};

MatmulDescOnCpu& DescOf(cublasLtMatmulDesc_t desc) { return *reinterpret_cast<MatmulDescOnCpu*>(desc); }
LayoutOnCpu& LayoutOf(cublasLtMatrixLayout_t layout) { return *reinterpret_cast<LayoutOnCpu*>(layout); }

// Copies the attribute's value out of `buf`, which must be exactly its
// size (cuBLASLt's rule).
template <typename T>
cublasStatus_t Take(T& field, const void* buf, size_t size) {
  if (buf == nullptr || size != sizeof(T)) return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(&field, buf, sizeof(T));
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t LtCreate(cublasLtHandle_t* handle) {
  *handle = reinterpret_cast<cublasLtHandle_t>(new LtHandleOnCpu);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t LtDestroy(cublasLtHandle_t handle) {
  delete reinterpret_cast<LtHandleOnCpu*>(handle);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t MatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute, cudaDataType_t scale) {
  auto* made = new MatmulDescOnCpu;
  made->compute = compute;
  made->scale = scale;
  *desc = reinterpret_cast<cublasLtMatmulDesc_t>(made);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t MatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  delete &DescOf(desc);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t MatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute,
                                      const void* buf, size_t size) {
  MatmulDescOnCpu& d = DescOf(desc);
  switch (attribute) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
      return Take(d.transa, buf, size);
    case CUBLASLT_MATMUL_DESC_TRANSB:
      return Take(d.transb, buf, size);
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
      return Take(d.epilogue, buf, size);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
      return Take(d.bias, buf, size);
    case CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE:
      return Take(d.bias_batch_stride, buf, size);
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
      return Take(d.bias_type, buf, size);
    default:
      return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

cublasStatus_t MatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type, uint64_t rows, uint64_t cols,
                                  int64_t ld) {
  auto* made = new LayoutOnCpu;
  made->type = type;
  made->rows = rows;
  made->cols = cols;
  made->ld = ld;
  *layout = reinterpret_cast<cublasLtMatrixLayout_t>(made);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t MatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  delete &LayoutOf(layout);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t MatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attribute,
                                        const void* buf, size_t size) {
  LayoutOnCpu& l = LayoutOf(layout);
  switch (attribute) {
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT:
      return Take(l.batch, buf, size);
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET:
      return Take(l.batch_stride, buf, size);
    default:
      return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

cublasStatus_t PreferenceCreate(cublasLtMatmulPreference_t* preference) {
  *preference = reinterpret_cast<cublasLtMatmulPreference_t>(new PreferenceOnCpu);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t PreferenceDestroy(cublasLtMatmulPreference_t preference) {
  delete reinterpret_cast<PreferenceOnCpu*>(preference);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t PreferenceSetAttribute(cublasLtMatmulPreference_t preference,
                                      cublasLtMatmulPreferenceAttributes_t attribute, const void* buf, size_t size) {
  auto& p = *reinterpret_cast<PreferenceOnCpu*>(preference);
  switch (attribute) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
      return Take(p.max_workspace, buf, size);
    case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK:
      return Take(p.reduction_schemes, buf, size);
    default:
      return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

// The extents of D = op(A) op(B) when the operation and layouts are ones
// this table computes, else nullopt.
struct LtProblem {
  int m = 0, n = 0, k = 0, batch = 0;
};
std::optional<LtProblem> ProblemOf(const MatmulDescOnCpu& desc, const LayoutOnCpu& a, const LayoutOnCpu& b,
                                   const LayoutOnCpu& c, const LayoutOnCpu& d) {
  const bool compute_f32 = desc.compute == CUBLAS_COMPUTE_32F || desc.compute == CUBLAS_COMPUTE_32F_FAST_TF32 ||
                           desc.compute == CUBLAS_COMPUTE_32F_PEDANTIC;
  const bool f32_or_bf16 = (a.type == CUDA_R_32F || a.type == CUDA_R_16BF) && b.type == a.type;
  const bool epilogue = desc.epilogue == CUBLASLT_EPILOGUE_DEFAULT ||
                        (desc.epilogue == CUBLASLT_EPILOGUE_BIAS &&
                         (desc.bias_type == -1 || desc.bias_type == static_cast<int32_t>(CUDA_R_32F)));
  if (!compute_f32 || desc.scale != CUDA_R_32F || !f32_or_bf16 || d.type != CUDA_R_32F || c.type != CUDA_R_32F ||
      !epilogue) {
    return std::nullopt;
  }
  constexpr int32_t kNone = CUBLAS_OP_N, kTransposed = CUBLAS_OP_T;
  if ((desc.transa != kNone && desc.transa != kTransposed) || (desc.transb != kNone && desc.transb != kTransposed)) {
    return std::nullopt;
  }
  const uint64_t a_rows = desc.transa == kNone ? a.rows : a.cols;  // of op(A)
  const uint64_t a_cols = desc.transa == kNone ? a.cols : a.rows;
  const uint64_t b_rows = desc.transb == kNone ? b.rows : b.cols;
  const uint64_t b_cols = desc.transb == kNone ? b.cols : b.rows;
  if (a_rows != d.rows || b_cols != d.cols || a_cols != b_rows || c.rows != d.rows || c.cols != d.cols) {
    return std::nullopt;
  }
  if (a.batch != d.batch || b.batch != d.batch || c.batch != d.batch || d.batch < 1) return std::nullopt;
  constexpr uint64_t kIntMax = std::numeric_limits<int>::max();
  if (d.rows > kIntMax || d.cols > kIntMax || a_cols > kIntMax) return std::nullopt;
  return LtProblem{static_cast<int>(d.rows), static_cast<int>(d.cols), static_cast<int>(a_cols), d.batch};
}

// The one algorithm: a marker the matmul checks for.
constexpr uint64_t kAlgorithmOnCpu = 0x7a6d436c;

cublasStatus_t AlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
                                cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                cublasLtMatmulPreference_t, int requested, cublasLtMatmulHeuristicResult_t results[],
                                int* returned) {
  if (requested <= 0) return CUBLAS_STATUS_INVALID_VALUE;
  *returned = 0;
  if (!ProblemOf(DescOf(desc), LayoutOf(a), LayoutOf(b), LayoutOf(c), LayoutOf(d)).has_value()) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  if (DescOf(desc).epilogue == CUBLASLT_EPILOGUE_BIAS) {
    ++bias_epilogue_heuristics;
    if (bias_epilogue_answer.load() == cuda_on_cpu::BiasEpilogueAnswer::kNoAlgorithm) {
      return CUBLAS_STATUS_NOT_SUPPORTED;
    }
  }
  results[0] = cublasLtMatmulHeuristicResult_t{};
  results[0].algo.data[0] = kAlgorithmOnCpu;
  results[0].workspaceSize = 0;
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].wavesCount = 1.0f;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

// D = alpha op(A) op(B) + beta C, then the bias (of D's rows) added to each
// column, for each batch entry; C must be D where beta is not 0.
cublasStatus_t LtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t desc, const void* alpha, const void* a,
                        cublasLtMatrixLayout_t a_layout, const void* b, cublasLtMatrixLayout_t b_layout,
                        const void* beta, const void* c, cublasLtMatrixLayout_t c_layout, void* d,
                        cublasLtMatrixLayout_t d_layout, const cublasLtMatmulAlgo_t* algo, void*, size_t,
                        cudaStream_t) {
  const MatmulDescOnCpu& operation = DescOf(desc);
  const LayoutOnCpu &la = LayoutOf(a_layout), &lb = LayoutOf(b_layout), &lc = LayoutOf(c_layout),
                    &ld = LayoutOf(d_layout);
  const std::optional<LtProblem> problem = ProblemOf(operation, la, lb, lc, ld);
  if (!problem.has_value()) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (algo == nullptr || algo->data[0] != kAlgorithmOnCpu) return CUBLAS_STATUS_INVALID_VALUE;
  const float beta_value = *static_cast<const float*>(beta);
  if (beta_value != 0.0f && (c != d || lc.ld != ld.ld || lc.batch_stride != ld.batch_stride)) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  const bool with_bias = operation.epilogue == CUBLASLT_EPILOGUE_BIAS;
  if (with_bias && operation.bias == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  if (with_bias && bias_epilogue_answer.load() == cuda_on_cpu::BiasEpilogueAnswer::kNotSupportedAtLaunch) {
    ++bias_epilogues_declined;
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  auto* out = static_cast<float*>(d);
  const cublasStatus_t status =
      Gemm(static_cast<cublasOperation_t>(operation.transa), static_cast<cublasOperation_t>(operation.transb),
           problem->m, problem->n, problem->k, *static_cast<const float*>(alpha), a, la.type, static_cast<int>(la.ld),
           la.batch_stride, b, lb.type, static_cast<int>(lb.ld), lb.batch_stride, beta_value, out,
           static_cast<int>(ld.ld), ld.batch_stride, problem->batch);
  if (status != CUBLAS_STATUS_SUCCESS || !with_bias || tandem::cuda_on_cpu::KernelsSkipped()) return status;
  ++bias_epilogues;
  const auto* bias = static_cast<const float*>(operation.bias);
  for (int matrix = 0; matrix < problem->batch; ++matrix) {
    float* base = out + matrix * ld.batch_stride;
    const float* bias_base = bias + matrix * operation.bias_batch_stride;
    for (int j = 0; j < problem->n; ++j) {
      for (int i = 0; i < problem->m; ++i) base[i + int64_t{j} * ld.ld] += bias_base[i];
    }
  }
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

CublasLibrary::~CublasLibrary() = default;
CublasLtLibrary::~CublasLtLibrary() = default;

std::string CublasSoname() { return "cuBLAS on the CPU (cublas_library_on_cpu.cc)"; }
std::string CublasLtSoname() { return "cuBLASLt on the CPU (cublas_library_on_cpu.cc)"; }

absl::StatusOr<std::unique_ptr<CublasLibrary>> LoadCublas(const std::string&) {
  std::unique_ptr<CublasLibrary> table(new CublasLibrary());
  table->create = Create;
  table->destroy = Destroy;
  table->set_stream = SetStream;
  table->set_atomics_mode = SetAtomicsMode;
  table->set_math_mode = SetMathMode;
  table->set_workspace = SetWorkspace;
  table->sgemm_strided_batched = SgemmStridedBatched;
  table->gemm_strided_batched_ex = GemmStridedBatchedEx;
  table->status_string = StatusString;
  return table;
}

absl::StatusOr<std::unique_ptr<CublasLtLibrary>> LoadCublasLt(const std::string&) {
  std::unique_ptr<CublasLtLibrary> table(new CublasLtLibrary());
  table->create = LtCreate;
  table->destroy = LtDestroy;
  table->matmul_desc_create = MatmulDescCreate;
  table->matmul_desc_destroy = MatmulDescDestroy;
  table->matmul_desc_set_attribute = MatmulDescSetAttribute;
  table->matrix_layout_create = MatrixLayoutCreate;
  table->matrix_layout_destroy = MatrixLayoutDestroy;
  table->matrix_layout_set_attribute = MatrixLayoutSetAttribute;
  table->preference_create = PreferenceCreate;
  table->preference_destroy = PreferenceDestroy;
  table->preference_set_attribute = PreferenceSetAttribute;
  table->algo_get_heuristic = AlgoGetHeuristic;
  table->matmul = LtMatmul;
  table->status_string = StatusString;
  return table;
}

}  // namespace tandem::cuda

namespace tandem::cuda_on_cpu {

GemmCalls GemmCallsSoFar() {
  return GemmCalls{.f32_operands = cuda::f32_gemms.load(),
                   .bf16_operands = cuda::bf16_gemms.load(),
                   .bias_epilogues = cuda::bias_epilogues.load(),
                   .bias_epilogue_heuristics = cuda::bias_epilogue_heuristics.load(),
                   .bias_epilogues_declined_at_launch = cuda::bias_epilogues_declined.load()};
}

void SetBiasEpilogueAnswer(BiasEpilogueAnswer answer) { cuda::bias_epilogue_answer.store(answer); }

}  // namespace tandem::cuda_on_cpu
