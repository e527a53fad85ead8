// Command-line arguments of one `tandem` subcommand.
//
// Each subcommand declares the options it accepts; Parse() then splits argv
// into options and positionals and refuses anything undeclared, so a typo is
// an error and not a silently ignored flag. Not thread-safe; owned by the
// subcommand that parses.
#ifndef TANDEM_TOOLS_CLI_ARGUMENTS_H_
#define TANDEM_TOOLS_CLI_ARGUMENTS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tandem::cli {

class Arguments {
 public:
  // Declares `--name VALUE` (or `--name=VALUE`), described by `help`.
  void AddOption(std::string name, std::string help, std::optional<std::string> default_value = {});
  // Declares `--name`, a switch without a value.
  void AddFlag(std::string name, std::string help);

  // Parses `args` (without the program and subcommand names). An undeclared
  // option, a missing value or a repeated option is InvalidArgument.
  absl::Status Parse(const std::vector<std::string>& args);

  bool Has(const std::string& name) const;
  // The option's value, or its default, or nullopt.
  std::optional<std::string> Get(const std::string& name) const;
  // Like Get() for a required option: InvalidArgument naming it when absent.
  absl::StatusOr<std::string> Require(const std::string& name) const;
  // An integer option; InvalidArgument when absent (with no default) or not an integer.
  absl::StatusOr<int64_t> GetInt(const std::string& name) const;
  bool Flag(const std::string& name) const { return Has(name); }

  const std::vector<std::string>& positionals() const { return positionals_; }

  // One line per declared option, for --help.
  std::string Usage() const;

 private:
  struct Spec {
    std::string help;
    bool takes_value = true;
    std::optional<std::string> default_value;
  };
  std::map<std::string, Spec> specs_;
  std::vector<std::string> declaration_order_;
  std::map<std::string, std::string> values_;
  std::vector<std::string> positionals_;
};

}  // namespace tandem::cli

#endif  // TANDEM_TOOLS_CLI_ARGUMENTS_H_
