// Loop unrolling in the kernel files (kernels/*.cu, *.cuh).
#ifndef TANDEM_BACKENDS_CUDA_KERNELS_UNROLL_CUH_
#define TANDEM_BACKENDS_CUDA_KERNELS_UNROLL_CUH_

// Unrolls the loop that follows under nvcc (constant trip counts: arrays it
// indexes stay in registers), or by n iterations at a time (a long loop
// that indexes no array by its counter: the body's code stays small enough
// for the instruction cache); nothing in the CPU build.
#ifdef __CUDACC__
#define TANDEM_UNROLL _Pragma("unroll")
#define TANDEM_UNROLL_BY(n) _Pragma(TANDEM_UNROLL_TEXT(unroll n))
#define TANDEM_UNROLL_TEXT(x) #x
#else
#define TANDEM_UNROLL
#define TANDEM_UNROLL_BY(n)
#endif

#endif  // TANDEM_BACKENDS_CUDA_KERNELS_UNROLL_CUH_
