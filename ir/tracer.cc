#include "ir/tracer.h"

#include "absl/strings/str_cat.h"

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

namespace {

// FNV-1a: a stable hash of a name, the same on every machine and run.
uint64_t HashName(const std::string& name) {
  uint64_t hash = 1469598103934665603ull;
  for (unsigned char c : name) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
  return hash;
}

}  // namespace

Tracer::Tracer(uint64_t seed) : seed_(seed) {}

Tensor Tracer::Parameter(const std::string& name, ir::Shape shape, ir::Initializer initializer,
                         SourceLoc loc) {
  if (auto it = inputs_.find(name); it != inputs_.end()) {
    builder_.Fail(ir::ToLocation(loc),
                  absl::StrCat("parameter '", name, "' declared twice (first at ",
                               graph_.node(it->second).location.ToString(), ")"));
    return Tensor(&builder_, ir::kInvalidValue);
  }
  ir::TensorType type{ir::DType::kF32, std::move(shape)};
  if (initializer.seed == 0) initializer.seed = HashName(name) ^ (seed_ * 0x9E3779B97F4A7C15ull);
  parameters_.push_back({name, type, ir::StateRole::kParameter, initializer});
  return DeclareInput(name, "parameter", std::move(type), loc);
}

Tensor Tracer::Parameter(const std::string& name, SourceLoc loc) {
  auto it = inputs_.find(name);
  if (it == inputs_.end() ||
      graph_.node(it->second).attributes.GetString("role") != "parameter") {
    builder_.Fail(ir::ToLocation(loc),
                  absl::StrCat("parameter '", name, "' used but never declared"));
    return Tensor(&builder_, ir::kInvalidValue);
  }
  return Tensor(&builder_, it->second);
}

Tensor Tracer::Input(const std::string& name, ir::TensorType type, SourceLoc loc) {
  return DeclareInput(name, "data", std::move(type), loc);
}

Tensor Tracer::Label(const std::string& name, ir::TensorType type, SourceLoc loc) {
  return DeclareInput(name, "label", std::move(type), loc);
}

Tensor Tracer::DeclareInput(const std::string& name, const std::string& role, ir::TensorType type,
                            const SourceLoc& loc) {
  if (auto it = inputs_.find(name); it != inputs_.end()) {
    builder_.Fail(ir::ToLocation(loc),
                  absl::StrCat("input '", name, "' declared twice (first at ",
                               graph_.node(it->second).location.ToString(), ")"));
    return Tensor(&builder_, ir::kInvalidValue);
  }
  ir::ValueId id = builder_.AddInput(name, role, std::move(type), ir::ToLocation(loc));
  inputs_[name] = id;
  return Tensor(&builder_, id);
}

}  // namespace tandem
