// The CUDA backend's kernels (kernels/*.cu), compiled by the host compiler
// on CUDA's execution model (cuda_on_cpu.h): the same sources nvcc builds
// for the GPU, run on host threads by the `cuda-on-cpu` tests. One
// translation unit: the files' internal helpers (kernels/common.cuh) once.
#include "backends/cuda/kernels/attention.cu"
#include "backends/cuda/kernels/attention_lanes.cu"
#include "backends/cuda/kernels/attention_mma.cu"
#include "backends/cuda/kernels/attention_rows.cu"
#include "backends/cuda/kernels/attention_tiles.cu"
#include "backends/cuda/kernels/elementwise.cu"
#include "backends/cuda/kernels/lookups.cu"
#include "backends/cuda/kernels/reductions.cu"
#include "backends/cuda/kernels/rotary.cu"
