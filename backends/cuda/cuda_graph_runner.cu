// CudaGraphRunner: walks a graph in program order like cpu::RunGraph and
// turns each node into a kernel launch (cuda_kernels.cuh) or a cuBLAS call on
// the runner's stream; a run of elementwise nodes into one launch (at its
// last member), and a matmul with its bias add into one cuBLASLt GEMM (at
// the matmul; the add launches nothing).
//
// Host-side work per node: check the operand types against the node (the
// shape rules, ir/shape_rules.h, so no kernel can index out of bounds on a
// graph the verifier would reject; planned once per graph, node_plan.h),
// allocate the result from the runner's device memory (a stream-ordered
// pool), compute shapes and strides, launch (cuda_node_launches.cu, an op
// family each). Nothing waits for the device but the read-back of range
// checks, and with deferred checks not even that.
//
// Data-dependent errors (ids and labels out of range) are found on the
// device by a range-check kernel that writes the first bad position into a
// small result buffer; the compute kernel itself tolerates bad ids. The
// results are read back, in program order, when the run synchronizes (at
// the end, or before reporting a host-side error), so the error reported is
// the one cpu::RunGraph reports: the earliest failing node's. With deferred
// checks (an executor's device) a run does not synchronize: each result is
// copied asynchronously into pinned staging and Settle reads them all once,
// at the step's end, naming the earliest failed run.
//
// Memory: each value owns a private allocation of the runner's
// CudaDeviceMemory (cudaMallocFromPoolAsync on its stream), shared by reshape
// and pipeline_yield results, and freed with cudaFreeAsync when its last
// holder goes: the executor's last-use rule, without waiting for the kernels
// that read it.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "backends/cuda/cublas_library.h"
#include "backends/cuda/cuda_graph_runner.h"
#include "backends/cuda/cuda_graph_runner_impl.h"
#include "backends/cuda/cuda_kernels.cuh"
#include "backends/cuda/cuda_runtime.h"
#include "backends/cuda/cuda_status.h"
#include "ir/graph_plan.h"
#include "ir/op_def.h"

namespace tandem::cuda {

using runner::ConvertOpOf;
using runner::CublasStatus;
using runner::DataOf;
using runner::DType;
using runner::kCublasWorkspaceBytes;
using runner::MakeBroadcastMap;
using runner::MakeStridedMap;
using runner::OpKind;
using runner::PlanNode;
using runner::Product;
using runner::RowMajorStrides;
using runner::Shape;
using runner::TensorType;
using runner::Unimplemented;

CudaExecutable::CudaExecutable(std::unique_ptr<Compiled> compiled) : compiled_(std::move(compiled)) {}
CudaExecutable::~CudaExecutable() = default;

const ir::ElementwiseRuns& CudaExecutable::fused_runs() const { return compiled_->fused; }

std::vector<std::pair<ir::ValueId, ir::ValueId>> CudaExecutable::bias_epilogues() const {
  std::vector<std::pair<ir::ValueId, ir::ValueId>> pairs;
  for (const runner::BiasEpilogue& pair : compiled_->epilogues.pairs) pairs.emplace_back(pair.matmul, pair.add);
  return pairs;
}

CudaGraphRunner::Impl::~Impl() {
  // Errors cannot be reported from here; the process is shutting the
  // runner down either way. The memory (destroyed after this body) waits
  // for its stream.
  cudaSetDevice(options.device);
  memory->SynchronizeStream(absl::Now() + absl::Seconds(10)).IgnoreError();
  for (void* block : answer_blocks) memory->FreeHostStaging(block);
  for (auto& [id, events] : marks) spare_events.push_back(events);
  for (auto& [start, end] : spare_events) {
    cudaEventDestroy(start);
    cudaEventDestroy(end);
  }
  epilogue_plans.clear();
  if (lt_handle != nullptr) lt->destroy(lt_handle);
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

absl::Status CudaGraphRunner::Impl::DeferChecks(const ir::Graph& graph) {
  const int64_t run = runs_since_settle++;
  std::vector<PendingCheck> pending = std::move(checks);
  checks.clear();
  for (PendingCheck& check : pending) {
    if (answers_used == static_cast<int64_t>(answer_blocks.size()) * kAnswersPerBlock) {
      absl::StatusOr<void*> block =
          memory->AllocateHostStaging(kAnswersPerBlock * static_cast<int64_t>(sizeof(kernels::RangeCheckResult)));
      if (!block.ok()) return block.status();
      answer_blocks.push_back(*block);
    }
    auto* answer = static_cast<kernels::RangeCheckResult*>(answer_blocks[answers_used / kAnswersPerBlock]) +
                   answers_used % kAnswersPerBlock;
    // The device buffer may go at once: its free is ordered after the copy.
    if (absl::Status s = memory->CopyToHostAsync(answer, check.result->address(), sizeof(*answer)); !s.ok()) {
      return s;
    }
    ++answers_used;
    deferred.push_back({run,
                        absl::StrCat(ir::DescribeValue(graph, check.node), ": ",
                                     ir::OpName(graph.node(check.node).op)),
                        check.what, check.limit, answer});
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<backends::DeferredFailure>> CudaGraphRunner::Impl::Settle() {
  std::optional<backends::DeferredFailure> failure;
  if (!deferred.empty()) {
    if (absl::Status s = memory->SynchronizeStream(Deadline()); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("reading back the range checks: ", s.message()));
    }
    for (const DeferredCheck& check : deferred) {
      const auto& answer = *static_cast<const kernels::RangeCheckResult*>(check.answer);
      if (answer.position < 0) continue;
      failure = backends::DeferredFailure{
          check.run, absl::InvalidArgumentError(absl::StrCat(check.where, ": ", check.what, " ", answer.value,
                                                             " at position ", answer.position, " outside [0, ",
                                                             check.limit, ")"))};
      break;
    }
  }
  deferred.clear();
  answers_used = 0;
  runs_since_settle = 0;
  return failure;
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

absl::StatusOr<DeviceValue> CudaGraphRunner::Impl::Evaluate(
    ir::ValueId id, const ir::Node& node, const NodePlan& plan, const std::vector<const DeviceValue*>& operands) {
  for (const DeviceValue* operand : operands) {
    if (!operand->defined()) {
      return absl::InternalError(
          absl::StrCat(ir::OpName(node.op), ": an operand tensor is missing (not computed)"));
    }
  }
  return Dispatch(id, node, plan, operands);
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
  if (options.fuse_elementwise) {
    // A bias add its matmul's GEMM computes is no run's member: a later
    // node reading it (a GELU) takes it as a value from outside its run.
    compiled->epilogues = runner::PlanBiasEpilogues(compiled->graph, compiled->plan.needed);
    std::vector<bool> runs_may_take = compiled->plan.needed;
    for (const runner::BiasEpilogue& pair : compiled->epilogues.pairs) runs_may_take[pair.add] = false;
    compiled->fused = ir::FindElementwiseRuns(compiled->graph, runs_may_take, runner::kFusedRunRules);
    for (const std::vector<ir::ValueId>& members : compiled->fused.runs) {
      compiled->runs.push_back(runner::PlanRun(compiled->graph, members, compiled->plan.last_use));
    }
  } else {
    compiled->fused.role.assign(static_cast<size_t>(graph.size()), ir::ElementwiseRuns::kNotInRun);
    compiled->epilogues.of_matmul.assign(static_cast<size_t>(graph.size()), -1);
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
  // The bias adds their matmul's GEMM has computed (MatMulBias) this run.
  std::vector<bool> computed_by_epilogue(static_cast<size_t>(count), false);
  // Releases what the evaluation of `id` was the last to read.
  auto release = [&](ir::ValueId id) {
    for (ir::ValueId operand : graph.node(id).operands) {
      if (last_use[operand] == id) values[operand] = DeviceValue();
    }
    if (last_use[id] == -1) values[id] = DeviceValue();
  };
  for (ir::ValueId id = 0; id < count; ++id) {
    const ir::Node& node = graph.node(id);
    const int32_t role = executable.fused.role[static_cast<size_t>(id)];
    if (role == ir::ElementwiseRuns::kInsideRun) continue;  // launched with its run's last member
    if (role >= 0) {
      const runner::RunPlan& run = executable.runs[static_cast<size_t>(role)];
      if (absl::Status s = MarkNode(id, false); !s.ok()) return Fail(graph, s);
      if (absl::Status s = EvaluateRun(graph, run, values); !s.ok()) return Fail(graph, s);
      if (absl::Status s = MarkNode(id, true); !s.ok()) return Fail(graph, s);
      for (ir::ValueId member : run.members) release(member);
      continue;
    }
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
    } else if (computed_by_epilogue[static_cast<size_t>(id)]) {
      // A bias add its matmul's GEMM computed: nothing to launch (its
      // time is the matmul's).
    } else {
      operands.clear();
      for (ir::ValueId operand : node.operands) operands.push_back(&values[operand]);
      if (absl::Status s = MarkNode(id, false); !s.ok()) return Fail(graph, s);
      const NodePlan& plan = executable.nodes[static_cast<size_t>(id)];
      // A matmul with its bias add's epilogue: one GEMM sets the add's value
      // and the matmul's own is never read (where cuBLASLt does not take
      // the GEMM, the matmul evaluates as usual and the add after it).
      const auto evaluate = [&]() -> absl::StatusOr<DeviceValue> {
        const int32_t epilogue = executable.epilogues.of_matmul[static_cast<size_t>(id)];
        if (epilogue < 0) return Evaluate(id, node, plan, operands);
        const runner::BiasEpilogue& pair = executable.epilogues.pairs[static_cast<size_t>(epilogue)];
        absl::StatusOr<std::optional<DeviceValue>> fused =
            MatMulBias(node, plan, *operands[0], *operands[1], values[pair.bias], graph.type(pair.add));
        if (!fused.ok()) return fused.status();
        if (!fused->has_value()) return Evaluate(id, node, plan, operands);
        values[pair.add] = **std::move(fused);
        computed_by_epilogue[static_cast<size_t>(pair.add)] = true;
        return DeviceValue();
      };
      absl::StatusOr<DeviceValue> result = evaluate();
      if (!result.ok()) {
        return Fail(graph, absl::Status(result.status().code(),
                                        absl::StrCat(ir::DescribeValue(graph, id), ": ",
                                                     result.status().message())));
      }
      if (absl::Status s = MarkNode(id, true); !s.ok()) return Fail(graph, s);
      values[id] = *std::move(result);  // none for a matmul whose add took its GEMM
    }
    release(id);
  }

  DeviceTensorMap results;
  for (const ir::GraphOutput& output : graph.outputs()) {
    const DeviceValue& value = values[output.value];
    results[output.name] = backends::DeviceTensor{value.type, value.buffer};
  }
  values.clear();
  if (absl::Status s = defer_range_checks ? DeferChecks(graph) : FlushChecks(graph); !s.ok()) return s;
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
  absl::StatusOr<std::optional<backends::DeferredFailure>> failure = impl_->Settle();
  if (!failure.ok()) return failure.status();
  if (failure->has_value()) return (*failure)->status;
  return results;
}

void CudaGraphRunner::set_defer_range_checks(bool on) { impl_->defer_range_checks = on; }

absl::StatusOr<std::optional<backends::DeferredFailure>> CudaGraphRunner::Settle() { return impl_->Settle(); }

void CudaGraphRunner::set_node_times(std::vector<double>* node_ms) { impl_->node_ms = node_ms; }

int64_t CudaGraphRunner::bias_epilogue_launches() const { return impl_->epilogue_launches; }

Bf16Copies CudaGraphRunner::bf16_copies() const {
  Bf16Copies copies{.made = impl_->narrowings};
  for (const auto& [source, copy] : impl_->narrowed) copies.held_bytes += copy.elements * 2;
  return copies;
}

}  // namespace tandem::cuda
