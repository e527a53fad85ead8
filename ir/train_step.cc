#include "ir/train_step.h"

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

}  // namespace tandem::ir
