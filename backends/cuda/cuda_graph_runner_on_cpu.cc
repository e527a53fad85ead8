// The CUDA backend's graph runner (cuda_graph_runner.cu and its launches,
// cuda_node_launches.cu and cuda_matmul_epilogue.cu), compiled by the host
// compiler on CUDA's execution model (cuda_on_cpu.h), its runtime on host
// memory (cuda_runtime_on_cpu.cc) and its cuBLAS and cuBLASLt tables on the
// CPU (cublas_library_on_cpu.cc): the whole graph walk the GPU runs, tested
// on machines without one.
#include "backends/cuda/cuda_graph_runner.cu"
#include "backends/cuda/cuda_node_launches.cu"
#include "backends/cuda/cuda_matmul_epilogue.cu"
