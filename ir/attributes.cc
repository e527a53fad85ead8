#include "ir/attributes.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tandem::ir {
namespace {

template <typename T>
const T& GetAs(const std::map<std::string, AttributeValue>& values, const std::string& name) {
  auto it = values.find(name);
  if (it == values.end() || !std::holds_alternative<T>(it->second)) {
    std::fprintf(stderr, "tandem: internal error: attribute '%s' missing or of the wrong kind\n",
                 name.c_str());
    std::abort();
  }
  return std::get<T>(it->second);
}

std::string QuoteString(const std::string& text) {
  std::string quoted = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') quoted += '\\';
    quoted += c;
  }
  return quoted + "\"";
}

std::string DoubleToString(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  // Shortest decimal that reads back to the same double.
  char buffer[32];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buffer, sizeof(buffer), "%.*g", precision, value);
    if (std::strtod(buffer, nullptr) == value) break;
  }
  std::string text = buffer;
  // Keep doubles distinguishable from integers in the text form.
  if (text.find_first_of(".en") == std::string::npos) text += ".0";
  return text;
}

}  // namespace

int64_t Attributes::GetInt(const std::string& name) const { return GetAs<int64_t>(values_, name); }
double Attributes::GetDouble(const std::string& name) const { return GetAs<double>(values_, name); }
const std::string& Attributes::GetString(const std::string& name) const {
  return GetAs<std::string>(values_, name);
}
const std::vector<int64_t>& Attributes::GetInts(const std::string& name) const {
  return GetAs<std::vector<int64_t>>(values_, name);
}
int64_t Attributes::GetIntOr(const std::string& name, int64_t fallback) const {
  return Has(name) ? GetInt(name) : fallback;
}
double Attributes::GetDoubleOr(const std::string& name, double fallback) const {
  return Has(name) ? GetDouble(name) : fallback;
}

bool operator==(const Attributes& a, const Attributes& b) {
  auto same = [](const auto& x, const auto& y) {
    const auto& [x_name, x_value] = x;
    const auto& [y_name, y_value] = y;
    if (x_name != y_name) return false;
    const double* x_double = std::get_if<double>(&x_value);
    const double* y_double = std::get_if<double>(&y_value);
    if (x_double != nullptr && y_double != nullptr && std::isnan(*x_double) && std::isnan(*y_double)) return true;
    return x_value == y_value;
  };
  return std::equal(a.values_.begin(), a.values_.end(), b.values_.begin(), b.values_.end(), same);
}

std::string AttributeValueToString(const AttributeValue& value) {
  struct Printer {
    std::string operator()(int64_t v) const { return absl::StrCat(v); }
    std::string operator()(double v) const { return DoubleToString(v); }
    std::string operator()(const std::string& v) const { return QuoteString(v); }
    std::string operator()(const std::vector<int64_t>& v) const {
      return absl::StrCat("[", absl::StrJoin(v, ","), "]");
    }
  };
  return std::visit(Printer{}, value);
}

}  // namespace tandem::ir
