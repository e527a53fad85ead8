// What an error message quotes of user input, wherever it comes from: a
// schedule or IR text file, a state file, a checkpoint manifest, a flag.
// Header-only, so that every folder may use it (schedules/ included, which
// depends on nothing else of Tandem but ir/ids.h). Pure; thread-safe.
#ifndef TANDEM_IR_EXCERPT_H_
#define TANDEM_IR_EXCERPT_H_

#include <algorithm>
#include <cstddef>
#include <string>

#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"

namespace tandem::ir {

inline constexpr size_t kMaxExcerptBytes = 40;

// At most kMaxExcerptBytes of `text` (cut before a split UTF-8 character),
// then "..." if it was longer; control characters as \xHH. A 100 MB token
// makes a short message.
inline std::string Excerpt(absl::string_view text) {
  size_t size = std::min(text.size(), kMaxExcerptBytes);
  if (size < text.size()) {
    // Back off over continuation bytes (10xxxxxx) to the start of a character.
    while (size > 0 && (static_cast<unsigned char>(text[size]) & 0xC0) == 0x80) --size;
  }
  std::string excerpt;
  for (char c : text.substr(0, size)) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      absl::StrAppendFormat(&excerpt, "\\x%02x", u);
    } else {
      excerpt += c;
    }
  }
  if (size < text.size()) excerpt += "...";
  return excerpt;
}

}  // namespace tandem::ir

#endif  // TANDEM_IR_EXCERPT_H_
