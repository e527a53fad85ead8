// Appends typed nodes to a Graph, keeping the first error.
//
// Every op goes through Add(), which runs the op's shape rule. A rule that
// fails records InvalidArgument naming the op and the source location
// ("examples/gpt.cc:42: matmul: contracting dimensions differ ...") and
// returns kInvalidValue; any later op with an invalid operand also returns
// kInvalidValue without a new error, so a trace stops at its first mistake.
// The builder sets every new node's stage and phase from its current ones.
//
// It also keeps the stage graph of a forward trace (ir/stage_graph.h):
// stage 0 exists from the start, and OpenStage adds a stage fed by given
// ones (pipeline_yield feeds the new stage from the one it closes). A
// forward op reading a forward value of another stage that does not reach
// its own is an error at the op's location: the stage markers then do not
// describe the model's dataflow. Stages set with set_stage() alone (the
// backward, the update, hand-built graphs) are not checked.
// Does not own the graph. Not thread-safe.
#ifndef TANDEM_IR_GRAPH_BUILDER_H_
#define TANDEM_IR_GRAPH_BUILDER_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "ir/graph.h"
#include "ir/stage_graph.h"

namespace tandem::ir {

inline constexpr ValueId kInvalidValue = -1;

class GraphBuilder {
 public:
  explicit GraphBuilder(Graph* graph) : graph_(graph) {}
  GraphBuilder(const GraphBuilder&) = delete;
  GraphBuilder& operator=(const GraphBuilder&) = delete;

  Graph& graph() { return *graph_; }
  const Graph& graph() const { return *graph_; }

  int32_t stage() const { return stage_; }
  void set_stage(int32_t stage) { stage_ = stage; }

  // The stages opened so far (at least 1) and the graph between them.
  int32_t num_stages() const { return static_cast<int32_t>(predecessors_.size()); }
  StageGraph stage_graph() const { return StageGraph::FromPredecessors(predecessors_); }
  // Opens a stage fed by `predecessors` (earlier stages), makes it current
  // and returns it.
  int32_t OpenStage(std::vector<int32_t> predecessors);
  const std::vector<int32_t>& predecessors(int32_t stage) const { return predecessors_.at(stage); }
  // Gives the current stage other predecessors; only while it has no ops.
  void SetPredecessors(std::vector<int32_t> predecessors);
  // Whether an op other than an input or a constant was added to `stage`.
  bool StageHasOps(int32_t stage) const;
  // How errors name a stage: "stage 2" plus, when set, " (" label ")".
  void set_stage_label(int32_t stage, std::string label);
  std::string StageName(int32_t stage) const;
  Phase phase() const { return phase_; }
  void set_phase(Phase phase) { phase_ = phase; }
  // While set, new nodes get this location instead of the one passed in:
  // backward ops carry the location of the forward op they differentiate.
  void set_location_override(std::optional<SourceLocation> location) {
    location_override_ = std::move(location);
  }

  // Appends `op`; returns its value or kInvalidValue (see above).
  ValueId Add(OpKind op, std::vector<ValueId> operands, Attributes attributes,
              const SourceLocation& location);
  ValueId AddInput(const std::string& name, const std::string& role, TensorType type,
                   const SourceLocation& location);
  ValueId AddInput(const std::string& name, InputRole role, TensorType type, const SourceLocation& location) {
    return AddInput(name, std::string(InputRoleName(role)), std::move(type), location);
  }
  ValueId AddConstant(double value, TensorType type, const SourceLocation& location);

  // Records an error found outside the shape rules (e.g. by the tracer),
  // unless one is recorded already.
  void Fail(const SourceLocation& location, absl::string_view message);

  const absl::Status& status() const { return status_; }
  bool ok() const { return status_.ok(); }

 private:
  ValueId Append(OpKind op, std::vector<ValueId> operands, Attributes attributes, TensorType type,
                 const SourceLocation& location);
  // OK, or the error for a forward op of the current stage reading `operand`.
  absl::Status CheckStageRead(OpKind op, ValueId operand);

  Graph* graph_;
  int32_t stage_ = 0;
  Phase phase_ = Phase::kForward;
  std::optional<SourceLocation> location_override_;
  absl::Status status_;
  std::vector<std::vector<int32_t>> predecessors_ = {{}};  // by stage
  std::vector<int64_t> ops_;                               // by stage: ops added
  std::vector<std::string> stage_labels_;                  // by stage; may be shorter
};

}  // namespace tandem::ir

#endif  // TANDEM_IR_GRAPH_BUILDER_H_
