// Appends typed nodes to a Graph, keeping the first error.
//
// Every op goes through Add(), which runs the op's shape rule. A rule that
// fails records InvalidArgument naming the op and the source location
// ("examples/gpt.cc:42: matmul: contracting dimensions differ ...") and
// returns kInvalidValue; any later op with an invalid operand also returns
// kInvalidValue without a new error, so a trace stops at its first mistake.
// The builder sets every new node's stage and phase from its current ones.
// Does not own the graph. Not thread-safe.
#ifndef TANDEM_IR_GRAPH_BUILDER_H_
#define TANDEM_IR_GRAPH_BUILDER_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "ir/graph.h"

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
  ValueId AddConstant(double value, TensorType type, const SourceLocation& location);

  // Records an error found outside the shape rules (e.g. by the tracer),
  // unless one is recorded already.
  void Fail(const SourceLocation& location, absl::string_view message);

  const absl::Status& status() const { return status_; }
  bool ok() const { return status_.ok(); }

 private:
  ValueId Append(OpKind op, std::vector<ValueId> operands, Attributes attributes, TensorType type,
                 const SourceLocation& location);

  Graph* graph_;
  int32_t stage_ = 0;
  Phase phase_ = Phase::kForward;
  std::optional<SourceLocation> location_override_;
  absl::Status status_;
};

}  // namespace tandem::ir

#endif  // TANDEM_IR_GRAPH_BUILDER_H_
