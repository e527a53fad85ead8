// `tandem`: the command-line front end. main() only dispatches to the
// subcommands of tools/cli/.
#include <iostream>
#include <string>
#include <vector>

#include "tools/cli/commands.h"

namespace {

constexpr char kUsage[] =
    "usage: tandem <command> [options]\n"
    "\n"
    "commands:\n"
    "  ir      dump the traced, differentiated training step of an example model\n"
    "  sched   generate, check, simulate, draw and convert pipeline schedules\n"
    "  compile compile an example model for a schedule and dump the actors' programs\n"
    "  train   train an example model\n"
    "  repl    an interactive session over a live pipeline (breakpoints, inspect, ...)\n"
    "  bench   run a benchmark and print its table\n"
    "\n"
    "Run `tandem <command> --help` for the options of one command.\n";

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    std::cout << kUsage;
    return args.empty() ? 2 : 0;
  }
  const std::string command = args[0];
  args.erase(args.begin());
  using tandem::cli::CommandArgs;
  if (command == "ir") return tandem::cli::RunIrCommand(args, std::cout, std::cerr);
  if (command == "compile") return tandem::cli::RunCompileCommand(args, std::cout, std::cerr);
  if (command == "sched") return tandem::cli::RunSchedCommand(args, std::cout, std::cerr);
  if (command == "train") return tandem::cli::RunTrainCommand(args, std::cout, std::cerr);
  if (command == "repl") return tandem::cli::RunReplCommand(args, std::cout, std::cerr);
  if (command == "bench") return tandem::cli::RunBenchCommand(args, std::cout, std::cerr);
  std::cerr << "tandem: unknown command '" << command << "'\n\n" << kUsage;
  return 2;
}
