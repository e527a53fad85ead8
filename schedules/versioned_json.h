// Reading Tandem's own versioned JSON files (cost files, plan files): the
// text's size bounded before it is parsed, a JSON object, the file's
// "format" name and the one "version" this Tandem reads. Pure function.
#ifndef TANDEM_SCHEDULES_VERSIONED_JSON_H_
#define TANDEM_SCHEDULES_VERSIONED_JSON_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace tandem::schedules {

struct VersionedJsonKind {
  absl::string_view what;    // "cost file": every message starts "cost file: the file: "
  absl::string_view noun;    // "a Tandem cost file"
  absl::string_view format;  // "tandem-costs"
  int32_t version = 1;
  size_t max_bytes = 0;
};

// The parsed object; InvalidArgument saying which rule `text` breaks.
absl::StatusOr<nlohmann::json> ParseVersionedJson(absl::string_view text, const VersionedJsonKind& kind);

}  // namespace tandem::schedules

#endif  // TANDEM_SCHEDULES_VERSIONED_JSON_H_
