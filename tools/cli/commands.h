// The subcommands of the `tandem` program. Each takes its arguments (after
// the subcommand name) and two streams, and returns the process exit code:
// 0 on success, 1 when the input was rejected (e.g. an invalid schedule),
// 2 on a usage error. Streams are passed in so that tests can drive them.
#ifndef TANDEM_TOOLS_CLI_COMMANDS_H_
#define TANDEM_TOOLS_CLI_COMMANDS_H_

#include <iosfwd>
#include <string>
#include <vector>

namespace tandem::cli {

using CommandArgs = std::vector<std::string>;

// `tandem ir dump --model mlp|gpt ...`: the traced, differentiated step as text.
int RunIrCommand(const CommandArgs& args, std::ostream& out, std::ostream& err);
// `tandem compile ...`: the per-actor instruction streams of an example model.
int RunCompileCommand(const CommandArgs& args, std::ostream& out, std::ostream& err);
// `tandem sched gen|check|sim|draw|convert ...`.
int RunSchedCommand(const CommandArgs& args, std::ostream& out, std::ostream& err);
// `tandem train ...`: trains an example model.
int RunTrainCommand(const CommandArgs& args, std::ostream& out, std::ostream& err);
// `tandem repl ...`: an interactive session over a live pipeline.
int RunReplCommand(const CommandArgs& args, std::ostream& out, std::ostream& err);
// `tandem bench NAME ...`: benchmarks printing tables.
int RunBenchCommand(const CommandArgs& args, std::ostream& out, std::ostream& err);
// `tandem bench block`: one GPT block's forward+backward, reference
// interpreter vs PyTorch on the CPU with the same thread count.
int RunBlockBench(const CommandArgs& args, std::ostream& out, std::ostream& err);
// `tandem bench compile`: trace + compile a 96-layer GPT, timed by phase.
int RunCompileBench(const CommandArgs& args, std::ostream& out, std::ostream& err);
// `tandem bench dataplane`: shm and TCP throughput between two processes
// next to memcpy and a raw loopback socket.
int RunDataplaneBench(const CommandArgs& args, std::ostream& out, std::ostream& err);
int RunDispatchBench(const CommandArgs& args, std::ostream& out, std::ostream& err);
int RunFidelityBench(const CommandArgs& args, std::ostream& out, std::ostream& err);
// `tandem bench sched`: validates and simulates a large interleaved schedule.
int RunSchedBench(const CommandArgs& args, std::ostream& out, std::ostream& err);

}  // namespace tandem::cli

#endif  // TANDEM_TOOLS_CLI_COMMANDS_H_
