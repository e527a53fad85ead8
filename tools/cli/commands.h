// The commands of the `tandem` program. Each Add function declares one
// command (with its subcommands and options) on the command line; its body
// runs when the command is named. Exit codes: 0 on success, 1 when the input
// was rejected (e.g. an invalid schedule), 2 on a usage error
// (tools/cli/command_line.h).
#ifndef TANDEM_TOOLS_CLI_COMMANDS_H_
#define TANDEM_TOOLS_CLI_COMMANDS_H_

#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "tools/cli/command_line.h"

namespace tandem::cli {

// Adds every command below to `command_line`.
void AddAllCommands(CommandLine& command_line);
// Runs `tandem args...` with every command: what main() calls.
int RunTandem(const std::vector<std::string>& args, CommandStreams streams);

// `tandem ir dump ...`: the traced, differentiated step as text.
void AddIrCommand(CommandLine& command_line);
// `tandem compile ...`: the per-actor instruction streams of an example model.
void AddCompileCommand(CommandLine& command_line);
// `tandem profile ...`: an example model's segments measured, as a cost file.
void AddProfileCommand(CommandLine& command_line);
// `tandem plan`.
void AddPlanCommand(CommandLine& command_line);
// `tandem sched gen|check|convert|sim|draw ...`.
void AddSchedCommand(CommandLine& command_line);
// `tandem train ...`: trains an example model.
void AddTrainCommand(CommandLine& command_line);
// `tandem tokenize ...`: trains a BPE tokenizer, or encodes a text.
void AddTokenizeCommand(CommandLine& command_line);
// `tandem generate ...`: continues a prompt with a trained checkpoint.
void AddGenerateCommand(CommandLine& command_line);
// `tandem eval ...`: a language model's mean loss over a corpus's first
// windows.
void AddEvalCommand(CommandLine& command_line);
// `tandem export ...`: a checkpoint's parameters as a safetensors file.
void AddExportCommand(CommandLine& command_line);
// `tandem repl ...`: an interactive session over a live pipeline.
void AddReplCommand(CommandLine& command_line);
// `tandem bench NAME ...`: benchmarks that print tables (or JSON with
// --json); never timed tests.
void AddBenchCommand(CommandLine& command_line);

// The benchmarks, each a subcommand of `bench`:
// `block`: one GPT block's forward+backward, Tandem's device vs PyTorch.
void AddBlockBench(CommandLine& command_line, CLI::App& bench);
// `step`: one GPT training step on the reference at several kernel thread
// counts, vs PyTorch.
void AddStepBench(CommandLine& command_line, CLI::App& bench);
// `kernels`: every kernel of a model's training step, timed one by one at
// its shapes, on the CPU or a GPU (beside the CPU's time).
void AddKernelsBench(CommandLine& command_line, CLI::App& bench);
// `compile`: trace + compile a large GPT, timed by phase.
void AddCompileBench(CommandLine& command_line, CLI::App& bench);
// `dataplane`: shm and TCP throughput between two processes next to memcpy
// and a raw loopback socket.
void AddDataplaneBench(CommandLine& command_line, CLI::App& bench);
// `dispatch` (fused vs per-task dispatch) and `fidelity` (measured step vs
// the simulator's prediction).
void AddPipelineBenches(CommandLine& command_line, CLI::App& bench);
// `tandem bench checkpoint`: what a checkpoint adds to the step time,
// written behind the steps or waited for (checkpoint_bench.cc).
void AddCheckpointBench(CommandLine& command_line, CLI::App& bench);
// `tandem bench generate`: generation without and with a KV cache, and
// through a pipeline (generate_bench.cc).
void AddGenerateBench(CommandLine& command_line, CLI::App& bench);
// `tandem bench peers`: Tandem beside PyTorch 2 and JAX (peers_bench.cc).
void AddPeersBench(CommandLine& command_line, CLI::App& bench);
// `sched`: validates and simulates a large interleaved schedule.
void AddSchedBench(CommandLine& command_line, CLI::App& bench);
// `tandem bench plan`: planning time; predicted vs measured steps of plans.
void AddPlanBench(CommandLine& command_line, CLI::App& bench);

}  // namespace tandem::cli

#endif  // TANDEM_TOOLS_CLI_COMMANDS_H_
