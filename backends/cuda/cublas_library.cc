#include "backends/cuda/cublas_library.h"

#include <dlfcn.h>

#include <type_traits>

#include "absl/strings/str_cat.h"

#ifndef TANDEM_CUBLAS_SONAME
#error "TANDEM_CUBLAS_SONAME must name the toolkit's cuBLAS (backends/cuda/CMakeLists.txt)"
#endif

namespace tandem::cuda {

CublasLibrary::~CublasLibrary() {
  if (handle_ != nullptr) dlclose(handle_);
}

std::string CublasSoname() { return TANDEM_CUBLAS_SONAME; }

absl::StatusOr<std::unique_ptr<CublasLibrary>> LoadCublas(const std::string& library) {
  std::unique_ptr<CublasLibrary> loaded(new CublasLibrary());
  loaded->handle_ = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (loaded->handle_ == nullptr) {
    const char* why = dlerror();
    return absl::FailedPreconditionError(
        absl::StrCat("cannot load cuBLAS (", library, "): ", why != nullptr ? why : "unknown reason"));
  }
  absl::Status missing;
  const auto resolve = [&](auto& function, const char* name) {
    if (!missing.ok()) return;
    dlerror();
    void* symbol = dlsym(loaded->handle_, name);
    if (symbol == nullptr) {
      const char* why = dlerror();
      missing = absl::FailedPreconditionError(absl::StrCat("cuBLAS (", library, ") has no ", name, ": ",
                                                           why != nullptr ? why : "null symbol"));
      return;
    }
    function = reinterpret_cast<std::remove_reference_t<decltype(function)>>(symbol);
  };
  resolve(loaded->create, "cublasCreate_v2");
  resolve(loaded->destroy, "cublasDestroy_v2");
  resolve(loaded->set_stream, "cublasSetStream_v2");
  resolve(loaded->set_atomics_mode, "cublasSetAtomicsMode");
  resolve(loaded->set_math_mode, "cublasSetMathMode");
  resolve(loaded->set_workspace, "cublasSetWorkspace_v2");
  resolve(loaded->sgemm_strided_batched, "cublasSgemmStridedBatched");
  resolve(loaded->gemm_strided_batched_ex, "cublasGemmStridedBatchedEx");
  resolve(loaded->status_string, "cublasGetStatusString");
  if (!missing.ok()) return missing;
  return loaded;
}

}  // namespace tandem::cuda
