// `tandem bench NAME`: dispatches to one benchmark. Benchmarks print tables
// (or JSON with --json); they are never timed tests.
#include <ostream>

#include "tools/cli/commands.h"

namespace tandem::cli {

int RunBenchCommand(const CommandArgs& args, std::ostream& out, std::ostream& err) {
  constexpr char kUsage[] =
      "usage: tandem bench <name> [options]\n\n"
      "benchmarks:\n"
      "  block      one GPT block forward+backward: reference interpreter vs PyTorch (CPU)\n"
      "  compile    trace and compile a 96-layer GPT for interleaved 1F1B (P=8, M=128)\n"
      "  dataplane  shm and TCP throughput between two processes vs memcpy\n"
      "  dispatch   fused vs per-task dispatch: RPCs and controller CPU per step (P=4, M=64)\n"
      "  fidelity   measured step time vs the simulator's prediction (GPipe, 1F1B, ZB-H1; P=2, M=16)\n"
      "  sched      validate and simulate a 64-actor interleaved schedule\n";
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    (args.empty() ? err : out) << kUsage;
    return args.empty() ? 2 : 0;
  }
  CommandArgs rest(args.begin() + 1, args.end());
  if (args[0] == "block") return RunBlockBench(rest, out, err);
  if (args[0] == "compile") return RunCompileBench(rest, out, err);
  if (args[0] == "dataplane") return RunDataplaneBench(rest, out, err);
  if (args[0] == "dispatch") return RunDispatchBench(rest, out, err);
  if (args[0] == "fidelity") return RunFidelityBench(rest, out, err);
  if (args[0] == "sched") return RunSchedBench(rest, out, err);
  err << "tandem bench: unknown benchmark '" << args[0] << "'\n\n" << kUsage;
  return 2;
}

}  // namespace tandem::cli
