#include "controller/line_reader.h"

#include <unistd.h>

#include <cstdlib>
#include <iostream>

#include <editline/readline.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace tandem {

LineReader::LineReader(const std::optional<std::string>& script, std::string prompt) : prompt_(std::move(prompt)) {
  if (script.has_value()) {
    file_.open(*script);
    if (!file_) error_ = absl::NotFoundError(absl::StrCat("cannot open the script ", *script));
    return;
  }
  interactive_ = isatty(STDIN_FILENO) != 0;
  if (!interactive_) return;
  if (const char* path = std::getenv("TANDEM_HISTORY"); path != nullptr) {
    history_ = path;
  } else {
    const char* home = std::getenv("HOME");
    history_ = absl::StrCat(home != nullptr ? home : ".", "/.tandem_history");
  }
  using_history();
  read_history(history_.c_str());
}

LineReader::~LineReader() {
  if (interactive_) write_history(history_.c_str());
}

std::optional<std::string> LineReader::Next(std::ostream& out) {
  if (interactive_) {
    char* line = readline(prompt_.c_str());
    if (line == nullptr) return std::nullopt;
    std::string text(line);
    std::free(line);
    if (!absl::StripAsciiWhitespace(text).empty()) add_history(text.c_str());
    return text;
  }
  std::istream& in = file_.is_open() ? static_cast<std::istream&>(file_) : std::cin;
  std::string text;
  if (!std::getline(in, text)) return std::nullopt;
  out << prompt_ << text << "\n";
  return text;
}

}  // namespace tandem
