// `tandem ir dump`: prints the traced, differentiated training step.
#include <ostream>

#include "ir/printer.h"
#include "tools/cli/commands.h"
#include "tools/cli/example_job.h"

namespace tandem::cli {

int RunIrCommand(const CommandArgs& args, std::ostream& out, std::ostream& err) {
  Arguments arguments;
  AddExampleOptions(arguments);
  arguments.AddFlag("help", "show this help");
  constexpr char kUsage[] = "usage: tandem ir dump [--model gpt|mlp] [options]\n\n";
  if (absl::Status status = arguments.Parse(args); !status.ok()) {
    err << "tandem ir: " << status.message() << "\n" << kUsage << arguments.Usage();
    return 2;
  }
  if (arguments.Flag("help")) {
    out << kUsage << "Prints the traced, differentiated training step of an example model.\n\n"
        << arguments.Usage();
    return 0;
  }
  if (arguments.positionals().size() != 1 || arguments.positionals()[0] != "dump") {
    err << "tandem ir: expected the subcommand 'dump'\n" << kUsage;
    return 2;
  }
  absl::StatusOr<ExampleJob> job = MakeExampleJob(arguments);
  if (!job.ok()) {
    err << "tandem ir: " << job.status().message() << "\n";
    return 1;
  }
  out << "# " << job->description << "\n" << ir::PrintTrainStep(job->step);
  return 0;
}

}  // namespace tandem::cli
