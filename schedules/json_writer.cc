#include "schedules/json_writer.h"

#include <charconv>
#include <cmath>

#include "absl/strings/str_format.h"

namespace tandem::schedules {

std::string JsonQuote(const std::string& text) {
  std::string out;
  out.reserve(text.size() + 2);
  out.push_back('"');
  for (const char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += absl::StrFormat("\\u%04x", static_cast<int>(c));
        } else {
          out.push_back(c);
        }
    }
  }
  out.push_back('"');
  return out;
}

void JsonWriter::BeforeValue() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (!has_member_.empty()) {
    if (has_member_.back()) out_.push_back(',');
    has_member_.back() = true;
  }
  FlushNewLine();
}

void JsonWriter::FlushNewLine() {
  if (newline_pending_) out_.push_back('\n');
  newline_pending_ = false;
}

JsonWriter& JsonWriter::BeginObject() {
  BeforeValue();
  out_.push_back('{');
  has_member_.push_back(false);
  return *this;
}

JsonWriter& JsonWriter::EndObject() {
  FlushNewLine();
  out_.push_back('}');
  has_member_.pop_back();
  return *this;
}

JsonWriter& JsonWriter::BeginArray() {
  BeforeValue();
  out_.push_back('[');
  has_member_.push_back(false);
  return *this;
}

JsonWriter& JsonWriter::EndArray() {
  FlushNewLine();
  out_.push_back(']');
  has_member_.pop_back();
  return *this;
}

JsonWriter& JsonWriter::Key(const std::string& key) {
  BeforeValue();
  out_ += JsonQuote(key);
  out_.push_back(':');
  after_key_ = true;
  return *this;
}

JsonWriter& JsonWriter::String(const std::string& value) {
  BeforeValue();
  out_ += JsonQuote(value);
  return *this;
}

JsonWriter& JsonWriter::Number(double value) {
  BeforeValue();
  if (!std::isfinite(value)) {
    out_ += "null";
    return *this;
  }
  if (value == 0.0) value = 0.0;  // No "-0".
  char buffer[32];
  auto [end, error] = std::to_chars(buffer, buffer + sizeof(buffer), value);
  out_.append(buffer, end);
  return *this;
}

JsonWriter& JsonWriter::Int(int64_t value) {
  BeforeValue();
  out_ += std::to_string(value);
  return *this;
}

JsonWriter& JsonWriter::Bool(bool value) {
  BeforeValue();
  out_ += value ? "true" : "false";
  return *this;
}

JsonWriter& JsonWriter::NewLine() {
  newline_pending_ = true;
  return *this;
}

std::string JsonWriter::Take() {
  FlushNewLine();
  std::string out = std::move(out_);
  out_.clear();
  has_member_.clear();
  after_key_ = false;
  newline_pending_ = false;
  return out;
}

}  // namespace tandem::schedules
