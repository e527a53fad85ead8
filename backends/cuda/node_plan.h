// The CUDA graph runner's plan of a node (cuda_graph_runner.cu): what its
// launches need that the node and its operands' static types decide, made
// once when a graph is compiled: the operands' type check (the shape rules,
// so no kernel can index out of bounds on a graph the verifier would
// reject), the bf16 route through the f32 kernels, the typed attributes,
// and the index maps and reduction plans of cuda_kernels.cuh. Plain host
// code; the runner's launches (cuda_node_launches.cu) read it.
#ifndef TANDEM_BACKENDS_CUDA_NODE_PLAN_H_
#define TANDEM_BACKENDS_CUDA_NODE_PLAN_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "backends/cuda/cuda_kernels.cuh"
#include "ir/elementwise_runs.h"
#include "ir/graph.h"

namespace tandem::cuda::runner {

using ir::DType;
using ir::OpKind;
using ir::Shape;
using ir::TensorType;

// What one node's launch needs that its static shapes decide.
struct NodePlan {
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

// What `node`'s launches need that its operands' static types decide.
absl::StatusOr<NodePlan> PlanNode(const ir::Node& node, const std::vector<TensorType>& types);

// The runs of elementwise nodes the runner launches as one kernel each
// (kernels::LaunchFused): f32 and bf16 of any size, a bias repeated along
// leading axes, within the kernel's bounds on steps and inputs.
inline constexpr ir::ElementwiseRunRules kFusedRunRules{.min_elements = 1,
                                                        .bf16 = true,
                                                        .bias = true,
                                                        .max_members = kernels::kMaxFusedSteps,
                                                        .max_inputs = kernels::kMaxFusedInputs};

// A matmul as one strided-batched GEMM in cuBLAS's column-major
// convention: row-major C = op(A) op(B) is column-major C^T = op(B)^T
// op(A)^T, so cuBLAS gets b as its first operand and a as its second, each
// with its row-major leading dimension (ldb, lda), and writes C with
// leading dimension n, m * n elements per batch entry. A rank-2 operand is
// reused for every batch entry (its step 0); when it is b and a is not
// transposed, a's batch axes fold into m instead: one GEMM, as the
// reference does. What cuBLAS's call (Impl::MatMul) and cuBLASLt's layouts
// (the bias epilogue) are both made from.
struct GemmShape {
  int64_t m = 0, n = 0, k = 0, batch = 0;
  int64_t lda = 0, ldb = 0;
  int64_t a_step = 0, b_step = 0;  // elements between batch entries
  bool transpose_a = false, transpose_b = false;
};
GemmShape PlanGemm(const NodePlan::Attributes& attributes, const Shape& a, const Shape& b, const Shape& out);

// A matmul whose value only a bias add reads, computed as one cuBLASLt
// GEMM whose epilogue adds the bias as it stores the add's value
// (CUBLASLT_EPILOGUE_BIAS); the matmul's own value is never stored.
struct BiasEpilogue {
  ir::ValueId matmul = -1;
  ir::ValueId add = -1;
  ir::ValueId bias = -1;
};
struct BiasEpilogues {
  std::vector<BiasEpilogue> pairs;  // in program order
  // By value id: the index into `pairs` of the matmul's (-1: none).
  std::vector<int32_t> of_matmul;
};

// The matmul M and add A = add(M, bias) or add(bias, M) of `graph`, among
// the nodes `needed` marks, where M and A are f32 of one shape, the bias an
// f32 [n] for M's last extent n, computed before M, and A is M's only
// reader (once; M no output). Only the bias epilogue: GELU is left to the
// fused elementwise runs, because cuBLASLt does not document which GELU its
// epilogue computes and Tandem's is the tanh approximation of its own
// kernel (kernels/elementwise.cu); the bias gradient (BGRADB) is left to
// the reductions, because cuBLASLt does not document its summation order.
BiasEpilogues PlanBiasEpilogues(const ir::Graph& graph, const std::vector<bool>& needed);

// A run's launch, less its pointers (Run fills in the inputs' data and the
// stored members' storage).
struct RunPlan {
  std::vector<ir::ValueId> members;
  // The values from outside the run, in the program's input order.
  std::vector<ir::ValueId> inputs;
  // By member: whether its values are stored (read after the run, or an
  // output); the others are never allocated.
  std::vector<bool> stored;
  int64_t elements = 0;
  kernels::FusedProgram program;
};

// The launch of the run `members` (ir::FindElementwiseRuns under
// kFusedRunRules) of `graph`, whose values are released as `last_use` says.
RunPlan PlanRun(const ir::Graph& graph, const std::vector<ir::ValueId>& members, const std::vector<int32_t>& last_use);

// Unimplemented, naming the node's op: "<op>: <what>".
absl::Status Unimplemented(const ir::Node& node, absl::string_view what);

// The strides of a row-major tensor of `shape`, in elements.
std::vector<int64_t> RowMajorStrides(const Shape& shape);

// The product of shape[begin, end).
int64_t Product(const Shape& shape, size_t begin, size_t end);

// A StridedMap over `extents` with strides[operand][axis], with extent-1
// axes dropped and each axis merged into its outer neighbour wherever every
// operand steps across both as over one axis (same-shape operands collapse
// to one axis). Unimplemented beyond kernels::kMaxRank merged axes.
absl::StatusOr<kernels::StridedMap> MakeStridedMap(const ir::Node& node,
                                                   const std::vector<int64_t>& extents,
                                                   const std::vector<std::vector<int64_t>>& strides);

// The NumPy broadcast of `inputs` to `out`: stride 0 along missing and
// extent-1 axes. The shape rules have checked that the shapes broadcast.
absl::StatusOr<kernels::StridedMap> MakeBroadcastMap(const ir::Node& node, const Shape& out,
                                                     const std::vector<const Shape*>& inputs);

// The conversion kernel's op from `from` to `to`, or nullopt for a pair it
// has none for.
std::optional<kernels::ConvertOp> ConvertOpOf(DType from, DType to);

}  // namespace tandem::cuda::runner

#endif  // TANDEM_BACKENDS_CUDA_NODE_PLAN_H_
