// The `tandem` command line, on CLI11: one CLI::App per command and
// subcommand under the `tandem` app, each with its options bound to a
// struct the command owns and a body that runs after a successful parse.
//
// Every command behaves the same way:
//  - `--help` (or `-h`) anywhere prints that command's help on `out`: exit 0;
//  - a usage error (an unknown option, a value of the wrong type or out of
//    range, a missing argument, an unknown subcommand) prints
//    "tandem CMD: message" and a pointer to `tandem CMD --help` on `err`:
//    exit 2;
//  - otherwise the body's return value is the exit code: 0 on success, 1
//    when the input was rejected (an invalid schedule, a model that does not
//    fit), 2 for a usage error the body finds itself (UsageError).
// Integer options are parsed into their own type with a range, so a value
// that does not fit is refused, never narrowed.
//
// A CommandLine is built, run once and thrown away; not thread-safe.
#ifndef TANDEM_TOOLS_CLI_COMMAND_LINE_H_
#define TANDEM_TOOLS_CLI_COMMAND_LINE_H_

#include <functional>
#include <iosfwd>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace tandem::cli {

// Where a command reads and writes. Streams are passed in so that tests can
// drive commands in-process.
struct CommandStreams {
  std::ostream& out;
  std::ostream& err;
  std::istream& in;
};

// The check AtLeast() gives an integer option of type T.
template <typename T>
CLI::Validator IntegerAtLeast(T min) {
  const T max = std::numeric_limits<T>::max();
  return CLI::Validator(
      [min, max](std::string& text) -> std::string {
        T value{};
        if (absl::SimpleAtoi(text, &value) && value >= min) return "";
        return absl::StrCat("Value ", text, " is not an integer from ", min, " to ", max);
      },
      absl::StrCat("INT in [", min, " - ", max, "]"));
}

class CommandLine {
 public:
  explicit CommandLine(CommandStreams streams);
  CommandLine(const CommandLine&) = delete;
  CommandLine& operator=(const CommandLine&) = delete;

  // The `tandem` app itself.
  CLI::App& root() { return *root_; }
  CommandStreams& streams() { return streams_; }

  // Adds the subcommand `name` to `parent`. `summary` is its line in the
  // parent's list; `synopsis` follows "usage: tandem ... NAME " in its help
  // (e.g. "FILE [options]"); `description`, if any, is the paragraph after.
  CLI::App* Add(CLI::App& parent, const std::string& name, const std::string& summary, const std::string& synopsis,
                const std::string& description = "");

  // Adds `name`, a command whose work is done by its subcommands (`tandem
  // sched` of `tandem sched gen`): one of them must be named.
  CLI::App* AddGroup(CLI::App& parent, const std::string& name, const std::string& summary,
                     const std::string& description = "");

  // `body` runs when `command` was the one named on the command line, after
  // all of its options parsed; its return value is the exit code.
  void OnRun(CLI::App* command, std::function<int()> body);

  // Parses `args` (without the program name) and runs the command they
  // name. Returns the exit code.
  int Run(const std::vector<std::string>& args);

 private:
  CommandStreams streams_;
  std::unique_ptr<CLI::App> root_;
  int exit_code_ = 0;
};

// A check for an integer option (plain or std::optional) that names its
// bounds when it fails: the text is a decimal integer in [min, the largest
// value of the option's type]. CLI11 runs checks on the text before
// converting it, so a value too large for the type is refused with this
// message, never narrowed or saturated.
template <typename T>
CLI::Validator AtLeast(const T&, std::type_identity_t<T> min) {
  return IntegerAtLeast<T>(min);
}
template <typename T>
CLI::Validator AtLeast(const std::optional<T>&, std::type_identity_t<T> min) {
  return IntegerAtLeast<T>(min);
}

// Adds the integer option `name` ("--actors") of `command`, checked by
// AtLeast(value, min) and with its default shown in the help.
template <typename T>
CLI::Option* AddIntegerOption(CLI::App& command, const std::string& name, T& value, const std::string& help,
                              std::type_identity_t<T> min = 1) {
  return command.add_option(name, value, help)->check(IntegerAtLeast<T>(min))->capture_default_str();
}

// "tandem sched gen": the command's path from the root, for messages.
std::string CommandPath(const CLI::App& command);

// Prints "CMD: message" and the pointer to CMD --help on `err`; returns 2.
int UsageError(std::ostream& err, const CLI::App& command, const std::string& message);
// Prints "CMD: CODE: message" on `err` (CODE: the status's code name, e.g.
// INVALID_ARGUMENT); returns `exit_code`.
int Failure(std::ostream& err, const CLI::App& command, const absl::Status& status, int exit_code = 1);

}  // namespace tandem::cli

#endif  // TANDEM_TOOLS_CLI_COMMAND_LINE_H_
