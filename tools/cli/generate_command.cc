// `tandem generate`: text from a trained language model's checkpoint, on the
// reference interpreter (examples/generation.h).
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "controller/memory_fit.h"
#include "examples/generation.h"
#include "tools/cli/commands.h"
#include "tools/cli/model_options.h"
#include "tools/cli/model_parameters.h"

namespace tandem::cli {
namespace {

struct GenerateOptions {
  examples::ExampleJobOptions model;
  ParameterFile parameters;
  std::string prompt;
  examples::SamplingOptions sampling;
};

}  // namespace

void AddGenerateCommand(CommandLine& command_line) {
  auto options = std::make_shared<GenerateOptions>();
  CLI::App* command = command_line.Add(
      command_line.root(), "generate", "continue a prompt with a trained gpt or llama checkpoint",
      "(--checkpoint DIR | --import F.safetensors | --import HF_DIR) --prompt TEXT [--tokens N] "
      "[--temperature T --top-k K] [the model options it trained with]",
      "Loads the parameters of the checkpoint DIR (or the newest under a --checkpoint-dir) into the model the "
      "options describe (the ones it was trained with: --model, sizes, --tokenizer and --data, or --data alone "
      "for a character-level model), and extends TEXT by N tokens on the reference interpreter: each token is "
      "one forward pass over the model's window of --seq tokens (no KV cache), then greedy decoding (the "
      "default) or sampling at --temperature among the --top-k most likely, seeded by --seed. --import takes "
      "the parameters from a safetensors file instead, or from a Hugging Face model directory, which gives the "
      "model and its shape itself (`tandem export --format hf` writes one).");
  AddModelOptions(*command, options->model);
  CLI::Option* checkpoint = command->add_option("--checkpoint", options->parameters.checkpoint,
                                                 "a checkpoint, or a --checkpoint-dir (its newest)");
  command
      ->add_option("--import", options->parameters.import,
                   "a safetensors file of the model's parameters, or a Hugging Face model directory")
      ->excludes(checkpoint);
  command->add_option("--prompt", options->prompt, "the text to continue")->required();
  command->add_option("--tokens", options->sampling.tokens, "tokens to generate")->capture_default_str();
  command->add_option("--temperature", options->sampling.temperature, "0: greedy; above 0: sample")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  command->add_option("--top-k", options->sampling.top_k, "sample among the k most likely (0: all)")
      ->check(CLI::NonNegativeNumber);
  command_line.OnRun(command, [command, options, &streams = command_line.streams()] {
    if (options->parameters.checkpoint.empty() && options->parameters.import.empty()) {
      return Failure(streams.err, *command,
                     absl::InvalidArgumentError("generate needs the parameters: --checkpoint DIR or --import FILE"),
                     2);
    }
    if (absl::Status status = TakeImportedModel(*command, options->parameters.import, options->model); !status.ok()) {
      return Failure(streams.err, *command, status, 2);
    }
    examples::ExampleJobOptions model = options->model;
    if (model.model != "gpt" && model.model != "llama") {
      return Failure(streams.err, *command,
                     absl::InvalidArgumentError(absl::StrCat("generate needs a language model (gpt or llama), not ",
                                                             model.model)),
                     2);
    }
    model = WholeModelOptions(model, 1);
    options->sampling.seed = model.seed;
    absl::StatusOr<examples::ExampleJob> job = examples::MakeExampleJob(model);
    if (!job.ok()) return Failure(streams.err, *command, job.status());
    absl::StatusOr<ir::TrainStep> forward = TraceForwardStep("generate", job->logits);
    if (!forward.ok()) return Failure(streams.err, *command, forward.status());
    if (absl::Status fits = controller::CheckWholeModelFitsThisHost(*forward, controller::WholeModel::kParameters);
        !fits.ok()) {
      return Failure(streams.err, *command, fits);
    }
    absl::StatusOr<ir::TensorMap> parameters =
        LoadModelParameters(options->parameters, model.model, *forward, streams.err);
    if (!parameters.ok()) return Failure(streams.err, *command, parameters.status());
    absl::StatusOr<std::vector<int32_t>> prompt = job->corpus->Encode(options->prompt);
    if (!prompt.ok()) return Failure(streams.err, *command, prompt.status());
    absl::StatusOr<std::vector<int32_t>> generated =
        examples::Generate(forward->microbatch, *parameters, *prompt, options->sampling);
    if (!generated.ok()) return Failure(streams.err, *command, generated.status());
    absl::StatusOr<std::string> text = job->corpus->Decode(*generated);
    if (!text.ok()) return Failure(streams.err, *command, text.status());
    streams.out << options->prompt << *text << "\n";
    return 0;
  });
}

}  // namespace tandem::cli
