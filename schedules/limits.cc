#include "schedules/limits.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace tandem::schedules {
namespace {

absl::Status OverBound(const char* what, int64_t value, int64_t bound) {
  return absl::InvalidArgumentError(
      absl::StrCat(what, " ", value, " is more than the ", bound, " a schedule may have"));
}

}  // namespace

absl::Status CheckScheduleSizes(int64_t actors, int64_t stages, int64_t microbatches) {
  if (actors > kMaxActors) return OverBound("actors", actors, kMaxActors);
  if (stages > kMaxStages) return OverBound("stages", stages, kMaxStages);
  if (microbatches > kMaxMicrobatches) return OverBound("microbatches", microbatches, kMaxMicrobatches);
  // Both are at most 2^16 here: the product cannot overflow.
  if (stages > 0 && microbatches > 0 && stages * microbatches > kMaxStageMicrobatches) {
    return absl::InvalidArgumentError(
        absl::StrCat("stages x microbatches = ", stages, " x ", microbatches, " = ", stages * microbatches,
                     " is more than the ", kMaxStageMicrobatches,
                     " a schedule may have (each pair needs a forward and a backward task, and a schedule has "
                     "at most ",
                     kMaxTasks, " tasks)"));
  }
  return absl::OkStatus();
}

absl::Status CheckTaskCount(int64_t tasks, absl::string_view what) {
  if (tasks <= kMaxTasks) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(what, " has more than the ", kMaxTasks, " tasks a schedule may have"));
}

std::optional<int32_t> ParseDecimal(absl::string_view digits) {
  if (digits.empty() || digits.size() > 9) return std::nullopt;
  int32_t value = 0;
  for (char c : digits) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return std::nullopt;
    value = value * 10 + (c - '0');
  }
  return value;
}

}  // namespace tandem::schedules
