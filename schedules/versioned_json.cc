#include "schedules/versioned_json.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace tandem::schedules {

absl::StatusOr<nlohmann::json> ParseVersionedJson(absl::string_view text, const VersionedJsonKind& kind) {
  auto problem = [&kind](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(kind.what, ": the file: ", what));
  };
  if (text.size() > kind.max_bytes) return problem(absl::StrCat(text.size(), " bytes; at most ", kind.max_bytes));
  nlohmann::json json = nlohmann::json::parse(text.begin(), text.end(), /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return problem("is not JSON");
  if (!json.is_object()) return problem("must be a JSON object");
  auto format = json.find("format");
  if (format == json.end() || !format->is_string() || format->get_ref<const std::string&>() != kind.format) {
    return problem(absl::StrCat("is not ", kind.noun, " (\"format\": \"", kind.format, "\" is missing)"));
  }
  auto version = json.find("version");
  if (version == json.end() || !version->is_number_integer() || *version != kind.version) {
    return problem(absl::StrCat("has version ", version == json.end() ? "(none)" : version->dump(),
                                "; this Tandem reads version ", kind.version));
  }
  return json;
}

}  // namespace tandem::schedules
