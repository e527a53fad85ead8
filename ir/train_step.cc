#include "ir/train_step.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace tandem::ir {

const StateSpec* TrainStep::FindState(const std::string& state_name) const {
  for (const StateSpec& spec : state) {
    if (spec.name == state_name) return &spec;
  }
  return nullptr;
}

std::string GradientName(const std::string& parameter, int32_t stage) {
  return absl::StrCat("grad.", parameter, ".s", stage);
}

std::string AccumulatorName(const std::string& parameter, int32_t stage) {
  return absl::StrCat("acc.", parameter, ".s", stage);
}

std::string NormPartialName(int32_t stage) { return absl::StrCat("norm.s", stage); }

const char* StateRoleName(StateRole role) {
  switch (role) {
    case StateRole::kParameter: return "parameter";
    case StateRole::kOptimizerState: return "optimizer_state";
    case StateRole::kCache: return "cache";
  }
  return "";
}

std::string CacheStateName(const std::string& cache, int32_t microbatch) {
  return absl::StrCat(cache, "@", microbatch);
}

std::string StashName(const std::string& parameter, int32_t k) {
  return k == 0 ? parameter : absl::StrCat("stash", k, ".", parameter);
}

int32_t TrainStep::MaxVersionDelay() const {
  int32_t most = 0;
  for (int32_t delay : version_delay) most = std::max(most, delay);
  return most;
}

bool TrainStep::update_reads_gradient_norm() const {
  for (ValueId id : update.Inputs()) {
    if (HasRole(update.node(id), InputRole::kGradientNorm)) return true;
  }
  return false;
}

std::map<std::string, int32_t> ParameterVersionDelays(const TrainStep& step) {
  std::map<std::string, int32_t> delays;
  if (step.MaxVersionDelay() == 0) return delays;
  for (ValueId id : step.microbatch.Inputs()) {
    const Node& node = step.microbatch.node(id);
    if (!HasRole(node, InputRole::kParameter)) continue;
    const int32_t delay = step.VersionDelay(node.stage);
    if (delay > 0) delays[node.attributes.GetString("name")] = delay;
  }
  return delays;
}

}  // namespace tandem::ir
