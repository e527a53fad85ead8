// `tandem export`: a checkpoint's parameters as a file other tools read.
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "controller/checkpoint.h"
#include "ir/safetensors.h"
#include "tools/cli/commands.h"

namespace tandem::cli {
namespace {

struct ExportOptions {
  std::string checkpoint;
  std::string format = "safetensors";
  std::string out;
};

}  // namespace

void AddExportCommand(CommandLine& command_line) {
  auto options = std::make_shared<ExportOptions>();
  CLI::App* command = command_line.Add(
      command_line.root(), "export", "write a checkpoint's parameters as a safetensors file",
      "--checkpoint DIR --out FILE [--format safetensors]",
      "Writes the parameters of the checkpoint DIR (or of the newest checkpoint under a --checkpoint-dir DIR, as "
      "--resume takes it) to FILE in Hugging Face's safetensors format, under their own names: the llama model's "
      "are Hugging Face LLaMA's (model.layers.0.self_attn.q_proj.weight, linear weights [out, in]), so PyTorch "
      "code for LLaMA loads them as they are. Optimizer state stays behind. Tensors are copied in pieces, never "
      "the whole model at once. `tandem train --import FILE` starts a run from such a file.");
  command->add_option("--checkpoint", options->checkpoint, "a checkpoint, or a --checkpoint-dir (its newest)")
      ->required();
  command->add_option("--format", options->format, "the file format")
      ->check(CLI::IsMember({"safetensors"}))
      ->capture_default_str();
  command->add_option("--out", options->out, "the file to write")->required();
  command_line.OnRun(command, [command, options, &streams = command_line.streams()] {
    absl::StatusOr<controller::LoadedCheckpoint> loaded = controller::LoadCheckpoint(options->checkpoint);
    if (!loaded.ok()) return Failure(streams.err, *command, loaded.status());
    streams.err << controller::SkippedReport(*loaded);
    if (!loaded->parameters_known) {
      return Failure(streams.err, *command,
                     absl::FailedPreconditionError(absl::StrCat(
                         "checkpoint ", loaded->path,
                         " was written before checkpoints listed their parameters (manifest version 2): resume "
                         "from it and save a new one to export it")));
    }
    std::vector<std::pair<std::string, ir::StateSource>> tensors;
    int64_t bytes = 0;
    for (const std::string& name : loaded->parameters) {
      const ir::StateSource& source = loaded->state.at(name);
      bytes += source.type.num_bytes();
      tensors.emplace_back(name, source);
    }
    const std::map<std::string, std::string> metadata = {
        {"format", "pt"}, {"tandem.model", loaded->model}, {"tandem.step", absl::StrCat(loaded->step)}};
    if (absl::Status status = ir::WriteSafetensors(options->out, tensors, metadata); !status.ok()) {
      return Failure(streams.err, *command, status);
    }
    streams.out << absl::StrFormat("exported %d parameters (%d bytes) of %s after step %d from %s to %s\n",
                                   tensors.size(), bytes, loaded->model, loaded->step, loaded->path, options->out);
    return 0;
  });
}

}  // namespace tandem::cli
