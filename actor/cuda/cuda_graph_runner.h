// CudaGraphRunner: runs an IR graph (one stage function) on a CUDA device,
// with a device kernel for every op of the closed set (ir/op.h) and cuBLAS
// for matmul.
//
// The host is the boundary: Run uploads the inputs, evaluates the nodes in
// order on the runner's one compute stream (each value in its own
// stream-ordered allocation from the runner's memory pool, freed after its
// last use, the executor's rule), and downloads the graph's outputs. Keeping the actor's buffers resident on the
// device between functions is the next step (see the README's GPU section).
//
// Numerics: deterministic (the same inputs give the same bits every run):
// no atomics in any reduction, each sum runs in index order within one
// thread, and cuBLAS runs with atomics disallowed and a fixed workspace. The
// results match the CPU reference kernels (ir/kernels.h) within 1e-4
// relative, not bitwise (different exp/tanh/log and matmul orders).
// bf16_matmul rounds matmul operands to bf16 and accumulates in f32.
//
// Ownership and threading: one runner per actor (per device); owns its
// stream, cuBLAS handle and workspace; not thread-safe.
#ifndef TANDEM_ACTOR_CUDA_CUDA_GRAPH_RUNNER_H_
#define TANDEM_ACTOR_CUDA_CUDA_GRAPH_RUNNER_H_

#include <memory>

#include "absl/status/statusor.h"
#include "ir/graph.h"
#include "ir/interpreter.h"

namespace tandem::actor::cuda {

struct RunnerOptions {
  int device = 0;
  bool bf16_matmul = false;
};

class CudaGraphRunner {
 public:
  // FailedPrecondition (CheckDevice's message) without that device.
  static absl::StatusOr<std::unique_ptr<CudaGraphRunner>> Create(const RunnerOptions& options);
  ~CudaGraphRunner();
  CudaGraphRunner(const CudaGraphRunner&) = delete;
  CudaGraphRunner& operator=(const CudaGraphRunner&) = delete;

  // `graph`'s outputs by name, for `inputs` by input name (as ir::RunGraph).
  // The same errors as ir::RunGraph for missing or mistyped inputs and
  // data-dependent failures (an embedding id out of range is detected on
  // the device and reported with its position); Internal for CUDA errors,
  // naming the op and the call.
  absl::StatusOr<ir::TensorMap> Run(const ir::Graph& graph, const ir::TensorMap& inputs);

 private:
  struct Impl;
  explicit CudaGraphRunner(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem::actor::cuda

#endif  // TANDEM_ACTOR_CUDA_CUDA_GRAPH_RUNNER_H_
