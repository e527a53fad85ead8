#include "backends/cuda/cublas_library.h"

#include <dlfcn.h>

#include "absl/strings/str_cat.h"

#if !defined(TANDEM_CUBLAS_SONAME) || !defined(TANDEM_CUBLASLT_SONAME)
#error \
    "TANDEM_CUBLAS_SONAME and TANDEM_CUBLASLT_SONAME must name the toolkit's libraries (backends/cuda/CMakeLists.txt)"
#endif

namespace tandem::cuda {
namespace {

// A library opened with dlopen, whose functions are resolved one by one;
// the first failure is kept (FailedPrecondition naming `what`, the library
// and the symbol) and the later resolutions are skipped.
class Resolver {
 public:
  Resolver(const char* what, const std::string& library) : what_(what), library_(library) {
    handle_ = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle_ == nullptr) {
      const char* why = dlerror();
      status_ = absl::FailedPreconditionError(
          absl::StrCat("cannot load ", what, " (", library, "): ", why != nullptr ? why : "unknown reason"));
    }
  }

  template <typename Function>
  void Resolve(Function& function, const char* name) {
    if (!status_.ok()) return;
    dlerror();
    void* symbol = dlsym(handle_, name);
    if (symbol == nullptr) {
      const char* why = dlerror();
      status_ = absl::FailedPreconditionError(
          absl::StrCat(what_, " (", library_, ") has no ", name, ": ", why != nullptr ? why : "null symbol"));
      return;
    }
    function = reinterpret_cast<Function>(symbol);
  }

  // The handle, for the table to dlclose (null when dlopen failed).
  void* handle() const { return handle_; }
  const absl::Status& status() const { return status_; }

 private:
  const char* what_;
  const std::string& library_;
  void* handle_ = nullptr;
  absl::Status status_;
};

}  // namespace

CublasLibrary::~CublasLibrary() {
  if (handle_ != nullptr) dlclose(handle_);
}

CublasLtLibrary::~CublasLtLibrary() {
  if (handle_ != nullptr) dlclose(handle_);
}

std::string CublasSoname() { return TANDEM_CUBLAS_SONAME; }
std::string CublasLtSoname() { return TANDEM_CUBLASLT_SONAME; }

absl::StatusOr<std::unique_ptr<CublasLibrary>> LoadCublas(const std::string& library) {
  std::unique_ptr<CublasLibrary> loaded(new CublasLibrary());
  Resolver resolver("cuBLAS", library);
  loaded->handle_ = resolver.handle();
  resolver.Resolve(loaded->create, "cublasCreate_v2");
  resolver.Resolve(loaded->destroy, "cublasDestroy_v2");
  resolver.Resolve(loaded->set_stream, "cublasSetStream_v2");
  resolver.Resolve(loaded->set_atomics_mode, "cublasSetAtomicsMode");
  resolver.Resolve(loaded->set_math_mode, "cublasSetMathMode");
  resolver.Resolve(loaded->set_workspace, "cublasSetWorkspace_v2");
  resolver.Resolve(loaded->sgemm_strided_batched, "cublasSgemmStridedBatched");
  resolver.Resolve(loaded->gemm_strided_batched_ex, "cublasGemmStridedBatchedEx");
  resolver.Resolve(loaded->status_string, "cublasGetStatusString");
  if (!resolver.status().ok()) return resolver.status();
  return loaded;
}

absl::StatusOr<std::unique_ptr<CublasLtLibrary>> LoadCublasLt(const std::string& library) {
  std::unique_ptr<CublasLtLibrary> loaded(new CublasLtLibrary());
  Resolver resolver("cuBLASLt", library);
  loaded->handle_ = resolver.handle();
  resolver.Resolve(loaded->create, "cublasLtCreate");
  resolver.Resolve(loaded->destroy, "cublasLtDestroy");
  resolver.Resolve(loaded->matmul_desc_create, "cublasLtMatmulDescCreate");
  resolver.Resolve(loaded->matmul_desc_destroy, "cublasLtMatmulDescDestroy");
  resolver.Resolve(loaded->matmul_desc_set_attribute, "cublasLtMatmulDescSetAttribute");
  resolver.Resolve(loaded->matrix_layout_create, "cublasLtMatrixLayoutCreate");
  resolver.Resolve(loaded->matrix_layout_destroy, "cublasLtMatrixLayoutDestroy");
  resolver.Resolve(loaded->matrix_layout_set_attribute, "cublasLtMatrixLayoutSetAttribute");
  resolver.Resolve(loaded->preference_create, "cublasLtMatmulPreferenceCreate");
  resolver.Resolve(loaded->preference_destroy, "cublasLtMatmulPreferenceDestroy");
  resolver.Resolve(loaded->preference_set_attribute, "cublasLtMatmulPreferenceSetAttribute");
  resolver.Resolve(loaded->algo_get_heuristic, "cublasLtMatmulAlgoGetHeuristic");
  resolver.Resolve(loaded->matmul, "cublasLtMatmul");
  resolver.Resolve(loaded->status_string, "cublasLtGetStatusString");
  if (!resolver.status().ok()) return resolver.status();
  return loaded;
}

}  // namespace tandem::cuda
