// A graph: SSA values defined by nodes in program order.
//
// Value i is the result of nodes()[i]; an operand always names an earlier
// value, so program order is a topological order. Each node records the
// pipeline stage it belongs to, its phase (forward, input-gradient or
// weight-gradient backward, or optimizer update) and the user's source
// location that created it. Value type; not synchronized.
#ifndef TANDEM_IR_GRAPH_H_
#define TANDEM_IR_GRAPH_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "ir/attributes.h"
#include "ir/dtype.h"
#include "ir/op.h"

namespace tandem::ir {

using ValueId = int32_t;

// Which part of a training step a node belongs to. Zero-bubble schedules run
// the input-gradient (I) and weight-gradient (W) parts of a stage's backward
// as separate tasks; a plain backward (B) runs both.
enum class Phase : uint8_t { kForward, kBackwardInput, kBackwardWeight, kUpdate };

char PhaseLetter(Phase phase);  // 'F', 'I', 'W', 'U'
std::optional<Phase> PhaseFromLetter(char letter);

// Where the user's code created a node: "examples/gpt.cc:42". `file` keeps
// the last two components of the path, enough to find the file and stable
// across build directories.
struct SourceLocation {
  std::string file;
  int32_t line = 0;

  bool known() const { return line > 0; }
  std::string ToString() const;  // "file:line", or "<unknown>"
  friend bool operator==(const SourceLocation&, const SourceLocation&) = default;
};

// Builds a SourceLocation from a full path, keeping its last two components.
SourceLocation MakeSourceLocation(absl::string_view path, int32_t line);

struct Node {
  OpKind op = OpKind::kInput;
  std::vector<ValueId> operands;
  Attributes attributes;
  TensorType type;
  int32_t stage = 0;
  Phase phase = Phase::kForward;
  SourceLocation location;
  friend bool operator==(const Node&, const Node&) = default;
};

// What an input node holds: its "role" attribute, which the text format
// keeps as a word ("parameter", ...). Compare roles through these, never as
// strings.
enum class InputRole : uint8_t {
  kData,            // "data": a microbatch's inputs
  kLabel,           // "label": its labels
  kParameter,       // "parameter": a trained tensor
  kOptimizerState,  // "optimizer_state": Adam's moments, a stashed version
  kAccumulator,     // "accumulator": a gradient summed over microbatches
  kGradient,        // "gradient": one microbatch's gradient
  kStep,            // "step": the optimizer's step number
  kGradientNorm,    // "gradient_norm": a stage's sum of squared gradients (clipping by the global norm)
  kCache,           // "cache": a forward step's cache before the step (a KV cache; ir/train_step.h)
};
absl::string_view InputRoleName(InputRole role);
// True when `node` is an input of role `role`.
bool HasRole(const Node& node, InputRole role);

// A named result of a graph.
struct GraphOutput {
  std::string name;
  ValueId value = 0;
  friend bool operator==(const GraphOutput&, const GraphOutput&) = default;
};

class Graph {
 public:
  Graph() = default;
  explicit Graph(std::string name) : name_(std::move(name)) {}

  const std::string& name() const { return name_; }
  const std::vector<Node>& nodes() const { return nodes_; }
  const Node& node(ValueId id) const { return nodes_.at(id); }
  // For passes that rewrite node fields in place (e.g. autodiff's phases).
  Node& mutable_node(ValueId id) { return nodes_.at(id); }
  const TensorType& type(ValueId id) const { return nodes_.at(id).type; }
  int32_t size() const { return static_cast<int32_t>(nodes_.size()); }

  // Appends a node and returns its value. The caller (the tracer, the
  // parser) is responsible for its type being the one its shape rule gives;
  // Verify() checks it.
  ValueId Append(Node node);

  const std::vector<GraphOutput>& outputs() const { return outputs_; }
  void AddOutput(std::string name, ValueId value) { outputs_.push_back({std::move(name), value}); }
  std::optional<ValueId> FindOutput(absl::string_view name) const;

  // The input nodes, in program order, and lookup by their `name` attribute.
  std::vector<ValueId> Inputs() const;
  std::optional<ValueId> FindInput(absl::string_view name) const;

  friend bool operator==(const Graph&, const Graph&) = default;

 private:
  std::string name_;
  std::vector<Node> nodes_;
  std::vector<GraphOutput> outputs_;
};

// How errors name value `id` of `graph`: "%12 = embedding at
// examples/gpt.cc:40" (the location where known), as every evaluator and
// verifier of graphs says it.
std::string DescribeValue(const Graph& graph, ValueId id);

}  // namespace tandem::ir

#endif  // TANDEM_IR_GRAPH_H_
