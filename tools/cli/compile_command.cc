// `tandem compile`: compiles an example model for a schedule and prints
// every actor's instruction stream and static peak memory.
#include <ostream>

#include "controller/compiler.h"
#include "tools/cli/commands.h"
#include "tools/cli/example_job.h"
#include "schedules/resolve.h"

namespace tandem::cli {

int RunCompileCommand(const CommandArgs& args, std::ostream& out, std::ostream& err) {
  constexpr char kUsage[] =
      "usage: tandem compile [--model gpt|mlp] --schedule NAME|FILE --actors P --microbatches M\n"
      "                      [--virtual V] [--dump] [--functions]\n\n"
      "Compiles an example model for a schedule: prints a per-actor summary, and\n"
      "with --dump every actor's instruction stream (--functions adds the\n"
      "stage programs' graphs).\n\n";
  Arguments arguments;
  AddExampleOptions(arguments);
  arguments.AddOption("schedule", "a built-in schedule name or a .sched/.csv file", "1f1b");
  arguments.AddOption("actors", "pipeline actors", "4");
  arguments.AddOption("virtual", "stages per actor for interleaved, looped-bfs, zb-v (0: the default)", "0");
  arguments.AddFlag("dump", "print every actor's instruction stream");
  arguments.AddFlag("functions", "with --dump, also print the functions' graphs");
  arguments.AddFlag("help", "show this help");
  if (absl::Status status = arguments.Parse(args); !status.ok()) {
    err << "tandem compile: " << status.message() << "\n" << kUsage << arguments.Usage();
    return 2;
  }
  if (arguments.Flag("help")) {
    out << kUsage << arguments.Usage();
    return 0;
  }
  absl::StatusOr<int64_t> actors = arguments.GetInt("actors");
  absl::StatusOr<int64_t> microbatches = arguments.GetInt("microbatches");
  absl::StatusOr<int64_t> virtual_stages = arguments.GetInt("virtual");
  for (const auto* value : {&actors, &microbatches, &virtual_stages}) {
    if (!value->ok()) {
      err << "tandem compile: " << value->status().message() << "\n";
      return 2;
    }
  }
  absl::StatusOr<schedules::Schedule> schedule =
      schedules::ResolveSchedule(*arguments.Get("schedule"), static_cast<int32_t>(*actors), static_cast<int32_t>(*microbatches),
                      static_cast<int32_t>(*virtual_stages));
  if (!schedule.ok()) {
    err << "tandem compile: " << schedule.status().message() << "\n";
    return 1;
  }
  absl::StatusOr<ExampleJob> job = MakeExampleJob(arguments, schedule->num_stages);
  if (!job.ok()) {
    err << "tandem compile: " << job.status().message() << "\n";
    return 1;
  }
  absl::StatusOr<controller::CompiledStep> compiled = controller::Compile(job->step, *schedule);
  if (!compiled.ok()) {
    err << "tandem compile: " << compiled.status().message() << "\n";
    return 1;
  }
  std::string dump = controller::DumpCompiledStep(*compiled, arguments.Flag("functions"));
  if (!arguments.Flag("dump")) dump = dump.substr(0, dump.find("\nactor "));
  out << "# " << job->description << "\n" << dump;
  return 0;
}

}  // namespace tandem::cli
