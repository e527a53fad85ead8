// The BLAS under the matmul kernel: OpenBLAS, loaded at first use with the
// core type (the kernels it runs) chosen by the CPU's features.
//
// Why: Debian's OpenBLAS (DYNAMIC_ARCH) chooses its kernels by the CPU's
// model number, and a CPU whose model it does not know (common in cloud
// VMs that report "Intel Xeon Processor") gets its oldest x86-64 kernels,
// Prescott's SSE3, at about half the machine's speed. So Tandem decides:
// before OpenBLAS loads, OPENBLAS_CORETYPE is set from CPUID's feature bits
// (CoreTypeFor), unless the user set it. The variable stays set, so every
// process Tandem starts on the host (actors, the reference) chooses the
// same kernels: their bits agree. An OpenBLAS some other library loaded
// before Tandem keeps its kernels, and the variable is set to them for the
// same reason.
//
// Thread-safe; the loading happens once per process.
#ifndef TANDEM_BACKENDS_CPU_KERNELS_BLAS_H_
#define TANDEM_BACKENDS_CPU_KERNELS_BLAS_H_

#include <string>

#include <cblas.h>

namespace tandem::cpu::internal {

// The features OpenBLAS's kernels need, as CPUID reports them (and the OS
// enables: the AVX state saved on a context switch).
struct CpuFeatures {
  bool avx = false;
  bool avx2 = false;
  bool fma = false;
  bool avx512f = false, avx512cd = false, avx512bw = false, avx512dq = false, avx512vl = false;
};
CpuFeatures ThisCpu();

// The OpenBLAS core type for `features`: "SkylakeX" with AVX-512 (F, CD,
// BW, DQ and VL), "Haswell" with AVX2 and FMA, "Sandybridge" with AVX;
// empty without AVX (OpenBLAS's own detection then).
std::string CoreTypeFor(const CpuFeatures& features);

struct Blas {
  decltype(&cblas_sgemm) sgemm = nullptr;
  void (*set_num_threads)(int) = nullptr;
  // The core type whose kernels run ("SkylakeX"), as OpenBLAS names it.
  std::string core;
  // What chose it: "the CPU's features", "OPENBLAS_CORETYPE" (the user's),
  // or "an OpenBLAS loaded before Tandem".
  std::string chosen_by;
  // OpenBLAS's build description ("OpenBLAS 0.3.21 DYNAMIC_ARCH ...").
  std::string config;
};

// OpenBLAS, loaded (the first call) with the core type chosen as above.
// Aborts with a message naming the library when it cannot be loaded: it is
// a dependency of the package, like any linked library.
const Blas& GetBlas();

}  // namespace tandem::cpu::internal

#endif  // TANDEM_BACKENDS_CPU_KERNELS_BLAS_H_
