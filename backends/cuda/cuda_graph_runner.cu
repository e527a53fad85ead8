// CudaGraphRunner: walks a graph in program order like cpu::RunGraph and
// turns each node into a kernel launch (cuda_kernels.cuh) or a cuBLAS call on
// the runner's stream.
//
// Host-side work per node: check the operand types against the node (the
// shape rules, ir/shape_rules.h, so no kernel can index out of bounds on a
// graph the verifier would reject), allocate the result from the runner's
// device memory (a stream-ordered pool), compute shapes and strides,
// launch. Nothing waits for the device but the read-back of range checks.
//
// Data-dependent errors (ids and labels out of range) are found on the
// device by a range-check kernel that writes the first bad position into a
// small result buffer; the compute kernel itself tolerates bad ids. The
// results are read back, in program order, when the run synchronizes (at
// the end, or before reporting a host-side error), so the error reported is
// the one cpu::RunGraph reports: the earliest failing node's.
//
// Memory: each value owns a private allocation of the runner's
// CudaDeviceMemory (cudaMallocFromPoolAsync on its stream), shared by reshape
// and pipeline_yield results, and freed with cudaFreeAsync when its last
// holder goes: the executor's last-use rule, without waiting for the kernels
// that read it.
#include "backends/cuda/cuda_status.h"
#include "backends/cuda/cuda_graph_runner.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "backends/cuda/cublas_library.h"
#include "backends/cuda/cuda_kernels.cuh"
#include "backends/cuda/cuda_runtime.h"
#include "ir/graph_plan.h"
#include "ir/op_def.h"
#include "ir/shape_rules.h"

namespace tandem::cuda {
namespace {

using ir::DType;
using ir::OpKind;
using ir::Shape;
using ir::TensorType;

// NVIDIA's recommended cuBLAS workspace for Hopper; fixed, so that cuBLAS
// picks the same algorithms (and bits) on every call.
constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;

absl::Status CublasStatus(const CublasLibrary& library, cublasStatus_t status, const char* call) {
  if (status == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(call, ": ", library.status_string(status)));
}

absl::Status Unimplemented(const ir::Node& node, absl::string_view what) {
  return absl::UnimplementedError(absl::StrCat(ir::OpName(node.op), ": ", what));
}

// A value's storage: an allocation of the runner's device memory (private,
// stream-ordered), freed in stream order when its last holder goes.
using Buffer = std::shared_ptr<const backends::DeviceAllocation>;

void* DataOf(const Buffer& buffer) { return reinterpret_cast<void*>(static_cast<uintptr_t>(buffer->address())); }

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
};

// A range check whose answer is still on the device.
struct PendingCheck {
  ir::ValueId node;
  Buffer result;  // one kernels::RangeCheckResult
  const char* what;                      // "id" or "label"
  int64_t limit;
};

std::vector<int64_t> RowMajorStrides(const Shape& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int axis = static_cast<int>(shape.size()) - 2; axis >= 0; --axis) {
    strides[axis] = strides[axis + 1] * shape[axis + 1];
  }
  return strides;
}

int64_t Product(const Shape& shape, size_t begin, size_t end) {
  int64_t product = 1;
  for (size_t axis = begin; axis < end; ++axis) product *= shape[axis];
  return product;
}

// A StridedMap over `extents` with strides[operand][axis], with extent-1
// axes dropped and each axis merged into its outer neighbour wherever every
// operand steps across both as over one axis (same-shape operands collapse
// to one axis). Unimplemented beyond kernels::kMaxRank merged axes.
absl::StatusOr<kernels::StridedMap> MakeStridedMap(const ir::Node& node,
                                                   const std::vector<int64_t>& extents,
                                                   const std::vector<std::vector<int64_t>>& strides) {
  kernels::StridedMap map;
  map.num_operands = static_cast<int>(strides.size());
  std::vector<int64_t> merged_extents;
  std::vector<std::vector<int64_t>> merged_strides(strides.size());
  for (size_t axis = 0; axis < extents.size(); ++axis) {
    if (extents[axis] == 1) continue;
    bool mergeable = !merged_extents.empty();
    for (size_t op = 0; mergeable && op < strides.size(); ++op) {
      mergeable = merged_strides[op].back() == strides[op][axis] * extents[axis];
    }
    if (mergeable) {
      merged_extents.back() *= extents[axis];
      for (size_t op = 0; op < strides.size(); ++op) merged_strides[op].back() = strides[op][axis];
    } else {
      merged_extents.push_back(extents[axis]);
      for (size_t op = 0; op < strides.size(); ++op) merged_strides[op].push_back(strides[op][axis]);
    }
  }
  if (merged_extents.size() > static_cast<size_t>(kernels::kMaxRank)) {
    return Unimplemented(node, absl::StrCat("more than ", kernels::kMaxRank,
                                            " axes after merging are not supported on the GPU"));
  }
  map.rank = static_cast<int>(merged_extents.size());
  for (int axis = 0; axis < map.rank; ++axis) {
    map.extents[axis] = merged_extents[axis];
    for (size_t op = 0; op < strides.size(); ++op) map.strides[op][axis] = merged_strides[op][axis];
  }
  return map;
}

// The NumPy broadcast of `inputs` to `out`: stride 0 along missing and
// extent-1 axes. The shape rules have checked that the shapes broadcast.
absl::StatusOr<kernels::StridedMap> MakeBroadcastMap(const ir::Node& node, const Shape& out,
                                                     const std::vector<const Shape*>& inputs) {
  std::vector<std::vector<int64_t>> strides;
  for (const Shape* input : inputs) {
    const std::vector<int64_t> contiguous = RowMajorStrides(*input);
    const int offset = static_cast<int>(out.size()) - static_cast<int>(input->size());
    std::vector<int64_t> aligned(out.size(), 0);
    for (int axis = std::max(offset, 0); axis < static_cast<int>(out.size()); ++axis) {
      if ((*input)[axis - offset] != 1) aligned[axis] = contiguous[axis - offset];
    }
    strides.push_back(std::move(aligned));
  }
  return MakeStridedMap(node, out, strides);
}

std::optional<kernels::ConvertOp> ConvertOpOf(DType from, DType to) {
  using kernels::ConvertOp;
  if (from == DType::kF32 && to == DType::kI32) return ConvertOp::kF32ToI32;
  if (from == DType::kI32 && to == DType::kF32) return ConvertOp::kI32ToF32;
  if (from == DType::kF32 && to == DType::kBF16) return ConvertOp::kF32ToBf16;
  if (from == DType::kBF16 && to == DType::kF32) return ConvertOp::kBf16ToF32;
  if (from == DType::kBF16 && to == DType::kI32) return ConvertOp::kBf16ToI32;
  if (from == DType::kI32 && to == DType::kBF16) return ConvertOp::kI32ToBf16;
  return std::nullopt;
}

// Whether `node` computes on bf16: it is arithmetic (ir::MovesAnyDType)
// and an operand or its result is bf16.
bool ComputesOnBf16(const ir::Node& node, const std::vector<TensorType>& operands) {
  if (ir::MovesAnyDType(node.op)) return false;
  if (node.type.dtype == DType::kBF16) return true;
  for (const TensorType& operand : operands) {
    if (operand.dtype == DType::kBF16) return true;
  }
  return false;
}

// The plan of reducing `in` over node's axes (one operand).
absl::StatusOr<kernels::ReductionPlan> PlanReduction(const ir::Node& node, const Shape& in) {
  const std::vector<int64_t>& axes = node.attributes.GetInts("axes");
  const std::vector<int64_t> strides = RowMajorStrides(in);
  std::vector<int64_t> kept_extents, kept_strides, reduced_extents, reduced_strides;
  int64_t reduced_count = 1;
  for (int64_t axis = 0; axis < static_cast<int64_t>(in.size()); ++axis) {
    if (std::find(axes.begin(), axes.end(), axis) != axes.end()) {
      reduced_extents.push_back(in[axis]);
      reduced_strides.push_back(strides[axis]);
      reduced_count *= in[axis];
    } else {
      kept_extents.push_back(in[axis]);
      kept_strides.push_back(strides[axis]);
    }
  }
  kernels::ReductionPlan plan;
  plan.num_outputs = node.type.num_elements();
  plan.reduced_count = static_cast<float>(reduced_count);
  absl::StatusOr<kernels::StridedMap> kept = MakeStridedMap(node, kept_extents, {kept_strides});
  if (!kept.ok()) return kept.status();
  plan.kept = *kept;
  absl::StatusOr<kernels::StridedMap> reduced = MakeStridedMap(node, reduced_extents, {reduced_strides});
  if (!reduced.ok()) return reduced.status();
  plan.reduced_rank = reduced->rank;
  for (int axis = 0; axis < reduced->rank; ++axis) {
    plan.reduced_extents[axis] = reduced->extents[axis];
    plan.reduced_strides[axis] = reduced->strides[0][axis];
  }
  return plan;
}

// What one node's launch needs that its static shapes decide.
struct NodePlan {
  // An arithmetic op on bf16: the f32 kernel on widened operands, the
  // result rounded once (backends/cpu/kernels.h).
  bool through_f32 = false;
  // Where through_f32: the node's copy typed f32, which the kernel is
  // launched for (unset otherwise).
  ir::Node f32_node;
  // binary, where, broadcast, transpose: the index map of the operands.
  std::optional<kernels::StridedMap> map;
  std::optional<kernels::ReductionPlan> reduction;
  // The node's attributes, read once by name here and typed for the launch.
  struct Attributes {
    std::string input_name;                         // input
    double value = 0;                               // constant
    int64_t axis = 0, start = 0, limit = 0;         // slice (axis also concat)
    bool transpose_a = false, transpose_b = false;  // matmul
    float eps = 0;                                  // layer_norm, normalize, normalize_grad
    float fill = 0;                                 // causal_mask
    double theta = 0;                               // rotary
    float scale = 0;                                // attention
    bool inverse = false;                           // rotary
  } attributes;
};

// `node`'s attributes as its launch reads them.
NodePlan::Attributes TypedAttributes(const ir::Node& node) {
  NodePlan::Attributes typed;
  const ir::Attributes& a = node.attributes;
  switch (node.op) {
    case OpKind::kInput: typed.input_name = a.GetString("name"); break;
    case OpKind::kConstant: typed.value = a.GetDouble("value"); break;
    case OpKind::kSlice:
      typed.axis = a.GetInt("axis");
      typed.start = a.GetInt("start");
      typed.limit = a.GetInt("limit");
      break;
    case OpKind::kConcat: typed.axis = a.GetInt("axis"); break;
    case OpKind::kMatMul:
      typed.transpose_a = a.GetIntOr("transpose_a", 0) != 0;
      typed.transpose_b = a.GetIntOr("transpose_b", 0) != 0;
      break;
    case OpKind::kLayerNorm:
    case OpKind::kNormalize:
    case OpKind::kNormalizeGrad: typed.eps = static_cast<float>(a.GetDouble("eps")); break;
    case OpKind::kCausalMask: typed.fill = static_cast<float>(a.GetDouble("fill")); break;
    case OpKind::kRotary:
      typed.theta = a.GetDouble("theta");
      typed.inverse = a.GetInt("inverse") != 0;
      break;
    case OpKind::kAttention:
    case OpKind::kAttentionGrad: typed.scale = static_cast<float>(a.GetDouble("scale")); break;
    default: break;
  }
  return typed;
}

// The node's operand types fit its op and give its type (Internal, as the
// reference kernels report operands that do not fit: a graph the verifier
// would have rejected).
absl::Status CheckOperandTypes(const ir::Node& node, const std::vector<TensorType>& types) {
  if (node.op == OpKind::kConstant) return absl::OkStatus();
  absl::StatusOr<TensorType> inferred = ir::InferResultType(node.op, types, node.attributes);
  if (!inferred.ok()) return absl::InternalError(inferred.status().message());
  if (*inferred != node.type) {
    return absl::InternalError(absl::StrCat(ir::OpName(node.op), ": result type ",
                                            ir::TypeToString(node.type), " differs from ",
                                            ir::TypeToString(*inferred),
                                            ", the type of its operands' shape rule"));
  }
  // The shape rule of cross_entropy_grad leaves these to the kernel.
  if (node.op == OpKind::kCrossEntropyGrad &&
      (!ir::IsComputedFloat(types[0].dtype) || types[2].dtype != types[0].dtype)) {
    return absl::InternalError("cross_entropy_grad: logits and dy must be f32 or bf16, alike");
  }
  return absl::OkStatus();
}

// What `node`'s launches need that its operands' static types decide.
absl::StatusOr<NodePlan> PlanNode(const ir::Node& node, const std::vector<TensorType>& types) {
  NodePlan plan;
  plan.attributes = TypedAttributes(node);
  if (node.op == OpKind::kInput) return plan;
  if (absl::Status s = CheckOperandTypes(node, types); !s.ok()) return s;
  plan.through_f32 = ComputesOnBf16(node, types);
  if (plan.through_f32) {
    plan.f32_node = node;
    if (plan.f32_node.type.dtype == DType::kBF16) plan.f32_node.type.dtype = DType::kF32;
  }
  const ir::OpFamily family = ir::Def(node.op).family;
  if (family == ir::OpFamily::kReduction) {
    absl::StatusOr<kernels::ReductionPlan> reduction = PlanReduction(node, types[0].shape);
    if (!reduction.ok()) return reduction.status();
    plan.reduction = *reduction;
  } else if (node.op == OpKind::kTranspose) {
    const std::vector<int64_t> in_strides = RowMajorStrides(types[0].shape);
    std::vector<int64_t> strides;
    for (int64_t axis : node.attributes.GetInts("permutation")) strides.push_back(in_strides[axis]);
    absl::StatusOr<kernels::StridedMap> map = MakeStridedMap(node, node.type.shape, {strides});
    if (!map.ok()) return map.status();
    plan.map = *map;
  } else if (family == ir::OpFamily::kBinary || family == ir::OpFamily::kSelect || node.op == OpKind::kBroadcast) {
    std::vector<const Shape*> shapes;
    for (const TensorType& type : types) shapes.push_back(&type.shape);
    absl::StatusOr<kernels::StridedMap> map = MakeBroadcastMap(node, node.type.shape, shapes);
    if (!map.ok()) return map.status();
    plan.map = *map;
  }
  return plan;
}

}  // namespace

struct CudaExecutable::Compiled {
  ir::Graph graph;
  ir::GraphPlan plan;
  std::vector<NodePlan> nodes;  // by value id; empty for inputs
};

CudaExecutable::CudaExecutable(std::unique_ptr<Compiled> compiled) : compiled_(std::move(compiled)) {}
CudaExecutable::~CudaExecutable() = default;

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
  absl::StatusOr<DeviceValue> Allocate(const TensorType& type);

  // The node's value from its operands: checks them, and computes bf16
  // through the f32 kernels as the reference does (backends/cpu/kernels.h).
  absl::StatusOr<DeviceValue> Evaluate(ir::ValueId id, const ir::Node& node, const NodePlan& plan,
                                       const std::vector<const DeviceValue*>& operands);
  // The f32 kernel on the bf16 operands widened exactly, the result rounded
  // to bf16 once where the node's type is bf16.
  absl::StatusOr<DeviceValue> EvaluateThroughF32(ir::ValueId id, const ir::Node& node, const NodePlan& plan,
                                                 const std::vector<const DeviceValue*>& operands);
  // The op's kernel, on operands the checks passed.
  absl::StatusOr<DeviceValue> Dispatch(ir::ValueId id, const ir::Node& node, const NodePlan& plan,
                                       const std::vector<const DeviceValue*>& operands);
  absl::StatusOr<DeviceValue> ConvertTo(const ir::Node& node, const DeviceValue& x, DType to);
  absl::StatusOr<DeviceValue> Constant(const ir::Node& node, const NodePlan& plan);
  absl::StatusOr<DeviceValue> Convert(const ir::Node& node, const DeviceValue& x);
  absl::StatusOr<DeviceValue> Elementwise(const ir::Node& node, const NodePlan& plan,
                                          const std::vector<const DeviceValue*>& operands);
  absl::StatusOr<DeviceValue> Reduce(const ir::Node& node, const NodePlan& plan, const DeviceValue& x);
  absl::StatusOr<DeviceValue> DataMovement(const ir::Node& node, const NodePlan& plan,
                                           const std::vector<const DeviceValue*>& operands);
  absl::StatusOr<DeviceValue> MatMul(const ir::Node& node, const NodePlan& plan, const DeviceValue& a,
                                     const DeviceValue& b);
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
  // `status` of a host-side failure, unless an earlier node's range check
  // failed (that is the error cpu::RunGraph would have stopped at).
  absl::Status Fail(const ir::Graph& graph, absl::Status status);

  // Profiling: events around node `id`'s work (set_node_times).
  absl::Status MarkNode(ir::ValueId id, bool end);
  absl::Status CollectNodeTimes(const ir::Graph& graph);

  const RunnerOptions options;
  const std::unique_ptr<CudaDeviceMemory> memory;
  const cudaStream_t stream;  // memory's
  std::unique_ptr<CublasLibrary> blas;  // loaded by Init (cublas_library.h)
  cublasHandle_t cublas = nullptr;
  void* workspace = nullptr;
  std::vector<PendingCheck> checks;
  std::vector<double>* node_ms = nullptr;
  // While profiling: a (start, end) event pair per evaluated node, reused
  // across runs.
  std::vector<std::pair<ir::ValueId, std::pair<cudaEvent_t, cudaEvent_t>>> marks;
  std::vector<std::pair<cudaEvent_t, cudaEvent_t>> spare_events;
};

CudaGraphRunner::Impl::~Impl() {
  // Errors cannot be reported from here; the process is shutting the
  // runner down either way. The memory (destroyed after this body) waits
  // for its stream.
  cudaSetDevice(options.device);
  memory->SynchronizeStream(absl::Now() + absl::Seconds(10)).IgnoreError();
  for (auto& [id, events] : marks) spare_events.push_back(events);
  for (auto& [start, end] : spare_events) {
    cudaEventDestroy(start);
    cudaEventDestroy(end);
  }
  if (cublas != nullptr) blas->destroy(cublas);
  if (workspace != nullptr) cudaFree(workspace);
}

absl::Status CudaGraphRunner::Impl::Init() {
  if (absl::Status s = CudaStatus(cudaSetDevice(options.device), "cudaSetDevice"); !s.ok()) return s;
  absl::StatusOr<std::unique_ptr<CublasLibrary>> loaded = LoadCublas();
  if (!loaded.ok()) return loaded.status();
  blas = *std::move(loaded);
  if (absl::Status s = CublasStatus(*blas, blas->create(&cublas), "cublasCreate"); !s.ok()) return s;
  if (absl::Status s = CublasStatus(*blas, blas->set_stream(cublas, stream), "cublasSetStream"); !s.ok()) {
    return s;
  }
  if (absl::Status s = CublasStatus(*blas, blas->set_atomics_mode(cublas, CUBLAS_ATOMICS_NOT_ALLOWED),
                                    "cublasSetAtomicsMode");
      !s.ok()) {
    return s;
  }
  // The default math mode keeps f32 GEMMs in f32; TF32 tensor cores only
  // where asked for. bf16 GEMMs use tensor cores either way.
  const cublasMath_t math = options.precision == Precision::kTf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH;
  if (absl::Status s = CublasStatus(*blas, blas->set_math_mode(cublas, math), "cublasSetMathMode"); !s.ok()) {
    return s;
  }
  // After cublasSetStream, which resets the workspace to cuBLAS's own pool.
  if (absl::Status s = CudaStatus(cudaMalloc(&workspace, kCublasWorkspaceBytes), "cudaMalloc");
      !s.ok()) {
    return s;
  }
  return CublasStatus(*blas, blas->set_workspace(cublas, workspace, kCublasWorkspaceBytes), "cublasSetWorkspace");
}

absl::StatusOr<Buffer> CudaGraphRunner::Impl::AllocateBytes(int64_t bytes) {
  absl::StatusOr<std::shared_ptr<backends::DeviceAllocation>> allocation =
      backends::DeviceAllocation::Allocate(*memory, bytes);
  if (!allocation.ok()) return allocation.status();
  return Buffer(*std::move(allocation));
}

absl::StatusOr<DeviceValue> CudaGraphRunner::Impl::Allocate(const TensorType& type) {
  absl::StatusOr<Buffer> buffer = AllocateBytes(type.num_bytes());
  if (!buffer.ok()) return buffer.status();
  return DeviceValue{type, *std::move(buffer)};
}

absl::Status CudaGraphRunner::Impl::CheckRange(ir::ValueId id, const DeviceValue& values,
                                               int64_t limit, const char* what) {
  absl::StatusOr<Buffer> result = AllocateBytes(sizeof(kernels::RangeCheckResult));
  if (!result.ok()) return result.status();
  if (absl::Status s = CudaStatus(
          kernels::LaunchFindFirstOutOfRange(
              values.i32(), values.type.num_elements(), limit,
              static_cast<kernels::RangeCheckResult*>(DataOf(*result)), stream),
          "FindFirstOutOfRange launch");
      !s.ok()) {
    return s;
  }
  checks.push_back({id, *std::move(result), what, limit});
  return absl::OkStatus();
}

absl::Status CudaGraphRunner::Impl::FlushChecks(const ir::Graph& graph) {
  if (checks.empty()) return absl::OkStatus();
  std::vector<PendingCheck> flushed = std::move(checks);
  checks.clear();
  // Each copy waits for the stream's earlier work (the first one for all
  // of it), bounded.
  std::vector<kernels::RangeCheckResult> results(flushed.size());
  for (size_t i = 0; i < flushed.size(); ++i) {
    if (absl::Status s = memory->CopyToHostSync(&results[i], flushed[i].result->address(), sizeof(results[i]),
                                                Deadline());
        !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("graph @", graph.name(), ": reading back a range check: ",
                                                 s.message()));
    }
  }
  for (size_t i = 0; i < flushed.size(); ++i) {
    if (results[i].position < 0) continue;
    const PendingCheck& check = flushed[i];
    // The reference kernels' words: "embedding: id 70 at position 3
    // outside [0, 65)".
    return absl::InvalidArgumentError(absl::StrCat(
        ir::DescribeValue(graph, check.node), ": ", ir::OpName(graph.node(check.node).op), ": ", check.what, " ",
        results[i].value, " at position ", results[i].position, " outside [0, ", check.limit,
        ")"));
  }
  return absl::OkStatus();
}

absl::Status CudaGraphRunner::Impl::MarkNode(ir::ValueId id, bool end) {
  if (node_ms == nullptr) return absl::OkStatus();
  if (!end) {
    std::pair<cudaEvent_t, cudaEvent_t> events{nullptr, nullptr};
    if (!spare_events.empty()) {
      events = spare_events.back();
      spare_events.pop_back();
    } else {
      if (absl::Status s = CudaStatus(cudaEventCreate(&events.first), "cudaEventCreate"); !s.ok()) return s;
      if (absl::Status s = CudaStatus(cudaEventCreate(&events.second), "cudaEventCreate"); !s.ok()) {
        cudaEventDestroy(events.first);
        return s;
      }
    }
    marks.push_back({id, events});
  }
  cudaEvent_t event = end ? marks.back().second.second : marks.back().second.first;
  return CudaStatus(cudaEventRecord(event, stream), "cudaEventRecord");
}

absl::Status CudaGraphRunner::Impl::CollectNodeTimes(const ir::Graph& graph) {
  if (node_ms == nullptr) return absl::OkStatus();
  if (absl::Status s = memory->SynchronizeStream(Deadline()); !s.ok()) return s;
  if (node_ms->size() < static_cast<size_t>(graph.size())) node_ms->resize(static_cast<size_t>(graph.size()), 0.0);
  absl::Status status = absl::OkStatus();
  for (auto& [id, events] : marks) {
    float ms = 0;
    if (status.ok()) {
      status.Update(CudaStatus(cudaEventElapsedTime(&ms, events.first, events.second), "cudaEventElapsedTime"));
      if (status.ok()) (*node_ms)[static_cast<size_t>(id)] += ms;
    }
    spare_events.push_back(events);
  }
  marks.clear();
  return status;
}

absl::Status CudaGraphRunner::Impl::Fail(const ir::Graph& graph, absl::Status status) {
  absl::Status earlier = FlushChecks(graph);
  return earlier.ok() ? status : earlier;
}

absl::StatusOr<DeviceValue> CudaGraphRunner::Impl::Constant(const ir::Node& node, const NodePlan& plan) {
  const double value = plan.attributes.value;
  uint32_t bits = 0;
  switch (node.type.dtype) {
    case DType::kF32:
      bits = std::bit_cast<uint32_t>(static_cast<float>(value));
      break;
    case DType::kI32:
      bits = static_cast<uint32_t>(static_cast<int32_t>(value));
      break;
    default:
      return Unimplemented(node, absl::StrCat("dtype ", ir::DTypeName(node.type.dtype),
                                              " is not computed on the GPU"));
  }
  absl::StatusOr<DeviceValue> out = Allocate(node.type);
  if (!out.ok()) return out.status();
  if (absl::Status s = CudaStatus(
          kernels::LaunchFill32(bits, out->data(), node.type.num_elements(), stream),
          "Fill32 launch");
      !s.ok()) {
    return s;
  }
  return out;
}

absl::StatusOr<DeviceValue> CudaGraphRunner::Impl::Convert(const ir::Node& node,
                                                           const DeviceValue& x) {
  return ConvertTo(node, x, node.type.dtype);
}

absl::StatusOr<DeviceValue> CudaGraphRunner::Impl::ConvertTo(const ir::Node& node, const DeviceValue& x,
                                                             DType to) {
  const DType from = x.type.dtype;
  const std::optional<kernels::ConvertOp> op = ConvertOpOf(from, to);
  if (!op.has_value() && from != to) {
    return Unimplemented(node, absl::StrCat(ir::DTypeName(from), " to ", ir::DTypeName(to),
                                            " is not computed on the GPU"));
  }
  absl::StatusOr<DeviceValue> out = Allocate(TensorType{to, x.type.shape});
  if (!out.ok()) return out.status();
  if (!op.has_value()) {
    if (out->type.num_bytes() > 0) {
      if (absl::Status s = CudaStatus(
              cudaMemcpyAsync(out->data(), x.data(), static_cast<size_t>(out->type.num_bytes()),
                              cudaMemcpyDeviceToDevice, stream),
              "cudaMemcpyAsync (convert)");
          !s.ok()) {
        return s;
      }
    }
    return out;
  }
  if (absl::Status s = CudaStatus(
          kernels::LaunchConvert(*op, x.data(), out->data(), x.type.num_elements(), stream),
          "Convert launch");
      !s.ok()) {
    return s;
  }
  return out;
}

absl::StatusOr<DeviceValue> CudaGraphRunner::Impl::Elementwise(
    const ir::Node& node, const NodePlan& plan, const std::vector<const DeviceValue*>& operands) {
  absl::StatusOr<DeviceValue> out = Allocate(node.type);
  if (!out.ok()) return out.status();
  cudaError_t error = cudaSuccess;
  switch (ir::Def(node.op).family) {
    case ir::OpFamily::kUnary:
      error = kernels::LaunchUnary(node.op, operands[0]->f32(), out->mutable_f32(), node.type.num_elements(), stream);
      break;
    case ir::OpFamily::kBinary:
      error = kernels::LaunchBinary(node.op, operands[0]->f32(), operands[1]->f32(), out->mutable_f32(), *plan.map,
                                    stream);
      break;
    case ir::OpFamily::kSelect:
      error = kernels::LaunchWhere(operands[0]->f32(), operands[1]->f32(), operands[2]->f32(), out->mutable_f32(),
                                   *plan.map, stream);
      break;
    default:
      return absl::InternalError(absl::StrCat("CudaGraphRunner: ", ir::OpName(node.op), " is not elementwise"));
  }
  if (absl::Status s = CudaStatus(error, "elementwise launch"); !s.ok()) return s;
  return out;
}

absl::StatusOr<DeviceValue> CudaGraphRunner::Impl::Reduce(const ir::Node& node, const NodePlan& plan,
                                                          const DeviceValue& x) {
  kernels::ReduceOp op = kernels::ReduceOp::kSum;
  if (node.op == OpKind::kReduceMean) op = kernels::ReduceOp::kMean;
  if (node.op == OpKind::kReduceMax) op = kernels::ReduceOp::kMax;
  absl::StatusOr<DeviceValue> out = Allocate(node.type);
  if (!out.ok()) return out.status();
  // Freed in stream order after the launch, like any value.
  absl::StatusOr<Buffer> scratch = AllocateBytes(static_cast<int64_t>(kernels::ReduceScratchBytes(*plan.reduction)));
  if (!scratch.ok()) return scratch.status();
  if (absl::Status s = CudaStatus(
          kernels::LaunchReduce(op, x.f32(), out->mutable_f32(), *plan.reduction, DataOf(*scratch), stream),
          "Reduce launch");
      !s.ok()) {
    return s;
  }
  return out;
}

absl::StatusOr<DeviceValue> CudaGraphRunner::Impl::DataMovement(
    const ir::Node& node, const NodePlan& plan, const std::vector<const DeviceValue*>& operands) {
  const DeviceValue& x = *operands[0];
  // reshape and pipeline_yield share the operand's storage, as on the CPU.
  if (node.op == OpKind::kReshape || node.op == OpKind::kPipelineYield) {
    return DeviceValue{node.type, x.buffer};
  }
  const int element_size = static_cast<int>(ir::DTypeSize(node.type.dtype));
  absl::StatusOr<DeviceValue> out = Allocate(node.type);
  if (!out.ok()) return out.status();
  const Shape& out_shape = node.type.shape;
  cudaError_t error = cudaSuccess;
  switch (node.op) {
    case OpKind::kTranspose:
    case OpKind::kBroadcast:
      error = kernels::LaunchGather(x.data(), out->data(), element_size, *plan.map, stream);
      break;
    case OpKind::kSlice: {
      const Shape& in = x.type.shape;
      const size_t axis = static_cast<size_t>(plan.attributes.axis);
      const int64_t start = plan.attributes.start;
      const int64_t limit = plan.attributes.limit;
      const int64_t outer = Product(in, 0, axis);
      const int64_t inner = Product(in, axis + 1, in.size());
      const auto* src = static_cast<const std::byte*>(x.data());
      error = kernels::LaunchCopyRows(src + start * inner * element_size, in[axis] * inner,
                                      out->data(), (limit - start) * inner, outer,
                                      (limit - start) * inner, element_size, stream);
      break;
    }
    case OpKind::kConcat: {
      const size_t axis = static_cast<size_t>(plan.attributes.axis);
      const int64_t outer = Product(out_shape, 0, axis);
      const int64_t inner = Product(out_shape, axis + 1, out_shape.size());
      auto* dst = static_cast<std::byte*>(out->data());
      int64_t column = 0;
      for (const DeviceValue* operand : operands) {
        const int64_t row_length = operand->type.shape[axis] * inner;
        error = kernels::LaunchCopyRows(operand->data(), row_length, dst + column * element_size,
                                        out_shape[axis] * inner, outer, row_length, element_size,
                                        stream);
        if (error != cudaSuccess) break;
        column += row_length;
      }
      break;
    }
    default:
      return absl::InternalError(
          absl::StrCat("CudaGraphRunner: ", ir::OpName(node.op), " does not move data"));
  }
  if (absl::Status s = CudaStatus(error, "data movement launch"); !s.ok()) return s;
  return out;
}

absl::StatusOr<DeviceValue> CudaGraphRunner::Impl::MatMul(const ir::Node& node, const NodePlan& plan,
                                                          const DeviceValue& a, const DeviceValue& b) {
  const bool transpose_a = plan.attributes.transpose_a;
  const bool transpose_b = plan.attributes.transpose_b;
  const Shape& a_shape = a.type.shape;
  const Shape& b_shape = b.type.shape;
  const size_t ra = a_shape.size();
  const size_t rb = b_shape.size();
  int64_t m = transpose_a ? a_shape[ra - 1] : a_shape[ra - 2];
  const int64_t k = transpose_a ? a_shape[ra - 2] : a_shape[ra - 1];
  const int64_t n = transpose_b ? b_shape[rb - 2] : b_shape[rb - 1];
  const Shape& out_shape = node.type.shape;
  int64_t batch = Product(out_shape, 0, out_shape.size() - 2);
  // A rank-2 operand is reused for every batch entry (stride 0). When it is
  // b and a is not transposed, a's batch axes fold into M: one GEMM, as the
  // reference does.
  int64_t a_step = ra == 2 ? 0 : m * k;
  const int64_t b_step = rb == 2 ? 0 : k * n;
  if (ra > 2 && rb == 2 && !transpose_a) {
    m *= batch;
    batch = 1;
    a_step = 0;
  }
  const int64_t lda = transpose_a ? m : k;
  const int64_t ldb = transpose_b ? k : n;

  absl::StatusOr<DeviceValue> out = Allocate(node.type);
  if (!out.ok()) return out.status();
  if (m == 0 || n == 0 || batch == 0) return out;
  if (k == 0) {
    if (absl::Status s = CudaStatus(cudaMemsetAsync(out->data(), 0,
                                                    static_cast<size_t>(node.type.num_bytes()),
                                                    stream),
                                    "cudaMemsetAsync");
        !s.ok()) {
      return s;
    }
    return out;
  }
  constexpr int64_t kIntMax = std::numeric_limits<int>::max();
  if (m > kIntMax || n > kIntMax || k > kIntMax || batch > kIntMax) {
    return Unimplemented(node, "a GEMM extent beyond the int range is not supported on the GPU");
  }
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: cuBLAS
  // gets the operands swapped, each with its row-major leading dimension.
  const cublasOperation_t op_a = transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const float alpha = 1.0f;
  const float beta = 0.0f;
  if (options.precision != Precision::kBf16) {
    if (absl::Status s = CublasStatus(
            *blas,
            blas->sgemm_strided_batched(cublas, op_b, op_a, static_cast<int>(n), static_cast<int>(m),
                                      static_cast<int>(k), &alpha, b.f32(), static_cast<int>(ldb),
                                      b_step, a.f32(), static_cast<int>(lda), a_step, &beta,
                                      out->mutable_f32(), static_cast<int>(n), m * n,
                                      static_cast<int>(batch)),
            "cublasSgemmStridedBatched");
        !s.ok()) {
      return s;
    }
    return out;
  }
  // bf16: both operands rounded to bf16 on the device, f32 accumulation.
  absl::StatusOr<Buffer> a16 = AllocateBytes(a.type.num_elements() * 2);
  if (!a16.ok()) return a16.status();
  absl::StatusOr<Buffer> b16 = AllocateBytes(b.type.num_elements() * 2);
  if (!b16.ok()) return b16.status();
  if (absl::Status s = CudaStatus(
          kernels::LaunchToBf16(a.f32(), DataOf(*a16), a.type.num_elements(), stream),
          "ToBf16 launch");
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CudaStatus(
          kernels::LaunchToBf16(b.f32(), DataOf(*b16), b.type.num_elements(), stream),
          "ToBf16 launch");
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CublasStatus(
          *blas,
          blas->gemm_strided_batched_ex(cublas, op_b, op_a, static_cast<int>(n), static_cast<int>(m),
                                     static_cast<int>(k), &alpha, DataOf(*b16), CUDA_R_16BF,
                                     static_cast<int>(ldb), b_step, DataOf(*a16), CUDA_R_16BF,
                                     static_cast<int>(lda), a_step, &beta, out->data(),
                                     CUDA_R_32F, static_cast<int>(n), m * n,
                                     static_cast<int>(batch), CUBLAS_COMPUTE_32F,
                                     CUBLAS_GEMM_DEFAULT),
          "cublasGemmStridedBatchedEx");
      !s.ok()) {
    return s;
  }
  return out;
}

absl::StatusOr<DeviceValue> CudaGraphRunner::Impl::RowWise(
    ir::ValueId id, const ir::Node& node, const NodePlan& plan, const std::vector<const DeviceValue*>& operands) {
  absl::StatusOr<DeviceValue> out = Allocate(node.type);
  if (!out.ok()) return out.status();
  const Shape& shape = operands[0]->type.shape;
  const int64_t length = shape.empty() ? 1 : shape.back();
  const int64_t rows = shape.empty() ? 1 : Product(shape, 0, shape.size() - 1);
  const float* x = operands[0]->f32();
  const float* second = operands.size() > 1 ? operands[1]->f32() : nullptr;
  float* result = out->mutable_f32();
  cudaError_t error = cudaSuccess;
  switch (node.op) {
    case OpKind::kSoftmax:
      error = kernels::LaunchRows(kernels::RowOp::kSoftmax, x, nullptr, result, rows, length,
                                  stream);
      break;
    case OpKind::kLogSoftmax:
      error = kernels::LaunchRows(kernels::RowOp::kLogSoftmax, x, nullptr, result, rows, length,
                                  stream);
      break;
    case OpKind::kSoftmaxGrad:
      error = kernels::LaunchRows(kernels::RowOp::kSoftmaxGrad, x, second, result, rows, length,
                                  stream);
      break;
    case OpKind::kLogSoftmaxGrad:
      error = kernels::LaunchRows(kernels::RowOp::kLogSoftmaxGrad, x, second, result, rows,
                                  length, stream);
      break;
    case OpKind::kNormalize:
    case OpKind::kLayerNorm:
    case OpKind::kNormalizeGrad: {
      const float eps = plan.attributes.eps;
      kernels::NormOp op = kernels::NormOp::kNormalize;
      if (node.op == OpKind::kLayerNorm) op = kernels::NormOp::kLayerNorm;
      if (node.op == OpKind::kNormalizeGrad) op = kernels::NormOp::kNormalizeGrad;
      const float* beta = node.op == OpKind::kLayerNorm ? operands[2]->f32() : nullptr;
      error = kernels::LaunchNormalization(op, x, second, beta, result, rows, length, eps, stream);
      break;
    }
    case OpKind::kCausalMask: {
      const int64_t matrix_rows = shape[shape.size() - 2];
      const int64_t matrices = Product(shape, 0, shape.size() - 2);
      error = kernels::LaunchCausalMask(x, result, matrices, matrix_rows, length,
                                        plan.attributes.fill,
                                        stream);
      break;
    }
    case OpKind::kRotary: {
      const int64_t positions = shape[shape.size() - 2];
      const int32_t* given = nullptr;
      if (operands.size() > 1) {
        // A position's angle needs no bound but 0 below it.
        if (absl::Status s = CheckRange(id, *operands[1], std::numeric_limits<int32_t>::max(), "position");
            !s.ok()) {
          return s;
        }
        given = operands[1]->i32();
      }
      error = kernels::LaunchRotary(x, given, result, Product(shape, 0, shape.size() - 2), positions, length,
                                    plan.attributes.theta, plan.attributes.inverse,
                                    stream);
      break;
    }
    case OpKind::kCrossEntropy:
    case OpKind::kCrossEntropyGrad: {
      // logits [rows, length], labels [rows]; the check runs first so its
      // answer covers exactly the labels this kernel reads.
      const DeviceValue& labels = *operands[1];
      if (absl::Status s = CheckRange(id, labels, length, "label"); !s.ok()) return s;
      if (node.op == OpKind::kCrossEntropy) {
        error = kernels::LaunchCrossEntropy(x, labels.i32(), result, rows, length, stream);
      } else {
        error = kernels::LaunchCrossEntropyGrad(x, labels.i32(), operands[2]->f32(), result, rows,
                                                length, stream);
      }
      break;
    }
    default:
      return absl::InternalError(
          absl::StrCat("CudaGraphRunner: ", ir::OpName(node.op), " is not row-wise"));
  }
  if (absl::Status s = CudaStatus(error, "row kernel launch"); !s.ok()) return s;
  return out;
}

absl::StatusOr<DeviceValue> CudaGraphRunner::Impl::Embedding(
    ir::ValueId id, const ir::Node& node, const std::vector<const DeviceValue*>& operands) {
  absl::StatusOr<DeviceValue> out = Allocate(node.type);
  if (!out.ok()) return out.status();
  cudaError_t error = cudaSuccess;
  if (node.op == OpKind::kEmbedding) {
    const DeviceValue& table = *operands[0];
    const DeviceValue& ids = *operands[1];
    const int64_t num_rows = table.type.shape[0];
    const int64_t width = table.type.shape[1];
    if (absl::Status s = CheckRange(id, ids, num_rows, "id"); !s.ok()) return s;
    error = kernels::LaunchEmbedding(table.f32(), ids.i32(), out->mutable_f32(),
                                     ids.type.num_elements(), num_rows, width, stream);
  } else {
    const DeviceValue& ids = *operands[0];
    const DeviceValue& dy = *operands[1];
    const int64_t num_rows = node.type.shape[0];
    const int64_t width = node.type.shape[1];
    const int64_t positions = ids.type.num_elements();
    if (positions > std::numeric_limits<int32_t>::max()) {
      return Unimplemented(node, absl::StrCat(positions, " ids (the sort takes at most 2^31 - 1)"));
    }
    if (absl::Status s = CheckRange(id, ids, num_rows, "id"); !s.ok()) return s;
    // Freed in stream order after the launch, like any value.
    absl::StatusOr<Buffer> scratch =
        AllocateBytes(static_cast<int64_t>(kernels::EmbeddingGradScratchBytes(positions)));
    if (!scratch.ok()) return scratch.status();
    error = kernels::LaunchEmbeddingGrad(ids.i32(), dy.f32(), out->mutable_f32(), positions, num_rows, width,
                                         DataOf(*scratch), stream);
  }
  if (absl::Status s = CudaStatus(error, "embedding launch"); !s.ok()) return s;
  return out;
}

absl::StatusOr<DeviceValue> CudaGraphRunner::Impl::Attention(ir::ValueId id, const ir::Node& node,
                                                             const NodePlan& plan,
                                                             const std::vector<const DeviceValue*>& operands) {
  absl::StatusOr<DeviceValue> out = Allocate(node.type);
  if (!out.ok()) return out.status();
  const ir::Shape& q = operands[0]->type.shape;
  const int64_t batch = q[0], heads = q[1], seq = q[2], width = q[3];
  const int64_t kv_heads = operands[1]->type.shape[1], keys = operands[1]->type.shape[2];
  const float* k = operands[1]->f32();
  const float* v = operands[2]->f32();
  cudaError_t error = cudaSuccess;
  if (node.op == OpKind::kAttention) {
    const int32_t* positions = nullptr;
    if (operands.size() > 3) {  // queries against a cache: each reads keys up to its position
      if (absl::Status s = CheckRange(id, *operands[3], keys, "position"); !s.ok()) return s;
      positions = operands[3]->i32();
    }
    error = kernels::LaunchAttention(operands[0]->f32(), k, v, positions, out->mutable_f32(), batch, heads, kv_heads,
                                     seq, keys, width, plan.attributes.scale, stream);
  } else {
    // Freed in stream order after the launch, like any value.
    absl::StatusOr<Buffer> scratch =
        AllocateBytes(static_cast<int64_t>(kernels::AttentionGradScratchBytes(batch * heads * seq)));
    if (!scratch.ok()) return scratch.status();
    float* dq = out->mutable_f32();
    float* dk = dq + operands[0]->type.num_elements();
    float* dv = dk + operands[1]->type.num_elements();
    error = kernels::LaunchAttentionGrad(operands[0]->f32(), k, v, operands[3]->f32(), dq, dk, dv, batch, heads,
                                         kv_heads, seq, width, plan.attributes.scale, DataOf(*scratch), stream);
  }
  if (absl::Status s = CudaStatus(error, "attention launch"); !s.ok()) return s;
  return out;
}

absl::StatusOr<DeviceValue> CudaGraphRunner::Impl::Evaluate(
    ir::ValueId id, const ir::Node& node, const NodePlan& plan, const std::vector<const DeviceValue*>& operands) {
  for (const DeviceValue* operand : operands) {
    if (!operand->defined()) {
      return absl::InternalError(
          absl::StrCat(ir::OpName(node.op), ": an operand tensor is missing (not computed)"));
    }
  }
  if (plan.through_f32) return EvaluateThroughF32(id, node, plan, operands);
  return Dispatch(id, node, plan, operands);
}

absl::StatusOr<DeviceValue> CudaGraphRunner::Impl::EvaluateThroughF32(
    ir::ValueId id, const ir::Node& node, const NodePlan& plan, const std::vector<const DeviceValue*>& operands) {
  std::vector<DeviceValue> widened(operands.size());
  std::vector<const DeviceValue*> f32_operands = operands;
  for (size_t i = 0; i < operands.size(); ++i) {
    if (operands[i]->type.dtype != DType::kBF16) continue;
    absl::StatusOr<DeviceValue> wide = ConvertTo(node, *operands[i], DType::kF32);
    if (!wide.ok()) return wide.status();
    widened[i] = *std::move(wide);
    f32_operands[i] = &widened[i];
  }
  absl::StatusOr<DeviceValue> result = Dispatch(id, plan.f32_node, plan, f32_operands);
  if (!result.ok() || node.type.dtype != DType::kBF16) return result;
  return ConvertTo(node, *result, DType::kBF16);
}

absl::StatusOr<DeviceValue> CudaGraphRunner::Impl::Dispatch(
    ir::ValueId id, const ir::Node& node, const NodePlan& plan, const std::vector<const DeviceValue*>& operands) {
  switch (ir::Def(node.op).family) {
    case ir::OpFamily::kSource:
      if (node.op == OpKind::kInput) {
        return absl::InternalError("input: not a kernel; its value is supplied by whoever runs the graph");
      }
      return Constant(node, plan);
    case ir::OpFamily::kConvert:
      return Convert(node, *operands[0]);
    case ir::OpFamily::kUnary:
    case ir::OpFamily::kBinary:
    case ir::OpFamily::kSelect:
      return Elementwise(node, plan, operands);
    case ir::OpFamily::kReduction:
      return Reduce(node, plan, *operands[0]);
    case ir::OpFamily::kDataMovement:
      return DataMovement(node, plan, operands);
    case ir::OpFamily::kMatMul:
      return MatMul(node, plan, *operands[0], *operands[1]);
    case ir::OpFamily::kRowwise:
    case ir::OpFamily::kNormalization:
    case ir::OpFamily::kCrossEntropy:
    case ir::OpFamily::kRotary:
      return RowWise(id, node, plan, operands);
    case ir::OpFamily::kEmbedding:
      return Embedding(id, node, operands);
    case ir::OpFamily::kAttention:
      return Attention(id, node, plan, operands);
  }
  return absl::InternalError(
      absl::StrCat("CudaGraphRunner: unknown op kind ", static_cast<int>(node.op)));
}

absl::StatusOr<std::unique_ptr<CudaExecutable>> CudaGraphRunner::Impl::Compile(const ir::Graph& graph) {
  auto compiled = std::make_unique<CudaExecutable::Compiled>();
  compiled->graph = graph;
  // Every node is needed, as in cpu::RunGraph without wanted outputs.
  compiled->plan = ir::PlanGraph(compiled->graph);
  compiled->nodes.resize(static_cast<size_t>(graph.size()));
  std::vector<TensorType> types;
  for (ir::ValueId id = 0; id < graph.size(); ++id) {
    const ir::Node& node = graph.node(id);
    types.clear();
    for (ir::ValueId operand : node.operands) types.push_back(graph.type(operand));
    absl::StatusOr<NodePlan> plan = PlanNode(node, types);
    if (!plan.ok()) {
      return absl::Status(plan.status().code(),
                          absl::StrCat(ir::DescribeValue(graph, id), ": ", plan.status().message()));
    }
    compiled->nodes[static_cast<size_t>(id)] = *std::move(plan);
  }
  return std::unique_ptr<CudaExecutable>(new CudaExecutable(std::move(compiled)));
}

absl::StatusOr<DeviceTensorMap> CudaGraphRunner::Impl::Run(const CudaExecutable::Compiled& executable,
                                                           const DeviceTensorMap& inputs) {
  checks.clear();
  if (absl::Status s = CudaStatus(cudaSetDevice(options.device), "cudaSetDevice"); !s.ok()) {
    return s;
  }
  const ir::Graph& graph = executable.graph;
  const int32_t count = graph.size();
  const std::vector<int32_t>& last_use = executable.plan.last_use;

  std::vector<DeviceValue> values(count);
  std::vector<const DeviceValue*> operands;
  for (ir::ValueId id = 0; id < count; ++id) {
    const ir::Node& node = graph.node(id);
    if (node.op == OpKind::kInput) {
      const std::string& name = executable.nodes[static_cast<size_t>(id)].attributes.input_name;
      auto it = inputs.find(name);
      if (absl::Status status = ir::CheckInputValue(graph, id, it == inputs.end() ? nullptr : &it->second.type);
          !status.ok()) {
        return Fail(graph, status);
      }
      const backends::DeviceTensor& input = it->second;
      if (input.defined() && &input.storage->memory() != memory.get()) {
        return Fail(graph, absl::InvalidArgumentError(absl::StrCat("graph @", graph.name(), ": input '", name,
                                                                   "' is not in ", memory->name(), "'s memory")));
      }
      values[id] = DeviceValue{node.type, input.storage};  // missing stays missing, as on the CPU
    } else {
      operands.clear();
      for (ir::ValueId operand : node.operands) operands.push_back(&values[operand]);
      if (absl::Status s = MarkNode(id, false); !s.ok()) return Fail(graph, s);
      absl::StatusOr<DeviceValue> result = Evaluate(id, node, executable.nodes[static_cast<size_t>(id)], operands);
      if (!result.ok()) {
        return Fail(graph, absl::Status(result.status().code(),
                                        absl::StrCat(ir::DescribeValue(graph, id), ": ",
                                                     result.status().message())));
      }
      if (absl::Status s = MarkNode(id, true); !s.ok()) return Fail(graph, s);
      values[id] = *std::move(result);
    }
    for (ir::ValueId operand : node.operands) {
      if (last_use[operand] == id) values[operand] = DeviceValue();
    }
    if (last_use[id] == -1) values[id] = DeviceValue();
  }

  DeviceTensorMap results;
  for (const ir::GraphOutput& output : graph.outputs()) {
    const DeviceValue& value = values[output.value];
    results[output.name] = backends::DeviceTensor{value.type, value.buffer};
  }
  values.clear();
  if (absl::Status s = FlushChecks(graph); !s.ok()) return s;
  if (absl::Status s = CollectNodeTimes(graph); !s.ok()) return s;
  return results;
}

CudaGraphRunner::CudaGraphRunner(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

CudaGraphRunner::~CudaGraphRunner() = default;

absl::StatusOr<std::unique_ptr<CudaGraphRunner>> CudaGraphRunner::Create(const RunnerOptions& options) {
  absl::StatusOr<std::unique_ptr<CudaDeviceMemory>> memory = CudaDeviceMemory::Create(options.device);
  if (!memory.ok()) return memory.status();
  auto impl = std::make_unique<Impl>(options, *std::move(memory));
  if (absl::Status s = impl->Init(); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("CUDA device ", options.device, ": ", s.message()));
  }
  return std::unique_ptr<CudaGraphRunner>(new CudaGraphRunner(std::move(impl)));
}

CudaDeviceMemory& CudaGraphRunner::memory() const { return *impl_->memory; }

absl::StatusOr<std::unique_ptr<CudaExecutable>> CudaGraphRunner::Compile(const ir::Graph& graph) {
  return impl_->Compile(graph);
}

absl::StatusOr<DeviceTensorMap> CudaGraphRunner::Run(const CudaExecutable& executable, const DeviceTensorMap& inputs) {
  return impl_->Run(*executable.compiled_, inputs);
}

absl::StatusOr<DeviceTensorMap> CudaGraphRunner::Run(const ir::Graph& graph, const DeviceTensorMap& inputs) {
  absl::StatusOr<std::unique_ptr<CudaExecutable>> executable = impl_->Compile(graph);
  if (!executable.ok()) return executable.status();
  return impl_->Run(*(*executable)->compiled_, inputs);
}

absl::StatusOr<ir::TensorMap> CudaGraphRunner::RunFromHost(const ir::Graph& graph, const ir::TensorMap& inputs) {
  DeviceTensorMap device_inputs;
  for (const auto& [name, tensor] : inputs) {
    if (!tensor.defined()) {
      device_inputs[name] = backends::DeviceTensor{tensor.type(), nullptr};
      continue;
    }
    absl::StatusOr<backends::DeviceTensor> uploaded = backends::CopyToDevice(*impl_->memory, tensor, impl_->Deadline());
    if (!uploaded.ok()) {
      return absl::Status(uploaded.status().code(), absl::StrCat("graph @", graph.name(), " input '", name,
                                                                 "': ", uploaded.status().message()));
    }
    device_inputs[name] = *std::move(uploaded);
  }
  absl::StatusOr<DeviceTensorMap> outputs = Run(graph, device_inputs);
  if (!outputs.ok()) return outputs.status();
  ir::TensorMap results;
  for (const auto& [name, tensor] : *outputs) {
    if (!tensor.defined()) {
      results[name] = ir::HostTensor();
      continue;
    }
    // Waits for the kernels before it: a fault during execution surfaces here.
    absl::StatusOr<ir::HostTensor> host = backends::CopyToHost(*impl_->memory, tensor, impl_->Deadline());
    if (!host.ok()) {
      return absl::Status(host.status().code(), absl::StrCat("graph @", graph.name(), " output '", name, "': ",
                                                             host.status().message()));
    }
    results[name] = *std::move(host);
  }
  // Every kernel has finished (also for graphs without outputs).
  if (absl::Status s = impl_->memory->SynchronizeStream(impl_->Deadline()); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("graph @", graph.name(), ": ", s.message()));
  }
  return results;
}

void CudaGraphRunner::set_node_times(std::vector<double>* node_ms) { impl_->node_ms = node_ms; }

}  // namespace tandem::cuda
