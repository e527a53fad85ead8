#include "tools/cli/commands.h"

namespace tandem::cli {

void AddAllCommands(CommandLine& command_line) {
  AddIrCommand(command_line);
  AddSchedCommand(command_line);
  AddCompileCommand(command_line);
  AddProfileCommand(command_line);
  AddPlanCommand(command_line);
  AddTrainCommand(command_line);
  AddExportCommand(command_line);
  AddGenerateCommand(command_line);
  AddEvalCommand(command_line);
  AddTokenizeCommand(command_line);
  AddReplCommand(command_line);
  AddBenchCommand(command_line);
}

int RunTandem(const std::vector<std::string>& args, CommandStreams streams) {
  CommandLine command_line(streams);
  AddAllCommands(command_line);
  return command_line.Run(args);
}

}  // namespace tandem::cli
