// Named, typed attributes of an IR node (axes, eps, transpose flags, ...).
//
// A small sorted map from name to one of four value kinds. Generic on
// purpose: the printer, parser and (later) the wire format treat every op's
// attributes the same way. Value type; not synchronized.
#ifndef TANDEM_IR_ATTRIBUTES_H_
#define TANDEM_IR_ATTRIBUTES_H_

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

namespace tandem::ir {

using AttributeValue = std::variant<int64_t, double, std::string, std::vector<int64_t>>;

class Attributes {
 public:
  Attributes() = default;
  Attributes(std::initializer_list<std::pair<const std::string, AttributeValue>> values)
      : values_(values) {}

  void Set(const std::string& name, AttributeValue value) { values_[name] = std::move(value); }
  bool Has(const std::string& name) const { return values_.count(name) > 0; }

  // Typed getters. A missing attribute or one of another kind is a bug of
  // the caller (the verifier checks graphs from outside), so they CHECK.
  int64_t GetInt(const std::string& name) const;
  double GetDouble(const std::string& name) const;
  const std::string& GetString(const std::string& name) const;
  const std::vector<int64_t>& GetInts(const std::string& name) const;
  // Getters with a default for optional attributes.
  int64_t GetIntOr(const std::string& name, int64_t fallback) const;
  double GetDoubleOr(const std::string& name, double fallback) const;

  const std::map<std::string, AttributeValue>& values() const { return values_; }
  bool empty() const { return values_.empty(); }
  // The same names with the same values, where a NaN equals any NaN (an
  // op attribute may be nan: `fill {value=nan}`). The text format and the
  // wire keep a value's meaning, so a program equals itself after either.
  friend bool operator==(const Attributes& a, const Attributes& b);

 private:
  std::map<std::string, AttributeValue> values_;
};

// "3", "1e-05", "-inf", "\"parameter\"", "[0,2,1]": the printer's spelling,
// which the parser reads back to the same value (doubles round-trip exactly).
std::string AttributeValueToString(const AttributeValue& value);

}  // namespace tandem::ir

#endif  // TANDEM_IR_ATTRIBUTES_H_
