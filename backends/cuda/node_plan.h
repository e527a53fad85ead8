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
