// cuBLAS is loaded, not linked: every function the CUDA device calls
// resolves from the toolkit's library (no GPU needed to load it), a library
// that is not there is a clear error, and a Tandem process that opens no
// CUDA device never maps cuBLAS at all.
#include "backends/cuda/cublas_library.h"

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

TEST(CublasLibrary, AMissingLibraryIsAClearError) {
  absl::StatusOr<std::unique_ptr<CublasLibrary>> library = LoadCublas("libcublas.so.0-not-here");
  EXPECT_EQ(library.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(library.status().message(), HasSubstr("cannot load cuBLAS (libcublas.so.0-not-here)"));
}

}  // namespace
}  // namespace tandem::cuda
