// How Tandem writes JSON: nlohmann-json values, printed compactly.
//
// Every JSON file or report Tandem writes (simulation reports, traces, the
// benchmarks' --json, loss files) builds nlohmann::ordered_json values, so
// that keys come out in the order a reader of the documented formats expects,
// and prints them with JsonText. Pure functions; thread-safe.
#ifndef TANDEM_SCHEDULES_JSON_TEXT_H_
#define TANDEM_SCHEDULES_JSON_TEXT_H_

#include <string>

#include "nlohmann/json.hpp"

namespace tandem::schedules {

// `value` as a JSON number the way Tandem's outputs print numbers: an
// integral value without a fraction ("9", not "9.0"), -0 as 0, NaN and the
// infinities as null; any other value in the shortest form that reads back
// to the same double.
nlohmann::ordered_json JsonNumber(double value);

// `value` as compact JSON text (no spaces, no trailing newline). Never
// throws: bytes that are not UTF-8 (a user's name, a child process's error
// text) come out as U+FFFD.
std::string JsonText(const nlohmann::ordered_json& value);

}  // namespace tandem::schedules

#endif  // TANDEM_SCHEDULES_JSON_TEXT_H_
