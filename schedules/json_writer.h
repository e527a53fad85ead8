// A minimal streaming JSON writer: objects, arrays, strings, numbers.
//
// Used for the simulator's report and for trace files. The caller nests
// Begin/End calls correctly; commas and string escaping are handled here.
// Numbers print in the shortest form that reads back exactly (integers without
// a fraction); NaN and infinities print as null. Not thread-safe; owns its
// output buffer until Take().
#ifndef TANDEM_SCHEDULES_JSON_WRITER_H_
#define TANDEM_SCHEDULES_JSON_WRITER_H_

#include <cstdint>
#include <string>
#include <vector>

namespace tandem::schedules {

class JsonWriter {
 public:
  JsonWriter& BeginObject();
  JsonWriter& EndObject();
  JsonWriter& BeginArray();
  JsonWriter& EndArray();
  // The key of the next member of the current object.
  JsonWriter& Key(const std::string& key);
  JsonWriter& String(const std::string& value);
  JsonWriter& Number(double value);
  JsonWriter& Int(int64_t value);
  JsonWriter& Bool(bool value);
  // Puts the next value, or the closing bracket, on a new line (after the
  // comma that separates it from the one before).
  JsonWriter& NewLine();

  // The text written so far; leaves the writer empty.
  std::string Take();

 private:
  void BeforeValue();
  void FlushNewLine();

  std::string out_;
  // One entry per open object or array: whether it has a member yet.
  std::vector<bool> has_member_;
  bool after_key_ = false;
  bool newline_pending_ = false;
};

// `text` as a JSON string literal, quotes included.
std::string JsonQuote(const std::string& text);

}  // namespace tandem::schedules

#endif  // TANDEM_SCHEDULES_JSON_WRITER_H_
