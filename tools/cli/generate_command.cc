// `tandem generate`: text from a trained language model's checkpoint or an
// imported model, with a KV cache (controller/generation.h) in this process
// or through a pipeline of actors (--actors N), or without one
// (--no-kv-cache: examples/generation.h, the uncached reference).
#include <algorithm>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "backends/cpu/kernels.h"
#include "controller/compiler.h"
#include "controller/generation.h"
#include "controller/memory_fit.h"
#include "examples/generation.h"
#include "ir/trace.h"
#include "schedules/generators.h"
#include "tools/cli/commands.h"
#include "tools/cli/model_options.h"
#include "tools/cli/model_parameters.h"
#include "tools/cli/pipeline_options.h"

namespace tandem::cli {
namespace {

struct GenerateOptions {
  examples::ExampleJobOptions model;
  ParameterFile parameters;
  std::vector<std::string> prompts;
  examples::SamplingOptions sampling;
  int32_t actors = 0;  // 0: this process
  bool no_cache = false;
  LauncherOptions launcher;
};

// "12 tokens in 0.034 s (352.9 tokens/s, 1 step)".
std::string Rate(int64_t tokens, double seconds, int64_t steps) {
  return absl::StrFormat("%d tokens in %.3f s (%.1f tokens/s, %d step%s)", tokens, seconds,
                         seconds > 0 ? static_cast<double>(tokens) / seconds : 0.0, steps, steps == 1 ? "" : "s");
}

}  // namespace

void AddGenerateCommand(CommandLine& command_line) {
  auto options = std::make_shared<GenerateOptions>();
  CLI::App* command = command_line.Add(
      command_line.root(), "generate", "continue prompts with a trained gpt or llama, with a KV cache",
      "(--checkpoint DIR | --import F.safetensors | --import HF_DIR) --prompt TEXT [--prompt TEXT ...] "
      "[--tokens N] [--temperature T --top-k K] [--actors N [--microbatches M] [launcher options]] "
      "[--no-kv-cache] [the model options it trained with]",
      "Loads the parameters of the checkpoint DIR (or the newest under a --checkpoint-dir) into the model the "
      "options describe (the ones it was trained with: --model, sizes, --tokenizer and --data, or --data alone "
      "for a character-level model), and extends each TEXT by N tokens: greedy decoding (the default) or "
      "sampling at --temperature among the --top-k most likely, seeded by --seed. Each attention keeps its keys "
      "and values in a cache of the model's window (--seq): a prompt's prefill is one forward pass, then each "
      "token is one step of one position; a sequence that outgrows the window slides it, a prefill of its last "
      "--seq tokens per token, as the uncached generation does. With --actors N the model is split into N "
      "stages on N actors (--launcher local: processes, or threads) that keep their layers' caches; the prompts "
      "form --microbatches microbatches (default: N, at most one per prompt) that keep the stages busy. "
      "--no-kv-cache runs the uncached generation instead: a whole forward over the window per token, one "
      "prompt at a time. The text of each prompt goes to stdout, a line each; the prefill and decode "
      "throughput to stderr. --import takes the parameters from a safetensors file instead, or from a Hugging "
      "Face model directory, which gives the model and its shape itself (`tandem export --format hf` writes "
      "one).");
  AddModelOptions(*command, options->model);
  CLI::Option* checkpoint = command->add_option("--checkpoint", options->parameters.checkpoint,
                                                 "a checkpoint, or a --checkpoint-dir (its newest)");
  command
      ->add_option("--import", options->parameters.import,
                   "a safetensors file of the model's parameters, or a Hugging Face model directory")
      ->excludes(checkpoint);
  command->add_option("--prompt", options->prompts, "a text to continue (repeat for several)")->required();
  command->add_option("--tokens", options->sampling.tokens, "tokens to generate for each prompt")
      ->capture_default_str();
  command->add_option("--temperature", options->sampling.temperature, "0: greedy; above 0: sample")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  command->add_option("--top-k", options->sampling.top_k, "sample among the k most likely (0: all)")
      ->check(CLI::NonNegativeNumber);
  CLI::Option* actors =
      command->add_option("--actors", options->actors, "actors of a pipeline, one stage each (0: this process)")
          ->check(CLI::Range(0, 4096))
          ->capture_default_str();
  command->add_flag("--no-kv-cache", options->no_cache, "the uncached generation: a whole forward per token")
      ->excludes(actors);
  AddLauncherOptions(*command, options->launcher);
  command_line.OnRun(command, [command, options, &streams = command_line.streams()] {
    GenerateOptions& o = *options;
    if (o.parameters.checkpoint.empty() && o.parameters.import.empty()) {
      return Failure(streams.err, *command,
                     absl::InvalidArgumentError("generate needs the parameters: --checkpoint DIR or --import FILE"),
                     2);
    }
    if (absl::Status status = TakeImportedModel(*command, o.parameters.import, o.model); !status.ok()) {
      return Failure(streams.err, *command, status, 2);
    }
    if (o.model.model != "gpt" && o.model.model != "llama") {
      return Failure(streams.err, *command,
                     absl::InvalidArgumentError(absl::StrCat("generate needs a language model (gpt or llama), not ",
                                                             o.model.model)),
                     2);
    }
    o.sampling.seed = o.model.seed;
    if (absl::Status status = examples::CheckSamplingOptions(o.sampling); !status.ok()) {
      return Failure(streams.err, *command, status, 2);
    }
    const int64_t prompts = static_cast<int64_t>(o.prompts.size());
    // The prompts in microbatches: one per actor (or as --microbatches
    // says), never more than there are prompts.
    int32_t microbatches = 1;
    if (o.actors > 0) {
      microbatches = command->count("--microbatches") > 0 ? o.model.microbatches : o.actors;
      microbatches = static_cast<int32_t>(std::min<int64_t>(microbatches, prompts));
    }
    const int64_t batch = o.no_cache ? 1 : (prompts + microbatches - 1) / microbatches;
    examples::ExampleJobOptions model = WholeModelOptions(o.model, batch);
    model.microbatches = microbatches;
    if (o.actors > 0) model.stages = o.actors;
    absl::StatusOr<examples::ExampleJob> job = examples::MakeExampleJob(model);
    if (!job.ok()) return Failure(streams.err, *command, job.status());
    std::vector<std::vector<int32_t>> ids;
    for (const std::string& prompt : o.prompts) {
      absl::StatusOr<std::vector<int32_t>> encoded = job->corpus->Encode(prompt);
      if (!encoded.ok()) return Failure(streams.err, *command, encoded.status());
      if (encoded->empty()) {
        return Failure(streams.err, *command,
                       absl::InvalidArgumentError(absl::StrCat("prompt '", prompt, "' encodes to no token")), 2);
      }
      ids.push_back(*std::move(encoded));
    }
    std::vector<std::vector<int32_t>> generated;
    if (o.no_cache) {
      absl::StatusOr<ir::TrainStep> forward = TraceForwardStep("generate", job->logits);
      if (!forward.ok()) return Failure(streams.err, *command, forward.status());
      if (absl::Status fits = controller::CheckWholeModelFitsThisHost(*forward, controller::WholeModel::kParameters);
          !fits.ok()) {
        return Failure(streams.err, *command, fits);
      }
      absl::StatusOr<ir::TensorMap> parameters =
          LoadModelParameters(o.parameters, model.model, *forward, streams.err);
      if (!parameters.ok()) return Failure(streams.err, *command, parameters.status());
      const absl::Time start = absl::Now();
      for (const std::vector<int32_t>& prompt : ids) {
        absl::StatusOr<std::vector<int32_t>> tokens =
            examples::Generate(forward->microbatch, *parameters, prompt, o.sampling);
        if (!tokens.ok()) return Failure(streams.err, *command, tokens.status());
        generated.push_back(*std::move(tokens));
      }
      const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
      streams.err << "generate: without a KV cache: "
                  << Rate(prompts * o.sampling.tokens, seconds, prompts * o.sampling.tokens) << "\n";
    } else {
      absl::StatusOr<controller::GenerationSteps> steps = TraceGenerationSteps(model);
      if (!steps.ok()) return Failure(streams.err, *command, steps.status());
      absl::StatusOr<std::unique_ptr<controller::Generator>> generator;
      std::string where = "in this process";
      if (o.actors == 0) {
        if (absl::Status fits =
                controller::CheckWholeModelFitsThisHost(steps->prefill, controller::WholeModel::kParameters);
            !fits.ok()) {
          return Failure(streams.err, *command, fits);
        }
        absl::StatusOr<ir::TensorMap> parameters =
            LoadModelParameters(o.parameters, model.model, steps->prefill, streams.err);
        if (!parameters.ok()) return Failure(streams.err, *command, parameters.status());
        generator = controller::Generator::OnReference(*std::move(steps), *std::move(parameters));
      } else {
        // The actors read their shares themselves (a checkpoint's files).
        absl::StatusOr<std::vector<std::pair<std::string, ir::StateSource>>> sources =
            ModelParameterFileSources(o.parameters, model.model, steps->prefill, streams.err);
        if (!sources.ok()) return Failure(streams.err, *command, sources.status());
        absl::StatusOr<LauncherChoice> launcher = MakeLauncher(o.launcher);
        if (!launcher.ok()) return Failure(streams.err, *command, launcher.status(), 2);
        absl::StatusOr<schedules::Schedule> gpipe =
            schedules::GenerateGPipe({.actors = o.actors, .microbatches = microbatches});
        if (!gpipe.ok()) return Failure(streams.err, *command, gpipe.status());
        cpu::SetBlasThreads(1);
        where = absl::StrCat("on ", o.actors, " actors, ", launcher->description);
        generator = controller::Generator::OnPipeline(*std::move(steps), controller::ForwardOnly(*gpipe),
                                                      ir::StateSources(sources->begin(), sources->end()),
                                                      std::move(launcher->launcher));
      }
      if (!generator.ok()) return Failure(streams.err, *command, generator.status());
      absl::StatusOr<controller::GenerationReport> report =
          (*generator)->Generate(ids, o.sampling.tokens, examples::TokenPicker(o.sampling));
      if (!report.ok()) return Failure(streams.err, *command, report.status());
      generated = std::move(report->tokens);
      const controller::GenerationShape& shape = (*generator)->shape();
      streams.err << "generate: " << prompts << " prompt" << (prompts == 1 ? "" : "s") << " in "
                  << shape.microbatches << " microbatch" << (shape.microbatches == 1 ? "" : "es") << " of "
                  << shape.batch << " " << where << ", KV cache of " << shape.window << " positions: prefill "
                  << Rate(report->prefill_tokens, report->prefill_seconds, report->prefill_steps) << ", decode "
                  << Rate(report->decode_tokens, report->decode_seconds, report->decode_steps) << "\n";
    }
    for (size_t p = 0; p < generated.size(); ++p) {
      absl::StatusOr<std::string> text = job->corpus->Decode(generated[p]);
      if (!text.ok()) return Failure(streams.err, *command, text.status());
      streams.out << o.prompts[p] << *text << "\n";
    }
    return 0;
  });
}

}  // namespace tandem::cli
