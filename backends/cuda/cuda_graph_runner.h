// CudaGraphRunner: runs an IR graph (one stage function) on a CUDA device,
// with a device kernel for every op of the closed set (ir/op.h) and cuBLAS
// for matmul. Fused: runs of elementwise nodes (one kernel each), and a
// matmul whose only reader is a bias add (a linear layer) with that add, as
// one cuBLASLt GEMM whose epilogue adds the bias (CUBLASLT_EPILOGUE_BIAS).
//
// Device-resident: the runner owns a CudaDeviceMemory (one stream, a
// stream-ordered pool) and Run takes and returns tensors in it. Each value
// the graph computes gets its own private allocation, freed in stream order
// after its last use (the executor's rule); nothing waits for the device
// unless a range check (embedding ids, labels) has to be read back. The
// device memory is also what the actor's data plane copies through
// (CUDA IPC), on the same stream, so transfers and kernels are ordered
// without the host waiting. RunFromHost uploads, runs, downloads and waits:
// for callers outside an executor (tests, benchmarks).
//
// Numerics: deterministic (the same inputs give the same bits every run, in
// every process): no atomics in any reduction, every sum in an order fixed
// by the shape (cuda_kernels.cuh), cuBLAS with atomics disallowed and a
// fixed workspace, and cuBLASLt's bias epilogue with no split-K reduction
// (CUBLASLT_REDUCTION_SCHEME_NONE), that workspace, and one algorithm per
// shape, chosen by its heuristic at the shape's first call and kept. A
// shape cuBLASLt declines runs as a matmul and an add instead, decided once.
// The results match the CPU reference kernels
// (backends/cpu/kernels.h) within 1e-4 relative, not bitwise (different
// exp/tanh/log, sum and matmul orders).
// Precision: kF32 keeps every GEMM in f32; kTf32 lets cuBLAS use TF32
// tensor cores for f32 GEMMs (10-bit mantissa products, f32 accumulation);
// kBf16 rounds the operands of matmuls, and of attention's two products
// (q, k, v and dy, at the head widths the tensor cores take), to bf16 and
// accumulates in f32. Everything else is f32 in all three. A model traced
// in bf16 (bf16 tensors) computes by the reference's rule, each op in f32
// on its operands widened and its result rounded once: its matmuls give
// cuBLAS the bf16 operands as they are, and every other kernel loads and
// stores bf16 itself (no widened copy of an operand is made); except
// attention at the tensor cores' widths, which also rounds its weights (P,
// and dS in the gradient) to bf16 as the operands of its second products,
// as FlashAttention-2 does: within bf16's rounding of the reference.
//
// Profiling: with set_node_times, every Run brackets each node's work with
// CUDA events and adds each node's GPU time to the vector, then waits for
// the device (so profiling runs are slower, but their per-node times are
// the GPU's). A fused run of elementwise nodes is one launch: its time is
// its last member's (the others' 0); a matmul with its bias add's epilogue
// is the matmul's (the add's 0).
//
// Ownership and threading: one runner per actor (per device); owns its
// memory, cuBLAS handle and workspace; not thread-safe (its memory is).
#ifndef TANDEM_BACKENDS_CUDA_CUDA_GRAPH_RUNNER_H_
#define TANDEM_BACKENDS_CUDA_CUDA_GRAPH_RUNNER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "backends/cuda/cuda_device_memory.h"
#include "backends/device.h"
#include "backends/device_memory.h"
#include "ir/elementwise_runs.h"
#include "ir/graph.h"

namespace tandem::cuda {

enum class Precision : uint8_t { kF32, kTf32, kBf16 };

struct RunnerOptions {
  int device = 0;
  Precision precision = Precision::kF32;
  // How long a host wait for the device (range checks, RunFromHost's copies)
  // may take.
  absl::Duration wait_timeout = absl::Minutes(1);
  // Runs of elementwise nodes (a GELU, a residual add, an optimizer's
  // update) in one kernel each, their intermediate values never stored
  // (ir/elementwise_runs.h), the same bits either way; and a matmul with the
  // bias add that alone reads it as one cuBLASLt GEMM with the bias epilogue
  // (the matmul's value never stored), whose bits on a GPU may differ from
  // cublasSgemm's and the add kernel's (cuBLASLt's kernel may sum in
  // another order; on the CPU build they are the same). Off: a kernel per
  // node and cuBLAS for every matmul, for comparison.
  bool fuse_elementwise = true;
};

using DeviceTensorMap = std::map<std::string, backends::DeviceTensor>;

// Precision kBf16's copies of matmul operands (each f32 operand is rounded
// to bf16 once for as long as its storage lives, then reused).
struct Bf16Copies {
  int64_t made = 0;        // copies made so far
  int64_t held_bytes = 0;  // of the copies held (a gone tensor's until the next bf16 matmul)
};

// A graph compiled by CudaGraphRunner::Compile, for that runner only: its
// plan (ir::GraphPlan: when each value is released), each node's type check,
// whether it computes on bf16 through the f32 kernels, and the index maps
// and reduction plans its kernels take, all worked out once from the graph's
// static shapes. Holds its own copy of the graph.
class CudaExecutable {
 public:
  ~CudaExecutable();
  CudaExecutable(const CudaExecutable&) = delete;
  CudaExecutable& operator=(const CudaExecutable&) = delete;

  // The runs of elementwise nodes each Run launches as one kernel
  // (RunnerOptions::fuse_elementwise).
  const ir::ElementwiseRuns& fused_runs() const;
  // The (matmul, bias add) pairs each Run computes as one GEMM with the bias
  // epilogue where cuBLASLt takes the shape (RunnerOptions::fuse_elementwise),
  // in program order.
  std::vector<std::pair<ir::ValueId, ir::ValueId>> bias_epilogues() const;

 private:
  friend class CudaGraphRunner;
  struct Compiled;
  explicit CudaExecutable(std::unique_ptr<Compiled> compiled);
  std::unique_ptr<Compiled> compiled_;
};

class CudaGraphRunner {
 public:
  // FailedPrecondition (CheckDevice's message) without that device.
  static absl::StatusOr<std::unique_ptr<CudaGraphRunner>> Create(const RunnerOptions& options);
  ~CudaGraphRunner();
  CudaGraphRunner(const CudaGraphRunner&) = delete;
  CudaGraphRunner& operator=(const CudaGraphRunner&) = delete;

  // The memory every tensor of Run lives in.
  CudaDeviceMemory& memory() const;

  // `graph` compiled for this runner; Internal naming the value for a node
  // whose operands do not fit its op (a graph the verifier rejects).
  absl::StatusOr<std::unique_ptr<CudaExecutable>> Compile(const ir::Graph& graph);

  // The executable's outputs by name, for `inputs` by input name (as
  // cpu::RunGraph), all tensors of memory() (an undefined input is a missing
  // value, as on the CPU). The same errors as cpu::RunGraph for missing or
  // mistyped inputs and data-dependent failures (an embedding id out of range
  // is detected on the device and reported with its position); InvalidArgument
  // for an input of other memory; Internal for CUDA errors, naming the op and
  // the call. A kernel that faults during execution surfaces at the next wait
  // for the device (a download, a range check, the next RunFromHost).
  absl::StatusOr<DeviceTensorMap> Run(const CudaExecutable& executable, const DeviceTensorMap& inputs);
  // Compile and Run once.
  absl::StatusOr<DeviceTensorMap> Run(const ir::Graph& graph, const DeviceTensorMap& inputs);

  // While on (off by default), Run does not wait to read back its range
  // checks: each answer is copied asynchronously into pinned staging, and
  // Settle reads them all at once (an executor's step end). A Run on bad
  // ids then returns undefined values instead of its error, which Settle
  // reports.
  void set_defer_range_checks(bool on);
  // With deferred range checks: waits for the device once and
  // returns the earliest failed range check of the Runs since the last
  // Settle (its run, 0 for the first, and cpu::RunGraph's error), or
  // nullopt when all passed. Without deferral there is nothing to settle.
  absl::StatusOr<std::optional<backends::DeferredFailure>> Settle();

  // Run from host tensors to host tensors: uploads, runs, downloads, and
  // waits for the device (bounded by RunnerOptions::wait_timeout); a
  // deferred range check is settled before it returns.
  absl::StatusOr<ir::TensorMap> RunFromHost(const ir::Graph& graph, const ir::TensorMap& inputs);

  // While `node_ms` is set (null: off), every Run adds each node's GPU time
  // in milliseconds to (*node_ms)[node id], growing it to the graph's size,
  // and waits for the device before returning.
  void set_node_times(std::vector<double>* node_ms);

  // The bf16 operand copies of precision kBf16 (zero otherwise).
  Bf16Copies bf16_copies() const;

  // The GEMMs with a bias epilogue Run has launched (cuBLASLt), over the
  // runner's life: 0 where cuBLASLt declined every shape.
  int64_t bias_epilogue_launches() const;

 private:
  struct Impl;
  explicit CudaGraphRunner(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem::cuda

#endif  // TANDEM_BACKENDS_CUDA_CUDA_GRAPH_RUNNER_H_
