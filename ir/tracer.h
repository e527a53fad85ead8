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
//
// Stages: pipeline_yield(x) ends one stage and starts the next, fed by it (a
// chain). Branches make stages that run side by side (GraphPipe's stage
// DAG): branches opened one after another are siblings fed by the same
// stage, and the first op after the last one closes starts the stage that
// merges them:
//
//   Tensor a, b;
//   {
//     auto left = t.Branch("left");     // stage 0 (nothing before it)
//     a = Tower(t, x, 4);
//     a = pipeline_yield(a);            // stage 1, fed by 0
//     a = Tower(t, a, 4);
//   }
//   {
//     auto right = t.Branch("right");   // stage 2, a source like stage 0
//     b = Tower(t, z, 2);
//   }
//   Tensor loss = Head(t, concat({a, b}, 1));   // stage 3, fed by 1 and 2
//
// A branch opened after ops of the current stage is fed by that stage.
// Branches nest. An op that reads a value of a sibling branch before the
// merge, or a branch without ops, is an error naming the call site.
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

  // An open branch (see above); closing it (its destructor) ends the branch.
  // Returned by Tracer::Branch and held as a local variable, so branches
  // close in the reverse order they opened. Must not outlive its tracer.
  // Neither copyable nor movable.
  class [[nodiscard]] BranchScope {
   public:
    BranchScope(const BranchScope&) = delete;
    BranchScope& operator=(const BranchScope&) = delete;
    ~BranchScope();

   private:
    friend class Tracer;
    explicit BranchScope(Tracer* tracer) : tracer_(tracer) {}

    Tracer* tracer_;
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

  // A cache the step keeps between steps for each microbatch, on the actor
  // of the stage that uses it (ir/train_step.h StateRole::kCache; a KV
  // cache): ReadCache gives its value before this step (zeros before the
  // first), WriteCache sets its value after it. The name is ScopedName(name);
  // the first call declares it (WriteCache with its value's type), later
  // ones must agree on the type; writing one twice is an error. Forward
  // steps only (TraceForwardStep).
  Tensor ReadCache(const std::string& name, ir::TensorType type, SourceLoc loc = SourceLoc::current());
  void WriteCache(const std::string& name, const Tensor& value, SourceLoc loc = SourceLoc::current());

  // Opens the branch `name` (see above); `name` labels its stages in errors.
  // An empty name is an error naming the call site.
  BranchScope Branch(const std::string& name, SourceLoc loc = SourceLoc::current());

  // The stage being traced: 0, then a new one after every pipeline_yield
  // and at every branch and merge.
  int32_t stage() const { return builder_.stage(); }
  // The stages traced so far and the stage graph between them.
  int32_t num_stages() const { return builder_.num_stages(); }
  ir::StageGraph stage_graph() const { return builder_.stage_graph(); }
  const absl::Status& status() const { return builder_.status(); }
  // Records a trace error at `loc` (the first error of a trace is the one
  // reported): for layers and models that check their own arguments.
  void Fail(const std::string& message, SourceLoc loc = SourceLoc::current());

  ir::Graph& graph() { return graph_; }
  ir::GraphBuilder& builder() { return builder_; }
  const std::vector<ir::StateSpec>& parameters() const { return parameters_; }
  // The caches declared, in order, and the value written to each (or
  // kInvalidValue when only read).
  struct CacheUse {
    std::string name;
    ir::TensorType type;
    ir::ValueId read = ir::kInvalidValue;
    ir::ValueId written = ir::kInvalidValue;
    ir::SourceLocation declared;
  };
  const std::vector<CacheUse>& caches() const { return caches_; }

 private:
  Tensor DeclareInput(const std::string& name, ir::InputRole role, ir::TensorType type,
                      const SourceLoc& loc);
  void CloseBranch();
  // Labels the current stage with the open branches, e.g. "branch left/a".
  void LabelStage();

  // Sibling branches and where they start and end.
  struct Fork {
    size_t depth = 0;               // branches open around the fork
    std::vector<int32_t> feeds;     // the predecessors of each sibling's first stage
    std::vector<int32_t> tails;     // the last stages of the siblings closed so far
    int32_t merge_stage = -1;       // opened when the last sibling closed
  };
  struct OpenBranch {
    std::string name;
    ir::SourceLocation location;
    int32_t first_stage = 0;
  };

  uint64_t seed_;
  ir::Graph graph_{"microbatch"};
  ir::GraphBuilder builder_{&graph_};
  std::vector<ir::StateSpec> parameters_;
  std::vector<CacheUse> caches_;
  std::map<std::string, ir::ValueId> inputs_;
  std::string scope_;
  std::vector<Fork> forks_;  // innermost last
  std::vector<OpenBranch> branches_;
};

}  // namespace tandem

#endif  // TANDEM_IR_TRACER_H_
