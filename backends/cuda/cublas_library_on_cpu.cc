// The cuBLAS function table (cublas_library.h) for the CUDA backend built
// on CUDA's execution model (cuda_on_cpu.h): the GEMMs Tandem calls,
// computed on the host in cuBLAS's column-major convention, so the graph
// runner's own calls (operand order, leading dimensions, strides, bf16
// operands) are what is tested. Each output element is one f32 sum over k
// in increasing order; a GPU's cuBLAS sums in its own order, so the two
// agree within rounding, as the runner's contract says. Handles, streams,
// modes and workspaces are accepted and ignored.
#include <cuda_bf16.h>

#include <atomic>
#include <cstdint>
#include <cstring>

#include "backends/cuda/cublas_library.h"
#include "backends/cuda/cuda_on_cpu.h"

namespace tandem::cuda {
namespace {

struct HandleOnCpu {};

std::atomic<int64_t> f32_gemms{0}, bf16_gemms{0};

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

}  // namespace

CublasLibrary::~CublasLibrary() = default;

std::string CublasSoname() { return "cuBLAS on the CPU (cublas_library_on_cpu.cc)"; }

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

}  // namespace tandem::cuda

namespace tandem::cuda_on_cpu {

GemmCalls GemmCallsSoFar() {
  return GemmCalls{.f32_operands = cuda::f32_gemms.load(), .bf16_operands = cuda::bf16_gemms.load()};
}

}  // namespace tandem::cuda_on_cpu
