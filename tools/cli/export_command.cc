// `tandem export`: a checkpoint's parameters as a file other tools read, or
// as a model directory Hugging Face's transformers loads.
#include <filesystem>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "controller/checkpoint.h"
#include "examples/example_job.h"
#include "examples/hugging_face.h"
#include "ir/safetensors.h"
#include "ir/state_file.h"
#include "tools/cli/commands.h"
#include "tools/cli/model_options.h"
#include "tools/cli/model_parameters.h"

namespace tandem::cli {
namespace {

struct ExportOptions {
  std::string checkpoint;
  std::string format = "safetensors";
  std::string out;
  examples::ExampleJobOptions model;  // --format hf: the options it trained with
  int64_t max_shard_bytes = examples::kDefaultShardBytes;
};

// The checkpoint `loaded` as the Hugging Face model directory `dir`
// (examples/hugging_face.h). FailedPrecondition, naming the tensor and
// asking for the model options it was trained with, when the checkpoint's
// parameters are not the model's.
absl::Status WriteHuggingFaceDirectory(const controller::LoadedCheckpoint& loaded, const ExportOptions& options) {
  const examples::ExampleJobOptions model = WholeModelOptions(options.model, 1);
  absl::StatusOr<examples::ExampleJob> job = examples::MakeExampleJob(model);
  if (!job.ok()) return job.status();
  absl::StatusOr<std::vector<std::pair<std::string, ir::StateSource>>> fitted =
      ModelParameterSources(loaded.state, absl::StrCat("checkpoint ", loaded.path), job->step);
  if (!fitted.ok()) return fitted.status();
  if (fitted->size() != loaded.parameters.size()) {
    return absl::FailedPreconditionError(absl::StrCat("checkpoint ", loaded.path, " holds ",
                                                      loaded.parameters.size(), " parameters, this model ",
                                                      fitted->size(), ": pass the model options it was trained with"));
  }
  examples::HuggingFaceExport how;
  how.max_shard_bytes = options.max_shard_bytes;
  how.metadata = {{"format", "pt"}, {"tandem.model", loaded.model}, {"tandem.step", absl::StrCat(loaded.step)}};
  return examples::WriteHuggingFaceModel(options.out, *job, model, *fitted, how);
}

}  // namespace

void AddExportCommand(CommandLine& command_line) {
  auto options = std::make_shared<ExportOptions>();
  CLI::App* command = command_line.Add(
      command_line.root(), "export",
      "write a checkpoint's parameters as a safetensors file or a Hugging Face model directory",
      "--checkpoint DIR --out FILE [--format safetensors] | --checkpoint DIR --format hf --out DIR "
      "[--max-shard-size BYTES] [the model options it trained with]",
      "Writes the parameters of the checkpoint DIR (or of the newest checkpoint under a --checkpoint-dir DIR, as "
      "--resume takes it) to FILE in Hugging Face's safetensors format, under their own names: the llama model's "
      "are Hugging Face LLaMA's (model.layers.0.self_attn.q_proj.weight, linear weights [out, in]), so PyTorch "
      "code for LLaMA loads them as they are. Optimizer state stays behind. Tensors are copied in pieces, never "
      "the whole model at once. `tandem train --import FILE` starts a run from such a file. With --format hf, "
      "DIR becomes a model directory that transformers' AutoModelForCausalLM.from_pretrained loads as it is "
      "(config.json from the model options it was trained with, generation_config.json, model.safetensors or, "
      "above --max-shard-size, shards and their index): gpt as GPT2LMHeadModel, llama as LlamaForCausalLM; with "
      "the SentencePiece tokenizer it trained with (--tokenizer), tokenizer.model and tokenizer_config.json, "
      "which AutoTokenizer loads (a character-level model's directory has no tokenizer).");
  command->add_option("--checkpoint", options->checkpoint, "a checkpoint, or a --checkpoint-dir (its newest)")
      ->required();
  command->add_option("--format", options->format, "the file format")
      ->check(CLI::IsMember({"safetensors", "hf"}))
      ->capture_default_str();
  command->add_option("--out", options->out, "the file (--format hf: the directory) to write")->required();
  command
      ->add_option("--max-shard-size", options->max_shard_bytes,
                   "--format hf: the most bytes of tensors in one safetensors file (transformers' default)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 50))
      ->capture_default_str();
  AddModelOptions(*command, options->model);
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
    if (options->format == "hf") {
      if (absl::Status status = WriteHuggingFaceDirectory(*loaded, *options); !status.ok()) {
        return Failure(streams.err, *command, status);
      }
      streams.out << absl::StrFormat("exported %s after step %d from %s to the Hugging Face model directory %s\n",
                                     loaded->model, loaded->step, loaded->path, options->out);
      return 0;
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
