// cuBLAS, loaded when a CUDA device opens rather than linked: a linked
// libcublas brings libcublasLt into every Tandem process, the CPU-only
// controller and actors included, and libcublasLt's static data alone
// dirties 84 MiB of private memory in each (measured on the README's main
// job: 5 processes, 420 MiB of its 0.62 GB). Only a CudaGraphRunner loads
// it, through a CublasLibrary it owns.
//
// cuBLASLt likewise, for the GEMMs that add a bias as they store their
// result (CUBLASLT_EPILOGUE_BIAS): a CublasLtLibrary, loaded by the runner
// at its first such GEMM. libcublas depends on libcublasLt, so once cuBLAS
// is loaded this maps nothing new; it only resolves the functions.
//
// Internal to backends/cuda/: it includes cuBLAS's header for the functions'
// types. Not synchronized; the loaded functions are cuBLAS's own, with its
// thread rules.
#ifndef TANDEM_BACKENDS_CUDA_CUBLAS_LIBRARY_H_
#define TANDEM_BACKENDS_CUDA_CUBLAS_LIBRARY_H_

#include <cublasLt.h>
#include <cublas_v2.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace tandem::cuda {

// The cuBLAS functions Tandem calls, resolved from the loaded library.
struct CublasLibrary {
  ~CublasLibrary();
  CublasLibrary(const CublasLibrary&) = delete;
  CublasLibrary& operator=(const CublasLibrary&) = delete;

  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  decltype(&cublasSetAtomicsMode) set_atomics_mode = nullptr;
  decltype(&cublasSetMathMode) set_math_mode = nullptr;
  decltype(&cublasSetWorkspace_v2) set_workspace = nullptr;
  decltype(&cublasSgemmStridedBatched) sgemm_strided_batched = nullptr;
  // (C++ overloads it with an inline shim: the exported one, spelled out.)
  cublasStatus_t (*gemm_strided_batched_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                            const void*, const void*, cudaDataType, int, long long int, const void*,
                                            cudaDataType, int, long long int, const void*, void*, cudaDataType, int,
                                            long long int, int, cublasComputeType_t, cublasGemmAlgo_t) = nullptr;
  decltype(&cublasGetStatusString) status_string = nullptr;

 private:
  friend absl::StatusOr<std::unique_ptr<CublasLibrary>> LoadCublas(const std::string& library);
  CublasLibrary() = default;
  // dlopen's; dlclose'd by the destructor (none in the build on the CPU,
  // cublas_library_on_cpu.cc, which computes the GEMMs itself).
  [[maybe_unused]] void* handle_ = nullptr;
};

// The cuBLASLt functions Tandem calls (a GEMM with an epilogue), resolved
// from the loaded library.
struct CublasLtLibrary {
  ~CublasLtLibrary();
  CublasLtLibrary(const CublasLtLibrary&) = delete;
  CublasLtLibrary& operator=(const CublasLtLibrary&) = delete;

  decltype(&cublasLtCreate) create = nullptr;
  decltype(&cublasLtDestroy) destroy = nullptr;
  decltype(&cublasLtMatmulDescCreate) matmul_desc_create = nullptr;
  decltype(&cublasLtMatmulDescDestroy) matmul_desc_destroy = nullptr;
  decltype(&cublasLtMatmulDescSetAttribute) matmul_desc_set_attribute = nullptr;
  decltype(&cublasLtMatrixLayoutCreate) matrix_layout_create = nullptr;
  decltype(&cublasLtMatrixLayoutDestroy) matrix_layout_destroy = nullptr;
  decltype(&cublasLtMatrixLayoutSetAttribute) matrix_layout_set_attribute = nullptr;
  decltype(&cublasLtMatmulPreferenceCreate) preference_create = nullptr;
  decltype(&cublasLtMatmulPreferenceDestroy) preference_destroy = nullptr;
  decltype(&cublasLtMatmulPreferenceSetAttribute) preference_set_attribute = nullptr;
  decltype(&cublasLtMatmulAlgoGetHeuristic) algo_get_heuristic = nullptr;
  decltype(&cublasLtMatmul) matmul = nullptr;
  decltype(&cublasLtGetStatusString) status_string = nullptr;

 private:
  friend absl::StatusOr<std::unique_ptr<CublasLtLibrary>> LoadCublasLt(const std::string& library);
  CublasLtLibrary() = default;
  // As CublasLibrary's.
  [[maybe_unused]] void* handle_ = nullptr;
};

// The soname this build's cuBLAS has (libcublas.so.<CUDA major>), and its
// cuBLASLt's (libcublasLt.so.<CUDA major>).
std::string CublasSoname();
std::string CublasLtSoname();

// dlopens `library` (a soname, searched as the dynamic linker searches, or
// a path) and resolves every function above. FailedPrecondition naming the
// library and the missing symbol, with dlerror's text.
absl::StatusOr<std::unique_ptr<CublasLibrary>> LoadCublas(const std::string& library = CublasSoname());
absl::StatusOr<std::unique_ptr<CublasLtLibrary>> LoadCublasLt(const std::string& library = CublasLtSoname());

}  // namespace tandem::cuda

#endif  // TANDEM_BACKENDS_CUDA_CUBLAS_LIBRARY_H_
