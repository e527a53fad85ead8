#include "schedules/json_fields.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tandem::schedules {

absl::Status FileProblem(absl::string_view file, absl::string_view where, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(file, ": ", where, ": ", what));
}

absl::Status JsonFields::OnlyKnownKeys(std::initializer_list<absl::string_view> known) const {
  for (auto it = object_.begin(); it != object_.end(); ++it) {
    if (std::find(known.begin(), known.end(), absl::string_view(it.key())) != known.end()) continue;
    return Problem(absl::StrCat("'", it.key().substr(0, kMaxFieldStringBytes), "' is not a field of it (its fields: ",
                                absl::StrJoin(known, ", "), ")"));
  }
  return absl::OkStatus();
}

absl::Status JsonFields::String(const char* key, std::string& out) const {
  auto it = object_.find(key);
  if (it == object_.end() || !it->is_string()) return Problem(absl::StrCat("'", key, "' must be a string"));
  const std::string& value = it->get_ref<const std::string&>();
  if (value.size() > kMaxFieldStringBytes) {
    return Problem(absl::StrCat("'", key, "' is longer than ", kMaxFieldStringBytes, " bytes"));
  }
  out = value;
  return absl::OkStatus();
}

absl::Status JsonFields::Integer(const char* key, int64_t low, int64_t high, int64_t& out) const {
  auto it = object_.find(key);
  if (it == object_.end() || !it->is_number_integer()) return Problem(absl::StrCat("'", key, "' must be an integer"));
  // Non-negative integers parse as unsigned: compare them as such, so that
  // one past INT64_MAX is out of range rather than negative.
  const bool in_range = it->is_number_unsigned()
                            ? it->get<uint64_t>() <= static_cast<uint64_t>(high) && it->get<int64_t>() >= low
                            : it->get<int64_t>() >= low && it->get<int64_t>() <= high;
  if (!in_range) return Problem(absl::StrCat("'", key, "' = ", it->dump(), " is outside [", low, ", ", high, "]"));
  out = it->get<int64_t>();
  return absl::OkStatus();
}

absl::Status JsonFields::ByteCount(const char* key, int64_t& out) const {
  auto it = object_.find(key);
  if (it == object_.end() || !it->is_number_integer()) return Problem(absl::StrCat("'", key, "' must be an integer"));
  const bool negative = !it->is_number_unsigned() && it->get<int64_t>() < 0;
  if (negative || it->get<uint64_t>() > static_cast<uint64_t>(kMaxFieldBytes)) {
    return Problem(absl::StrCat("'", key, "' is not a byte count in [0, 2^50]"));
  }
  out = it->get<int64_t>();
  return absl::OkStatus();
}

absl::Status JsonFields::Seconds(const char* key, double& out) const {
  auto it = object_.find(key);
  if (it == object_.end() || !it->is_number()) return Problem(absl::StrCat("'", key, "' must be a number"));
  const double value = it->get<double>();
  if (!(value >= 0.0 && value <= kMaxFieldSeconds)) {
    return Problem(
        absl::StrCat("'", key, "' = ", value, " is not a time in [0, ", kMaxFieldSeconds, "] seconds"));
  }
  out = value;
  return absl::OkStatus();
}

}  // namespace tandem::schedules
