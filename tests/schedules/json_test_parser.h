// A strict little JSON parser for tests: proves that output is well-formed
// JSON and lets tests look inside it. Not for production use (no \u
// decoding beyond ASCII, recursion without a depth limit).
#ifndef TANDEM_TESTS_SCHEDULES_JSON_TEST_PARSER_H_
#define TANDEM_TESTS_SCHEDULES_JSON_TEST_PARSER_H_

#include <cctype>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tandem::testing {

struct JsonValue {
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };
  Type type = Type::kNull;
  bool boolean = false;
  double number = 0.0;
  std::string string;
  std::vector<JsonValue> array;
  std::vector<std::pair<std::string, JsonValue>> object;

  // The member `key` of an object, or nullptr.
  const JsonValue* Find(const std::string& key) const {
    for (const auto& [name, value] : object) {
      if (name == key) return &value;
    }
    return nullptr;
  }
};

class JsonTestParser {
 public:
  // The value `text` holds, or nullopt (with error()) when it is not exactly
  // one well-formed JSON value.
  std::optional<JsonValue> Parse(const std::string& text) {
    text_ = &text;
    position_ = 0;
    JsonValue value;
    if (!ParseValue(value)) return std::nullopt;
    SkipSpace();
    if (position_ != text.size()) {
      Fail("trailing characters");
      return std::nullopt;
    }
    return value;
  }
  const std::string& error() const { return error_; }

 private:
  bool Fail(const std::string& what) {
    error_ = what + " at offset " + std::to_string(position_);
    return false;
  }
  void SkipSpace() {
    while (position_ < text_->size() && std::isspace(static_cast<unsigned char>((*text_)[position_]))) {
      ++position_;
    }
  }
  bool Consume(char c) {
    SkipSpace();
    if (position_ < text_->size() && (*text_)[position_] == c) {
      ++position_;
      return true;
    }
    return false;
  }
  bool Literal(const char* word) {
    const std::string w(word);
    if (text_->compare(position_, w.size(), w) != 0) return false;
    position_ += w.size();
    return true;
  }
  bool ParseString(std::string& out) {
    if (!Consume('"')) return Fail("expected a string");
    while (position_ < text_->size()) {
      const char c = (*text_)[position_++];
      if (c == '"') return true;
      if (static_cast<unsigned char>(c) < 0x20) return Fail("control character in string");
      if (c != '\\') {
        out.push_back(c);
        continue;
      }
      if (position_ >= text_->size()) break;
      const char escape = (*text_)[position_++];
      switch (escape) {
        case '"': case '\\': case '/': out.push_back(escape); break;
        case 'n': out.push_back('\n'); break;
        case 't': out.push_back('\t'); break;
        case 'r': out.push_back('\r'); break;
        case 'b': out.push_back('\b'); break;
        case 'f': out.push_back('\f'); break;
        case 'u': {
          if (position_ + 4 > text_->size()) return Fail("short \\u escape");
          out.push_back(static_cast<char>(std::strtol(text_->substr(position_, 4).c_str(), nullptr, 16)));
          position_ += 4;
          break;
        }
        default: return Fail("bad escape");
      }
    }
    return Fail("unterminated string");
  }
  bool ParseNumber(double& out) {
    const size_t begin = position_;
    if (position_ < text_->size() && (*text_)[position_] == '-') ++position_;
    auto digits = [&] {
      const size_t start = position_;
      while (position_ < text_->size() && std::isdigit(static_cast<unsigned char>((*text_)[position_]))) {
        ++position_;
      }
      return position_ > start;
    };
    if (!digits()) return Fail("expected a number");
    if (position_ < text_->size() && (*text_)[position_] == '.') {
      ++position_;
      if (!digits()) return Fail("expected fraction digits");
    }
    if (position_ < text_->size() && ((*text_)[position_] == 'e' || (*text_)[position_] == 'E')) {
      ++position_;
      if (position_ < text_->size() && ((*text_)[position_] == '+' || (*text_)[position_] == '-')) {
        ++position_;
      }
      if (!digits()) return Fail("expected exponent digits");
    }
    out = std::strtod(text_->substr(begin, position_ - begin).c_str(), nullptr);
    return true;
  }
  bool ParseValue(JsonValue& value) {
    SkipSpace();
    if (position_ >= text_->size()) return Fail("unexpected end");
    const char c = (*text_)[position_];
    if (c == '{') {
      ++position_;
      value.type = JsonValue::Type::kObject;
      if (Consume('}')) return true;
      do {
        std::string key;
        SkipSpace();
        if (!ParseString(key)) return false;
        if (!Consume(':')) return Fail("expected ':'");
        JsonValue member;
        if (!ParseValue(member)) return false;
        value.object.emplace_back(std::move(key), std::move(member));
      } while (Consume(','));
      return Consume('}') || Fail("expected '}'");
    }
    if (c == '[') {
      ++position_;
      value.type = JsonValue::Type::kArray;
      if (Consume(']')) return true;
      do {
        JsonValue element;
        if (!ParseValue(element)) return false;
        value.array.push_back(std::move(element));
      } while (Consume(','));
      return Consume(']') || Fail("expected ']'");
    }
    if (c == '"') {
      value.type = JsonValue::Type::kString;
      return ParseString(value.string);
    }
    if (Literal("true") || Literal("false")) {
      value.type = JsonValue::Type::kBool;
      value.boolean = (*text_)[position_ - 1] == 'e' && (*text_)[position_ - 2] == 'u';
      return true;
    }
    if (Literal("null")) return true;
    value.type = JsonValue::Type::kNumber;
    return ParseNumber(value.number);
  }

  const std::string* text_ = nullptr;
  size_t position_ = 0;
  std::string error_;
};

}  // namespace tandem::testing

#endif  // TANDEM_TESTS_SCHEDULES_JSON_TEST_PARSER_H_
