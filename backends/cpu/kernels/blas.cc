#include "backends/cpu/kernels/blas.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>

namespace tandem::cpu::internal {
namespace {

// OpenBLAS's soname (Debian's libopenblas0 provides it, whichever of its
// threading variants is installed).
constexpr char kLibrary[] = "libopenblas.so.0";
constexpr char kCoreTypeVariable[] = "OPENBLAS_CORETYPE";

[[noreturn]] void CannotLoad(const char* what) {
  std::fprintf(stderr, "tandem: cannot load OpenBLAS (%s): %s; install Debian's libopenblas0 (tools/setup.sh)\n",
               kLibrary, what);
  std::abort();
}

template <typename T>
T Symbol(void* library, const char* name) {
  void* symbol = dlsym(library, name);
  if (symbol == nullptr) CannotLoad(name);
  return reinterpret_cast<T>(symbol);
}

Blas Load() {
  Blas blas;
  // Already in the process (another library linked it): its kernels are
  // chosen; the variable makes Tandem's other processes choose the same.
  void* library = dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (library != nullptr) {
    blas.chosen_by = "an OpenBLAS loaded before Tandem";
  } else if (std::getenv(kCoreTypeVariable) != nullptr) {
    blas.chosen_by = kCoreTypeVariable;
  } else {
    const std::string core = CoreTypeFor(ThisCpu());
    if (!core.empty()) setenv(kCoreTypeVariable, core.c_str(), /*overwrite=*/0);
    blas.chosen_by = core.empty() ? "OpenBLAS's own detection" : "the CPU's features";
  }
  if (library == nullptr) library = dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) CannotLoad(dlerror());
  blas.sgemm = Symbol<decltype(&cblas_sgemm)>(library, "cblas_sgemm");
  blas.set_num_threads = Symbol<void (*)(int)>(library, "openblas_set_num_threads");
  blas.core = Symbol<char* (*)()>(library, "openblas_get_corename")();
  blas.config = Symbol<char* (*)()>(library, "openblas_get_config")();
  // Every process Tandem starts chooses what this one runs.
  setenv(kCoreTypeVariable, blas.core.c_str(), /*overwrite=*/1);
  return blas;
}

}  // namespace

CpuFeatures ThisCpu() {
  CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  f.avx = __builtin_cpu_supports("avx");
  f.avx2 = __builtin_cpu_supports("avx2");
  f.fma = __builtin_cpu_supports("fma");
  f.avx512f = __builtin_cpu_supports("avx512f");
  f.avx512cd = __builtin_cpu_supports("avx512cd");
  f.avx512bw = __builtin_cpu_supports("avx512bw");
  f.avx512dq = __builtin_cpu_supports("avx512dq");
  f.avx512vl = __builtin_cpu_supports("avx512vl");
#endif
  return f;
}

std::string CoreTypeFor(const CpuFeatures& f) {
  if (f.avx512f && f.avx512cd && f.avx512bw && f.avx512dq && f.avx512vl) return "SkylakeX";
  if (f.avx2 && f.fma) return "Haswell";
  if (f.avx) return "Sandybridge";
  return "";
}

const Blas& GetBlas() {
  static const Blas* const blas = new Blas(Load());
  return *blas;
}

}  // namespace tandem::cpu::internal
