// The CUDA graph runner's insides (cuda_graph_runner.h), shared by its two
// sources: cuda_graph_runner.cu (the runner's life, its walk of a graph,
// range checks and profiling) and cuda_node_launches.cu (each op family's
// launches). Not for anyone else.
#ifndef TANDEM_BACKENDS_CUDA_CUDA_GRAPH_RUNNER_IMPL_H_
#define TANDEM_BACKENDS_CUDA_CUDA_GRAPH_RUNNER_IMPL_H_

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "backends/cuda/cublas_library.h"
#include "backends/cuda/cuda_graph_runner.h"
#include "backends/cuda/cuda_kernels.cuh"
#include "backends/cuda/node_plan.h"
#include "ir/graph_plan.h"

namespace tandem::cuda {
namespace runner {

// NVIDIA's recommended cuBLAS workspace for Hopper; fixed, so that cuBLAS
// picks the same algorithms (and bits) on every call.
constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;

inline absl::Status CublasStatus(const CublasLibrary& library, cublasStatus_t status, const char* call) {
  if (status == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(call, ": ", library.status_string(status)));
}
inline absl::Status CublasStatus(const CublasLtLibrary& library, cublasStatus_t status, const char* call) {
  if (status == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(call, ": ", library.status_string(status)));
}

// The alignment the epilogue's GEMMs require of every pointer: cuBLASLt's
// default minimum in its heuristic's preference
// (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES, cublasLt.h), which the
// runner's allocations always have (device_memory.h); a pointer without it
// (none so far) runs the GEMM unfused.
constexpr uintptr_t kEpilogueAlignment = 256;

// What decides a GEMM with the bias epilogue's cuBLASLt plan: its shape,
// leading dimensions, batch steps, transposes and operand type (bf16 or
// f32; the compute type is the runner's precision).
struct EpilogueKey {
  int64_t m = 0, n = 0, k = 0, batch = 0, lda = 0, ldb = 0, a_step = 0, b_step = 0;
  bool transpose_a = false, transpose_b = false, bf16 = false;

  friend bool operator==(const EpilogueKey&, const EpilogueKey&) = default;
  template <typename H>
  friend H AbslHashValue(H h, const EpilogueKey& key) {
    return H::combine(std::move(h), key.m, key.n, key.k, key.batch, key.lda, key.ldb, key.a_step, key.b_step,
                      key.transpose_a, key.transpose_b, key.bf16);
  }
};

// One EpilogueKey's cuBLASLt GEMM, made at its first call and kept: the
// operation (compute type, transposes, the bias epilogue; its bias pointer
// set at each call), the layouts, and the algorithm the heuristic chose
// then, pinned for every later call. `supported` false: cuBLASLt declined
// the shape (no algorithm, or NOT_SUPPORTED), which then runs unfused
// without asking again. Destroys what it made.
struct EpiloguePlan {
  explicit EpiloguePlan(const CublasLtLibrary& lt) : lt(lt) {}
  ~EpiloguePlan() {
    if (operation != nullptr) lt.matmul_desc_destroy(operation);
    for (cublasLtMatrixLayout_t layout : {a, b, d}) {
      if (layout != nullptr) lt.matrix_layout_destroy(layout);
    }
  }
  EpiloguePlan(const EpiloguePlan&) = delete;
  EpiloguePlan& operator=(const EpiloguePlan&) = delete;

  const CublasLtLibrary& lt;
  bool supported = false;
  cublasLtMatmulDesc_t operation = nullptr;
  // cuBLAS's operands: A is the matmul's b, B its a (GemmShape); D is also C.
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algorithm{};
};

// A value's storage: an allocation of the runner's device memory (private,
// stream-ordered), freed in stream order when its last holder goes.
using Buffer = std::shared_ptr<const backends::DeviceAllocation>;

inline void* DataOf(const Buffer& buffer) { return reinterpret_cast<void*>(static_cast<uintptr_t>(buffer->address())); }

// A value on the device: its type and its (possibly shared) storage. No
// buffer: the value is missing, as an undefined ir::HostTensor is.
struct DeviceValue {
  TensorType type;
  Buffer buffer;

  bool defined() const { return buffer != nullptr; }
  void* data() const { return DataOf(buffer); }
  const float* f32() const { return static_cast<const float*>(data()); }
  float* mutable_f32() const { return static_cast<float*>(data()); }
  const int32_t* i32() const { return static_cast<const int32_t*>(data()); }
  // As a kernel's operand or result: f32 or bf16 storage.
  kernels::ElementsIn elements() const { return {data(), type.dtype == ir::DType::kBF16}; }
  kernels::ElementsOut mutable_elements() const { return {data(), type.dtype == ir::DType::kBF16}; }
};

// A range check whose answer is still on the device.
struct PendingCheck {
  ir::ValueId node;
  Buffer result;  // one kernels::RangeCheckResult
  const char* what;                      // "id" or "label"
  int64_t limit;
};

}  // namespace runner

using runner::Buffer;
using runner::DeviceValue;
using runner::NodePlan;
using runner::PendingCheck;

struct CudaExecutable::Compiled {
  ir::Graph graph;
  ir::GraphPlan plan;
  std::vector<NodePlan> nodes;  // by value id; empty for inputs
  // The runs of elementwise nodes launched as one kernel each (none where
  // RunnerOptions::fuse_elementwise is off), and their launches by run.
  ir::ElementwiseRuns fused;
  std::vector<runner::RunPlan> runs;
  // The matmuls whose bias add is their GEMM's epilogue (none where
  // RunnerOptions::fuse_elementwise is off); their adds are in no run.
  runner::BiasEpilogues epilogues;
};

struct CudaGraphRunner::Impl {
  Impl(const RunnerOptions& options, std::unique_ptr<CudaDeviceMemory> memory)
      : options(options), memory(std::move(memory)),
        stream(static_cast<cudaStream_t>(this->memory->stream_handle())) {}
  ~Impl();
  absl::Status Init();

  absl::StatusOr<std::unique_ptr<CudaExecutable>> Compile(const ir::Graph& graph);
  absl::StatusOr<DeviceTensorMap> Run(const CudaExecutable::Compiled& executable, const DeviceTensorMap& inputs);
  absl::Time Deadline() const { return absl::Now() + options.wait_timeout; }

  // Allocation.
  absl::StatusOr<Buffer> AllocateBytes(int64_t bytes);
  absl::StatusOr<DeviceValue> Allocate(const ir::TensorType& type);

  // The node's value from its operands: checks them, then launches its
  // kernel, which takes bf16 storage as it is (widened as it is loaded, the
  // result rounded once as it is stored: the reference's bits,
  // backends/cpu/kernels.h).
  absl::StatusOr<DeviceValue> Evaluate(ir::ValueId id, const ir::Node& node, const NodePlan& plan,
                                       const std::vector<const DeviceValue*>& operands);
  // The op's kernel, on operands the checks passed.
  absl::StatusOr<DeviceValue> Dispatch(ir::ValueId id, const ir::Node& node, const NodePlan& plan,
                                       const std::vector<const DeviceValue*>& operands);
  absl::StatusOr<DeviceValue> ConvertTo(const ir::Node& node, const DeviceValue& x, ir::DType to);
  absl::StatusOr<DeviceValue> Constant(const ir::Node& node, const NodePlan& plan);
  absl::StatusOr<DeviceValue> Convert(const ir::Node& node, const DeviceValue& x);
  absl::StatusOr<DeviceValue> Elementwise(const ir::Node& node, const NodePlan& plan,
                                          const std::vector<const DeviceValue*>& operands);
  // A run of elementwise nodes in one launch: sets its stored members'
  // values in `values`.
  absl::Status EvaluateRun(const ir::Graph& graph, const runner::RunPlan& run, std::vector<DeviceValue>& values);
  absl::StatusOr<DeviceValue> Reduce(const ir::Node& node, const NodePlan& plan, const DeviceValue& x);
  absl::StatusOr<DeviceValue> DataMovement(const ir::Node& node, const NodePlan& plan,
                                           const std::vector<const DeviceValue*>& operands);
  absl::StatusOr<DeviceValue> MatMul(const ir::Node& node, const NodePlan& plan, const DeviceValue& a,
                                     const DeviceValue& b);
  // The matmul `node` of a and b with `bias` added by the GEMM's epilogue
  // (cuBLASLt), the value of its bias add, of type `type`; nullopt where
  // the epilogue does not run (cuBLASLt not loaded, a shape it declined, an
  // empty or oversized GEMM, an operand missing or unaligned): the caller
  // then evaluates the matmul and the add as usual. An error only for a
  // failed allocation or a cuBLASLt call failing otherwise than
  // NOT_SUPPORTED.
  absl::StatusOr<std::optional<DeviceValue>> MatMulBias(const ir::Node& node, const NodePlan& plan,
                                                        const DeviceValue& a, const DeviceValue& b,
                                                        const DeviceValue& bias, const ir::TensorType& type);
  // The plan of `gemm`'s GEMM with the bias epilogue (bias at `bias` for
  // the heuristic, which reads its alignment), asking cuBLASLt's heuristic
  // once; unsupported where any call fails.
  std::unique_ptr<runner::EpiloguePlan> PlanEpilogue(const runner::GemmShape& gemm, bool bf16, const void* bias);
  // Loads cuBLASLt and creates its handle at the first call; whether it is
  // there (a failure is remembered: every epilogue then runs unfused).
  bool CublasLtReady();
  absl::StatusOr<DeviceValue> RowWise(ir::ValueId id, const ir::Node& node, const NodePlan& plan,
                                      const std::vector<const DeviceValue*>& operands);
  absl::StatusOr<DeviceValue> Attention(ir::ValueId id, const ir::Node& node, const NodePlan& plan,
                                        const std::vector<const DeviceValue*>& operands);
  absl::StatusOr<DeviceValue> Embedding(ir::ValueId id, const ir::Node& node,
                                        const std::vector<const DeviceValue*>& operands);

  // Enqueues the range check of `values` against [0, limit) for node `id`.
  absl::Status CheckRange(ir::ValueId id, const DeviceValue& values, int64_t limit,
                          const char* what);
  // Waits for the device and reports the first failed range check, in
  // program order (InvalidArgument, cpu::RunGraph's message); clears them.
  absl::Status FlushChecks(const ir::Graph& graph);
  // With deferred range checks: copies the pending checks' answers into pinned
  // staging, asynchronously, for Settle; clears them.
  absl::Status DeferChecks(const ir::Graph& graph);
  absl::StatusOr<std::optional<backends::DeferredFailure>> Settle();
  // `status` of a host-side failure, unless an earlier node's range check
  // failed (that is the error cpu::RunGraph would have stopped at).
  absl::Status Fail(const ir::Graph& graph, absl::Status status);

  // Precision kBf16: `x` (f32) rounded to bf16 on the device, made once
  // for as long as x's storage lives and reused by every matmul that reads
  // it, and by attention (device tensors are never written once made:
  // device_memory.h), so a weight is narrowed once per step rather than at
  // each of its matmuls, and attention's q, k and v once for its forward
  // and gradient while the step keeps them.
  // Copies whose source is gone are released on the next call.
  absl::StatusOr<const void*> Narrowed(const DeviceValue& x);

  // Profiling: events around node `id`'s work (set_node_times).
  absl::Status MarkNode(ir::ValueId id, bool end);
  absl::Status CollectNodeTimes(const ir::Graph& graph);

  const RunnerOptions options;
  const std::unique_ptr<CudaDeviceMemory> memory;
  const cudaStream_t stream;  // memory's
  std::unique_ptr<CublasLibrary> blas;  // loaded by Init (cublas_library.h)
  cublasHandle_t cublas = nullptr;
  // Shared by cuBLAS and cuBLASLt: both run on `stream`, one call at a time.
  void* workspace = nullptr;
  // cuBLASLt, for the GEMMs with a bias epilogue: loaded at the first
  // (CublasLtReady), null until then or where it failed; its plans by
  // shape (EpiloguePlan), destroyed before it; the launches so far.
  std::unique_ptr<CublasLtLibrary> lt;
  cublasLtHandle_t lt_handle = nullptr;
  bool lt_tried = false;
  absl::flat_hash_map<runner::EpilogueKey, std::unique_ptr<runner::EpiloguePlan>> epilogue_plans;
  int64_t epilogue_launches = 0;
  std::vector<PendingCheck> checks;
  // Deferred range checks (set_defer_range_checks): their answers in pinned
  // staging, blocks of kAnswersPerBlock kept from step to step.
  struct DeferredCheck {
    int64_t run = 0;
    std::string where;  // "%2 = embedding at ...: embedding", the reference's words
    const char* what = nullptr;
    int64_t limit = 0;
    const void* answer = nullptr;  // a kernels::RangeCheckResult in staging
  };
  static constexpr int64_t kAnswersPerBlock = 256;
  bool defer_range_checks = false;
  std::vector<DeferredCheck> deferred;
  std::vector<void*> answer_blocks;
  int64_t answers_used = 0;
  int64_t runs_since_settle = 0;
  std::vector<double>* node_ms = nullptr;
  // While profiling: a (start, end) event pair per evaluated node, reused
  // across runs.
  std::vector<std::pair<ir::ValueId, std::pair<cudaEvent_t, cudaEvent_t>>> marks;
  std::vector<std::pair<cudaEvent_t, cudaEvent_t>> spare_events;
  // Narrowed's copies, by the source's allocation.
  struct NarrowedCopy {
    std::weak_ptr<const backends::DeviceAllocation> source;
    int64_t elements = 0;
    Buffer copy;
  };
  absl::flat_hash_map<const backends::DeviceAllocation*, NarrowedCopy> narrowed;
  int64_t narrowings = 0;  // copies made
};

}  // namespace tandem::cuda

#endif  // TANDEM_BACKENDS_CUDA_CUDA_GRAPH_RUNNER_IMPL_H_
