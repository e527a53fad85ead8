// Tracer: what a model function receives to declare its parameters and
// inputs while its forward pass is recorded.
//
//   Tensor Mlp(Tracer& t) {
//     Tensor x = t.Input("x", {ir::DType::kF32, {32, 784}});
//     Tensor w = t.Parameter("w1", {784, 256}, init::Normal(0.02));
//     ...
//     return mean(cross_entropy(logits, t.Label("y", {ir::DType::kI32, {32}})));
//   }
//
// Parameters get deterministic initial values: each initializer's seed is
// derived from the tracer's seed and the parameter's name unless given.
// Owns the graph it records. Not thread-safe.
#ifndef TANDEM_IR_TRACER_H_
#define TANDEM_IR_TRACER_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "ir/graph.h"
#include "ir/graph_builder.h"
#include "ir/tensor.h"
#include "ir/train_step.h"

namespace tandem {

// Initializers for Tracer::Parameter.
namespace init {
ir::Initializer Zeros();
ir::Initializer Ones();
ir::Initializer Normal(double stddev, double mean = 0.0, uint64_t seed = 0);
ir::Initializer Uniform(double low, double high, uint64_t seed = 0);
}  // namespace init

class Tracer {
 public:
  explicit Tracer(uint64_t seed = 0);
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  // Declares a parameter. Declaring a name twice is an error naming both
  // call sites.
  Tensor Parameter(const std::string& name, ir::Shape shape, ir::Initializer initializer,
                   SourceLoc loc = SourceLoc::current());
  // A parameter declared earlier, e.g. an embedding table reused as the LM
  // head. An undeclared name is an error naming the call site.
  Tensor Parameter(const std::string& name, SourceLoc loc = SourceLoc::current());

  // A per-microbatch input (role "data") or label (role "label").
  Tensor Input(const std::string& name, ir::TensorType type, SourceLoc loc = SourceLoc::current());
  Tensor Label(const std::string& name, ir::TensorType type, SourceLoc loc = SourceLoc::current());

  // The stage being traced: 0, then one more after every pipeline_yield.
  int32_t stage() const { return builder_.stage(); }
  const absl::Status& status() const { return builder_.status(); }

  ir::Graph& graph() { return graph_; }
  ir::GraphBuilder& builder() { return builder_; }
  const std::vector<ir::StateSpec>& parameters() const { return parameters_; }

 private:
  Tensor DeclareInput(const std::string& name, const std::string& role, ir::TensorType type,
                      const SourceLoc& loc);

  uint64_t seed_;
  ir::Graph graph_{"microbatch"};
  ir::GraphBuilder builder_{&graph_};
  std::vector<ir::StateSpec> parameters_;
  std::map<std::string, ir::ValueId> inputs_;
};

}  // namespace tandem

#endif  // TANDEM_IR_TRACER_H_
