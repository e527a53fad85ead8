// Runs `tandem` commands in-process for the CLI's tests: a CommandLine with
// only the commands a test links, string streams for stdin, stdout and
// stderr, and the exit code.
#ifndef TANDEM_TESTS_TOOLS_COMMAND_RUN_H_
#define TANDEM_TESTS_TOOLS_COMMAND_RUN_H_

#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "tools/cli/command_line.h"

namespace tandem::cli {

struct CommandRun {
  int code = 0;
  std::string out;
  std::string err;
};

// `tandem args...` with the commands `add` declares, reading `stdin_text`.
inline CommandRun RunCommand(const std::function<void(CommandLine&)>& add, const std::vector<std::string>& args,
                             const std::string& stdin_text = "") {
  std::ostringstream out, err;
  std::istringstream in(stdin_text);
  CommandLine command_line({out, err, in});
  add(command_line);
  const int code = command_line.Run(args);
  return {code, out.str(), err.str()};
}

}  // namespace tandem::cli

#endif  // TANDEM_TESTS_TOOLS_COMMAND_RUN_H_
