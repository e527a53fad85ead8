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
// derived from the tracer's seed and the parameter's full name unless given.
//
// Name scopes spare model code from building parameter names by hand:
//
//   for (int64_t i = 0; i < layers; ++i) {
//     auto block = t.Scope(absl::StrCat("h", i));
//     auto attn = t.Scope("attn");
//     Tensor w = t.Parameter("w", {d, d}, init::Normal(0.02));   // "h0.attn.w"
//   }
//
// Scopes apply to the parameters a model declares; inputs, labels and the
// lookup of an earlier parameter use the names as given.
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
  // An open name scope; closing it (its destructor) restores the scope that
  // was current when it opened. Returned by Tracer::Scope and held as a
  // local variable, so scopes close in the reverse order they opened. Must
  // not outlive its tracer. Neither copyable nor movable.
  class [[nodiscard]] NameScope {
   public:
    NameScope(const NameScope&) = delete;
    NameScope& operator=(const NameScope&) = delete;
    ~NameScope();

   private:
    friend class Tracer;
    NameScope(Tracer* tracer, size_t outer_length) : tracer_(tracer), outer_length_(outer_length) {}

    Tracer* tracer_;
    size_t outer_length_;  // the length of the scope prefix to restore
  };

  explicit Tracer(uint64_t seed = 0);
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  // Opens the scope `name` inside the current one: until the returned
  // guard closes, Parameter("w", ...) declares "<scopes>.<name>.w". `name`
  // may itself hold dots ("attn.qkv" opens two levels at once). An empty
  // name is an error naming the call site (and opens nothing).
  NameScope Scope(const std::string& name, SourceLoc loc = SourceLoc::current());
  // The open scopes joined by ".", e.g. "h3.attn"; empty when none is open.
  const std::string& scope() const { return scope_; }
  // `name` inside the open scopes: "h3.attn." + name, or `name` at the top.
  std::string ScopedName(const std::string& name) const;

  // Declares the parameter ScopedName(name). Declaring a name twice is an
  // error naming both call sites.
  Tensor Parameter(const std::string& name, ir::Shape shape, ir::Initializer initializer,
                   SourceLoc loc = SourceLoc::current());
  // A parameter declared earlier, by its full name whatever scope is open,
  // e.g. the embedding table "wte" reused as the LM head inside "head". An
  // undeclared name is an error naming the call site.
  Tensor Parameter(const std::string& name, SourceLoc loc = SourceLoc::current());

  // A per-microbatch input (role "data") or label (role "label").
  Tensor Input(const std::string& name, ir::TensorType type, SourceLoc loc = SourceLoc::current());
  Tensor Label(const std::string& name, ir::TensorType type, SourceLoc loc = SourceLoc::current());

  // The stage being traced: 0, then one more after every pipeline_yield.
  int32_t stage() const { return builder_.stage(); }
  const absl::Status& status() const { return builder_.status(); }
  // Records a trace error at `loc` (the first error of a trace is the one
  // reported): for layers and models that check their own arguments.
  void Fail(const std::string& message, SourceLoc loc = SourceLoc::current());

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
  std::string scope_;
};

}  // namespace tandem

#endif  // TANDEM_IR_TRACER_H_
