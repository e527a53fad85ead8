#include "schedules/limits.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

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

std::string Excerpt(absl::string_view text) {
  size_t size = std::min(text.size(), kMaxExcerptBytes);
  if (size < text.size()) {
    // Back off over continuation bytes (10xxxxxx) to the start of a character.
    while (size > 0 && (static_cast<unsigned char>(text[size]) & 0xC0) == 0x80) --size;
  }
  std::string excerpt;
  for (char c : text.substr(0, size)) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      absl::StrAppendFormat(&excerpt, "\\x%02x", u);
    } else {
      excerpt += c;
    }
  }
  if (size < text.size()) excerpt += "...";
  return excerpt;
}

}  // namespace tandem::schedules
