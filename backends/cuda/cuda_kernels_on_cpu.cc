// The CUDA backend's kernels (cuda_kernels.cu), compiled by the host
// compiler on CUDA's execution model (cuda_on_cpu.h): the same source
// nvcc builds for the GPU, run on host threads by the `cuda-on-cpu` tests.
#include "backends/cuda/cuda_kernels.cu"
