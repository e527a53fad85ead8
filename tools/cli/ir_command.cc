// `tandem ir dump`: prints the traced, differentiated training step.
#include <memory>
#include <ostream>

#include "ir/printer.h"
#include "tools/cli/commands.h"
#include "tools/cli/model_options.h"

namespace tandem::cli {

void AddIrCommand(CommandLine& command_line) {
  CLI::App* ir = command_line.AddGroup(command_line.root(), "ir", "dump the traced, differentiated training step");
  CLI::App* dump = command_line.Add(*ir, "dump", "print the traced step of an example model as IR text",
                                    "[--model gpt|mlp] [options]",
                                    "Prints the traced, differentiated training step of an example model in the IR's "
                                    "text format (ir/parser.h reads it back).");
  auto options = std::make_shared<examples::ExampleJobOptions>();
  AddModelOptions(*dump, *options);
  command_line.OnRun(dump, [dump, options, &streams = command_line.streams()] {
    absl::StatusOr<examples::ExampleJob> job = examples::MakeExampleJob(*options);
    if (!job.ok()) return Failure(streams.err, *dump, job.status());
    streams.out << "# " << job->description << "\n" << ir::PrintTrainStep(job->step);
    return 0;
  });
}

}  // namespace tandem::cli
