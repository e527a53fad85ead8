// `tandem compile`: compiles an example model for a schedule and prints
// every actor's instruction stream and static peak memory.
#include <memory>
#include <ostream>

#include "controller/compiler.h"
#include "tools/cli/commands.h"
#include "tools/cli/model_options.h"
#include "tools/cli/pipeline_options.h"

namespace tandem::cli {
namespace {

struct CompileOptions {
  examples::ExampleJobOptions model;
  ScheduleOptions schedule;
  bool dump = false;
  bool functions = false;
};

int RunCompile(const CLI::App& command, CompileOptions& options, CommandStreams& streams) {
  std::optional<examples::ExampleJob> job;
  bool usage_error = false;
  absl::StatusOr<schedules::Schedule> schedule =
      ResolveModelSchedule(command, options.schedule, options.model, job, usage_error);
  if (!schedule.ok()) {
    return usage_error ? UsageError(streams.err, command, std::string(schedule.status().message()))
                       : Failure(streams.err, command, schedule.status());
  }
  absl::StatusOr<controller::CompiledStep> compiled = controller::Compile(
      job->step, *schedule,
      {.remat = options.schedule.RematByStage(job->step.num_stages)});
  if (!compiled.ok()) return Failure(streams.err, command, compiled.status());
  std::string dump = controller::DumpCompiledStep(*compiled, options.functions);
  if (!options.dump) dump = dump.substr(0, dump.find("\nactor "));
  streams.out << "# " << job->description << "\n" << dump;
  return 0;
}

}  // namespace

void AddCompileCommand(CommandLine& command_line) {
  CLI::App* compile = command_line.Add(
      command_line.root(), "compile", "compile an example model for a schedule and dump the actors' programs",
      "[--model gpt|mlp] [--schedule NAME|FILE] [--actors P] [--microbatches M] [--virtual V] [--dump] [--functions]",
      "Compiles an example model for a schedule: prints a per-actor summary, and with --dump every actor's "
      "instruction stream (--functions adds the stage programs' graphs).");
  auto options = std::make_shared<CompileOptions>();
  AddModelOptions(*compile, options->model);
  AddScheduleOptions(*compile, options->schedule);
  compile->add_flag("--dump", options->dump, "print every actor's instruction stream");
  compile->add_flag("--functions", options->functions, "with --dump, also print the functions' graphs");
  command_line.OnRun(compile, [compile, options, &streams = command_line.streams()] {
    return RunCompile(*compile, *options, streams);
  });
}

}  // namespace tandem::cli
