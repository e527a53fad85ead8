// `tandem bench NAME`: one benchmark, printing a table (or JSON with
// --json). Benchmarks are never timed tests.
#include "tools/cli/commands.h"

namespace tandem::cli {

void AddBenchCommand(CommandLine& command_line) {
  CLI::App* bench = command_line.AddGroup(command_line.root(), "bench", "run a benchmark and print its table",
                                          "Runs one benchmark and prints a table, or one JSON object with --json.");
  AddBlockBench(command_line, *bench);
  AddCompileBench(command_line, *bench);
  AddDataplaneBench(command_line, *bench);
  AddKernelsBench(command_line, *bench);
  AddPeersBench(command_line, *bench);
  AddCheckpointBench(command_line, *bench);
  AddGenerateBench(command_line, *bench);
  AddPipelineBenches(command_line, *bench);
  AddPlanBench(command_line, *bench);
  AddSchedBench(command_line, *bench);
  AddStepBench(command_line, *bench);
}

}  // namespace tandem::cli
