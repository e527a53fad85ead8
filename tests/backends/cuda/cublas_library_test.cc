// cuBLAS is loaded, not linked: every function the CUDA device calls
// resolves from the toolkit's library (no GPU needed to load it), a library
// that is not there is a clear error, and a Tandem process that opens no
// CUDA device never maps cuBLAS at all.
#include "backends/cuda/cublas_library.h"

#include <cstdint>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::cuda {
namespace {

using ::testing::HasSubstr;

bool Mapped(const std::string& library) {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    if (line.find(library) != std::string::npos) return true;
  }
  return false;
}

TEST(CublasLibrary, NotMappedUntilLoadedThenEveryFunctionResolves) {
  // This test binary links the CUDA backend, as every Tandem process does.
  EXPECT_FALSE(Mapped("libcublasLt")) << "cuBLAS is mapped before any CUDA device opened";
  absl::StatusOr<std::unique_ptr<CublasLibrary>> library = LoadCublas();
  ASSERT_TRUE(library.ok()) << library.status();
  const CublasLibrary& blas = **library;
  for (const void* function :
       {reinterpret_cast<const void*>(blas.create), reinterpret_cast<const void*>(blas.destroy),
        reinterpret_cast<const void*>(blas.set_stream), reinterpret_cast<const void*>(blas.set_atomics_mode),
        reinterpret_cast<const void*>(blas.set_math_mode), reinterpret_cast<const void*>(blas.set_workspace),
        reinterpret_cast<const void*>(blas.sgemm_strided_batched),
        reinterpret_cast<const void*>(blas.gemm_strided_batched_ex),
        reinterpret_cast<const void*>(blas.status_string)}) {
    EXPECT_NE(function, nullptr);
  }
  EXPECT_TRUE(Mapped("libcublas"));
  // A pure function of cuBLAS's, callable without a GPU: proof the calls
  // reach the library.
  const std::string text = blas.status_string(CUBLAS_STATUS_NOT_INITIALIZED);
  EXPECT_FALSE(text.empty());
  EXPECT_NE(text, blas.status_string(CUBLAS_STATUS_SUCCESS));
}

TEST(CublasLtLibrary, EveryFunctionResolvesFromTheToolkitsCublasLt) {
  absl::StatusOr<std::unique_ptr<CublasLtLibrary>> library = LoadCublasLt();
  ASSERT_TRUE(library.ok()) << library.status();
  EXPECT_THAT(CublasLtSoname(), HasSubstr("libcublasLt.so."));
  const CublasLtLibrary& lt = **library;
  for (const void* function :
       {reinterpret_cast<const void*>(lt.create), reinterpret_cast<const void*>(lt.destroy),
        reinterpret_cast<const void*>(lt.matmul_desc_create), reinterpret_cast<const void*>(lt.matmul_desc_destroy),
        reinterpret_cast<const void*>(lt.matmul_desc_set_attribute),
        reinterpret_cast<const void*>(lt.matrix_layout_create), reinterpret_cast<const void*>(lt.matrix_layout_destroy),
        reinterpret_cast<const void*>(lt.matrix_layout_set_attribute),
        reinterpret_cast<const void*>(lt.preference_create), reinterpret_cast<const void*>(lt.preference_destroy),
        reinterpret_cast<const void*>(lt.preference_set_attribute),
        reinterpret_cast<const void*>(lt.algo_get_heuristic), reinterpret_cast<const void*>(lt.matmul),
        reinterpret_cast<const void*>(lt.status_string)}) {
    EXPECT_NE(function, nullptr);
  }
  EXPECT_TRUE(Mapped("libcublasLt"));
  // Host-only calls of cuBLASLt's, no GPU needed: its status text, and a
  // layout descriptor made, given a batch count and destroyed.
  EXPECT_NE(std::string(lt.status_string(CUBLAS_STATUS_NOT_SUPPORTED)), lt.status_string(CUBLAS_STATUS_SUCCESS));
  cublasLtMatrixLayout_t layout = nullptr;
  ASSERT_EQ(lt.matrix_layout_create(&layout, CUDA_R_32F, 4, 3, 4), CUBLAS_STATUS_SUCCESS);
  const int32_t batch = 2;
  EXPECT_EQ(lt.matrix_layout_set_attribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof(batch)),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(lt.matrix_layout_destroy(layout), CUBLAS_STATUS_SUCCESS);
}

TEST(CublasLibrary, AMissingLibraryIsAClearError) {
  absl::StatusOr<std::unique_ptr<CublasLibrary>> library = LoadCublas("libcublas.so.0-not-here");
  EXPECT_EQ(library.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(library.status().message(), HasSubstr("cannot load cuBLAS (libcublas.so.0-not-here)"));
  absl::StatusOr<std::unique_ptr<CublasLtLibrary>> lt = LoadCublasLt("libcublasLt.so.0-not-here");
  EXPECT_EQ(lt.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(lt.status().message(), HasSubstr("cannot load cuBLASLt (libcublasLt.so.0-not-here)"));
}

}  // namespace
}  // namespace tandem::cuda
