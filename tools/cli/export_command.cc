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
#include "ir/safetensors.h"
#include "ir/state_file.h"
#include "nlohmann/json.hpp"
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
};

// transformers' LlamaConfig of `c` (config.json of LlamaForCausalLM): the
// parameters keep their names and layouts, which are Hugging Face's.
nlohmann::ordered_json HuggingFaceLlamaConfig(const examples::LlamaConfig& c) {
  return {{"architectures", {"LlamaForCausalLM"}},
          {"model_type", "llama"},
          {"vocab_size", c.vocab_size},
          {"hidden_size", c.model_dim},
          {"intermediate_size", examples::LlamaMlpWidth(c)},
          {"num_hidden_layers", c.num_layers},
          {"num_attention_heads", c.num_heads},
          {"num_key_value_heads", c.num_kv_heads},
          {"head_dim", c.model_dim / c.num_heads},
          {"max_position_embeddings", c.sequence_length},
          {"rms_norm_eps", c.norm_eps},
          // transformers 5 reads rope_parameters, earlier versions rope_theta.
          {"rope_theta", c.rope_theta},
          {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", c.rope_theta}}},
          {"hidden_act", "silu"},
          {"attention_bias", false},
          {"mlp_bias", false},
          {"tie_word_embeddings", c.tied_head},
          {"initializer_range", c.init_std},
          {"dtype", "float32"},
          {"use_cache", true}};
}

// The checkpoint `loaded` as the Hugging Face model directory `dir`:
// config.json, generation_config.json and model.safetensors (its
// parameters, copied in pieces). FailedPrecondition, naming the tensor and
// asking for the model options it was trained with, when the checkpoint's
// parameters are not the model's; Unimplemented for a model other than
// llama.
absl::Status WriteHuggingFaceModel(const controller::LoadedCheckpoint& loaded, examples::ExampleJobOptions model,
                                   const std::string& dir) {
  if (model.model != "llama") {
    return absl::UnimplementedError(absl::StrCat(
        "--format hf writes llama models (LlamaForCausalLM); ", model.model,
        " is not exported to Hugging Face's format yet: --format safetensors writes its parameters"));
  }
  model = WholeModelOptions(model, 1);
  absl::StatusOr<examples::ExampleJob> job = examples::MakeExampleJob(model);
  if (!job.ok()) return job.status();
  absl::StatusOr<std::vector<std::pair<std::string, ir::StateSource>>> fitted =
      ModelParameterSources(loaded.state, absl::StrCat("checkpoint ", loaded.path), job->step);
  if (!fitted.ok()) return fitted.status();
  const std::vector<std::pair<std::string, ir::StateSource>>& tensors = *fitted;
  if (tensors.size() != loaded.parameters.size()) {
    return absl::FailedPreconditionError(absl::StrCat("checkpoint ", loaded.path, " holds ",
                                                      loaded.parameters.size(), " parameters, this model ",
                                                      tensors.size(), ": pass the model options it was trained with"));
  }
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) return absl::InternalError(absl::StrCat("cannot make the directory ", dir, ": ", error.message()));
  const std::map<std::string, std::string> metadata = {
      {"format", "pt"}, {"tandem.model", loaded.model}, {"tandem.step", absl::StrCat(loaded.step)}};
  if (absl::Status status = ir::WriteSafetensors(dir + "/model.safetensors", tensors, metadata); !status.ok()) {
    return status;
  }
  if (absl::Status status =
          ir::WriteFileAtomically(dir + "/config.json", HuggingFaceLlamaConfig(*job->llama).dump(2) + "\n");
      !status.ok()) {
    return status;
  }
  const nlohmann::ordered_json generation = {{"do_sample", false}};
  return ir::WriteFileAtomically(dir + "/generation_config.json", generation.dump(2) + "\n");
}

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
      "the whole model at once. `tandem train --import FILE` starts a run from such a file. With --format hf, "
      "DIR becomes a model directory that transformers' AutoModelForCausalLM.from_pretrained loads as it is "
      "(config.json from the model options it was trained with, generation_config.json, model.safetensors): "
      "llama models, as LlamaForCausalLM; the tokenizer is not written yet.");
  command->add_option("--checkpoint", options->checkpoint, "a checkpoint, or a --checkpoint-dir (its newest)")
      ->required();
  command->add_option("--format", options->format, "the file format")
      ->check(CLI::IsMember({"safetensors", "hf"}))
      ->capture_default_str();
  command->add_option("--out", options->out, "the file (--format hf: the directory) to write")->required();
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
      if (absl::Status status = WriteHuggingFaceModel(*loaded, options->model, options->out); !status.ok()) {
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
