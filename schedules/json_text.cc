#include "schedules/json_text.h"

#include <cmath>
#include <cstdint>

namespace tandem::schedules {

nlohmann::ordered_json JsonNumber(double value) {
  if (!std::isfinite(value)) return nullptr;
  // Below 2^53 every integral double is exactly an int64.
  constexpr double kExactIntegers = 9007199254740992.0;
  if (std::trunc(value) == value && std::abs(value) < kExactIntegers) {
    return static_cast<int64_t>(value);
  }
  return value;
}

std::string JsonText(const nlohmann::ordered_json& value) {
  return value.dump(/*indent=*/-1, /*indent_char=*/' ', /*ensure_ascii=*/false,
                    nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace tandem::schedules
