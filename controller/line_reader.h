// LineReader: where the REPL's command lines come from. A script file; or,
// when stdin is a terminal, a prompt with line editing and history
// (libedit; the history file is $TANDEM_HISTORY, else ~/.tandem_history,
// read at the start and written at the end); or else stdin, each line
// echoed after the prompt so that a transcript reads like a session.
// Not thread-safe.
#ifndef TANDEM_CONTROLLER_LINE_READER_H_
#define TANDEM_CONTROLLER_LINE_READER_H_

#include <fstream>
#include <iosfwd>
#include <optional>
#include <string>

#include "absl/status/status.h"

namespace tandem {

class LineReader {
 public:
  // `prompt`, e.g. "(tandem) ". error() says whether `script` could be opened.
  LineReader(const std::optional<std::string>& script, std::string prompt);
  ~LineReader();
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;

  const absl::Status& error() const { return error_; }
  // Reading from a terminal (the prompt with line editing).
  bool interactive() const { return interactive_; }

  // The next line, or nullopt at the end of input. Echoes script and piped
  // lines to `out` after the prompt.
  std::optional<std::string> Next(std::ostream& out);

 private:
  std::string prompt_;
  std::ifstream file_;
  bool interactive_ = false;
  std::string history_;
  absl::Status error_;
};

}  // namespace tandem

#endif  // TANDEM_CONTROLLER_LINE_READER_H_
