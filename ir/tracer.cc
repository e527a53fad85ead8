#include "ir/tracer.h"

#include "absl/strings/str_cat.h"
#include "ir/hash.h"

namespace tandem {
namespace init {

ir::Initializer Zeros() { return {ir::Initializer::Kind::kZeros, 0, 0, 0}; }
ir::Initializer Ones() { return {ir::Initializer::Kind::kOnes, 0, 0, 0}; }
ir::Initializer Normal(double stddev, double mean, uint64_t seed) {
  return {ir::Initializer::Kind::kNormal, mean, stddev, seed};
}
ir::Initializer Uniform(double low, double high, uint64_t seed) {
  return {ir::Initializer::Kind::kUniform, low, high, seed};
}

}  // namespace init

Tracer::NameScope::~NameScope() { tracer_->scope_.resize(outer_length_); }

Tracer::Tracer(uint64_t seed) : seed_(seed) {}

Tracer::NameScope Tracer::Scope(const std::string& name, SourceLoc loc) {
  const size_t outer_length = scope_.size();
  if (name.empty()) {
    Fail(scope_.empty() ? "empty name scope"
                        : absl::StrCat("empty name scope inside '", scope_, "'"),
         loc);
  } else {
    scope_ = ScopedName(name);
  }
  return NameScope(this, outer_length);
}

Tracer::BranchScope::~BranchScope() { tracer_->CloseBranch(); }

Tracer::BranchScope Tracer::Branch(const std::string& name, SourceLoc loc) {
  const std::string label = name.empty() ? std::string("(unnamed)") : name;
  if (name.empty()) Fail("empty branch name", loc);
  const int32_t current = builder_.stage();
  const bool current_empty = !builder_.StageHasOps(current);
  while (!forks_.empty() && forks_.back().depth > branches_.size()) forks_.pop_back();
  const bool sibling = !forks_.empty() && forks_.back().depth == branches_.size() &&
                       forks_.back().merge_stage == current && current_empty;
  if (sibling) {
    // The stage opened for the merge has no ops yet: it becomes this
    // sibling's first stage instead.
    builder_.SetPredecessors(forks_.back().feeds);
    forks_.back().merge_stage = -1;
  } else {
    if (!forks_.empty() && forks_.back().depth == branches_.size()) forks_.pop_back();  // merged already
    Fork fork;
    fork.depth = branches_.size();
    if (current_empty) {
      fork.feeds = builder_.predecessors(current);  // what would have fed the empty stage
    } else {
      fork.feeds = {current};
      builder_.OpenStage(fork.feeds);
    }
    forks_.push_back(std::move(fork));
  }
  branches_.push_back({label, ir::ToLocation(loc), builder_.stage()});
  LabelStage();
  return BranchScope(this);
}

void Tracer::CloseBranch() {
  const OpenBranch branch = branches_.back();
  branches_.pop_back();
  const int32_t current = builder_.stage();
  std::vector<int32_t> tails;
  if (builder_.StageHasOps(current)) {
    tails = {current};
  } else if (!forks_.empty() && forks_.back().depth > branches_.size() && forks_.back().merge_stage == current) {
    tails = forks_.back().tails;  // the branch ends in branches of its own, not merged inside it
  } else {
    builder_.Fail(branch.location, absl::StrCat("branch '", branch.name, "' ",
                                                current == branch.first_stage
                                                    ? "has no ops"
                                                    : "ends with an empty stage (a pipeline_yield after its last op?)"));
    return;
  }
  while (!forks_.empty() && forks_.back().depth > branches_.size()) forks_.pop_back();
  if (forks_.empty()) return;  // only after an error
  Fork& fork = forks_.back();
  fork.tails.insert(fork.tails.end(), tails.begin(), tails.end());
  if (builder_.StageHasOps(current)) {
    builder_.OpenStage(fork.tails);
  } else {
    builder_.SetPredecessors(fork.tails);
  }
  fork.merge_stage = builder_.stage();
  LabelStage();
}

void Tracer::LabelStage() {
  std::string path;
  for (const OpenBranch& open : branches_) absl::StrAppend(&path, path.empty() ? "" : "/", open.name);
  builder_.set_stage_label(builder_.stage(), path.empty() ? "" : absl::StrCat("branch ", path));
}

std::string Tracer::ScopedName(const std::string& name) const {
  return scope_.empty() ? name : absl::StrCat(scope_, ".", name);
}

void Tracer::Fail(const std::string& message, SourceLoc loc) {
  builder_.Fail(ir::ToLocation(loc), message);
}

Tensor Tracer::Parameter(const std::string& relative_name, ir::Shape shape,
                         ir::Initializer initializer, SourceLoc loc) {
  const std::string name = ScopedName(relative_name);
  if (auto it = inputs_.find(name); it != inputs_.end()) {
    builder_.Fail(ir::ToLocation(loc),
                  absl::StrCat("parameter '", name, "' declared twice (first at ",
                               graph_.node(it->second).location.ToString(), ")"));
    return Tensor(&builder_, ir::kInvalidValue);
  }
  ir::TensorType type{ir::DType::kF32, std::move(shape)};
  if (initializer.seed == 0) initializer.seed = ir::Hash64(name, /*seed=*/seed_);
  parameters_.push_back({name, type, ir::StateRole::kParameter, initializer});
  return DeclareInput(name, ir::InputRole::kParameter, std::move(type), loc);
}

Tensor Tracer::Parameter(const std::string& name, SourceLoc loc) {
  auto it = inputs_.find(name);
  if (it == inputs_.end() ||
      !ir::HasRole(graph_.node(it->second), ir::InputRole::kParameter)) {
    std::string hint;
    if (const std::string scoped = ScopedName(name); scoped != name && inputs_.contains(scoped)) {
      hint = absl::StrCat(" (names given here are full names: did you mean '", scoped, "'?)");
    }
    builder_.Fail(ir::ToLocation(loc),
                  absl::StrCat("parameter '", name, "' used but never declared", hint));
    return Tensor(&builder_, ir::kInvalidValue);
  }
  return Tensor(&builder_, it->second);
}

Tensor Tracer::Input(const std::string& name, ir::TensorType type, SourceLoc loc) {
  return DeclareInput(name, ir::InputRole::kData, std::move(type), loc);
}

Tensor Tracer::Label(const std::string& name, ir::TensorType type, SourceLoc loc) {
  return DeclareInput(name, ir::InputRole::kLabel, std::move(type), loc);
}

namespace {

// The cache `name` in `caches`, declared as `type` if it is not yet; null
// (and the builder failed) when it was declared with another type.
Tracer::CacheUse* DeclareCache(std::vector<Tracer::CacheUse>& caches, ir::GraphBuilder& builder,
                               const std::string& name, const ir::TensorType& type, const SourceLoc& loc) {
  for (Tracer::CacheUse& cache : caches) {
    if (cache.name != name) continue;
    if (cache.type != type) {
      builder.Fail(ir::ToLocation(loc), absl::StrCat("cache '", name, "' is ", ir::TypeToString(type), " here but ",
                                                     ir::TypeToString(cache.type), " at ",
                                                     cache.declared.ToString()));
      return nullptr;
    }
    return &cache;
  }
  caches.push_back({.name = name, .type = type, .declared = ir::ToLocation(loc)});
  return &caches.back();
}

}  // namespace

Tensor Tracer::ReadCache(const std::string& name, ir::TensorType type, SourceLoc loc) {
  const std::string full = ScopedName(name);
  CacheUse* cache = DeclareCache(caches_, builder_, full, type, loc);
  if (cache == nullptr) return Tensor(&builder_, ir::kInvalidValue);
  if (cache->read == ir::kInvalidValue) {
    cache->read = builder_.AddInput(full, ir::InputRole::kCache, std::move(type), ir::ToLocation(loc));
  }
  return Tensor(&builder_, cache->read);
}

void Tracer::WriteCache(const std::string& name, const Tensor& value, SourceLoc loc) {
  if (!value.valid()) return;  // the error that made it is already recorded
  const std::string full = ScopedName(name);
  CacheUse* cache = DeclareCache(caches_, builder_, full, value.type(), loc);
  if (cache == nullptr) return;
  if (cache->written != ir::kInvalidValue) {
    builder_.Fail(ir::ToLocation(loc), absl::StrCat("cache '", full, "' written twice (first at ",
                                                    graph_.node(cache->written).location.ToString(), ")"));
    return;
  }
  cache->written = value.id();
}

Tensor Tracer::DeclareInput(const std::string& name, ir::InputRole role, ir::TensorType type,
                            const SourceLoc& loc) {
  if (auto it = inputs_.find(name); it != inputs_.end()) {
    builder_.Fail(ir::ToLocation(loc),
                  absl::StrCat("input '", name, "' declared twice (first at ",
                               graph_.node(it->second).location.ToString(), ")"));
    return Tensor(&builder_, ir::kInvalidValue);
  }
  ir::ValueId id = builder_.AddInput(name, role, std::move(type), ir::ToLocation(loc));
  if (id != ir::kInvalidValue) inputs_[name] = id;
  return Tensor(&builder_, id);
}

}  // namespace tandem
