// `tandem eval`: a language model's mean next-token loss over the first
// windows of a corpus, in order and without sampling, on the reference
// interpreter: a number any other tool can compute on the same tokens.
#include <cstdint>
#include <memory>
#include <numeric>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "backends/cpu/interpreter.h"
#include "controller/memory_fit.h"
#include "examples/example_job.h"
#include "tools/cli/commands.h"
#include "tools/cli/model_options.h"
#include "tools/cli/model_parameters.h"

namespace tandem::cli {
namespace {

// The most windows one evaluation reads.
constexpr int64_t kMaxWindows = int64_t{1} << 31;
// Windows per forward pass unless --batch says otherwise.
constexpr int64_t kDefaultEvalBatch = 8;

struct EvalOptions {
  examples::ExampleJobOptions model;
  ParameterFile parameters;
  int64_t windows = 0;
};

}  // namespace

void AddEvalCommand(CommandLine& command_line) {
  auto options = std::make_shared<EvalOptions>();
  CLI::App* command = command_line.Add(
      command_line.root(), "eval", "a language model's mean next-token loss over the first windows of a corpus",
      "(--checkpoint DIR | --import F.safetensors) --batches K --seq N [the model options it trained with]",
      "Loads the parameters of the checkpoint DIR (or the newest under a --checkpoint-dir), or of a safetensors "
      "file of parameters, into the model the options describe (the ones it was trained with: --model, sizes, "
      "--tokenizer and --data, or --data alone for a character-level model) and prints `loss X`: the mean "
      "next-token cross-entropy over the first K windows of the corpus, window i being tokens i*N to i*N+N-1, "
      "each followed by its target (the next token), in order and without sampling, so that any tool computing "
      "the loss over the same tokens gets the same number. Runs on the reference interpreter, --batch windows "
      "per forward pass (default 8; the largest count dividing K when it does not).");
  AddModelOptions(*command, options->model);
  CLI::Option* checkpoint =
      command->add_option("--checkpoint", options->parameters.checkpoint,
                          "a checkpoint, or a --checkpoint-dir (its newest)");
  CLI::Option* import =
      command->add_option("--import", options->parameters.import, "a safetensors file of the model's parameters");
  checkpoint->excludes(import);
  command->add_option("--batches", options->windows, "K: the windows (sequences of --seq tokens) to evaluate")
      ->required()
      ->check(CLI::Range(int64_t{1}, kMaxWindows));
  command_line.OnRun(command, [command, options, &streams = command_line.streams()] {
    examples::ExampleJobOptions model = options->model;
    if (model.model != "gpt" && model.model != "llama") {
      return Failure(streams.err, *command,
                     absl::InvalidArgumentError(
                         absl::StrCat("eval needs a language model (gpt or llama), not ", model.model)),
                     2);
    }
    if (options->parameters.checkpoint.empty() && options->parameters.import.empty()) {
      return Failure(streams.err, *command,
                     absl::InvalidArgumentError("eval needs the parameters: --checkpoint DIR or --import FILE"), 2);
    }
    const int64_t windows = options->windows;
    const int64_t batch = std::gcd(windows, model.batch.value_or(kDefaultEvalBatch));
    model = WholeModelOptions(model, batch);
    absl::StatusOr<examples::ExampleJob> job = examples::MakeExampleJob(model);
    if (!job.ok()) return Failure(streams.err, *command, job.status());
    if (absl::Status fits =
            controller::CheckWholeModelFitsThisHost(job->step, controller::WholeModel::kParameters);
        !fits.ok()) {
      return Failure(streams.err, *command, fits);
    }
    absl::StatusOr<ir::TensorMap> parameters = LoadModelParameters(options->parameters, job->step, streams.err);
    if (!parameters.ok()) return Failure(streams.err, *command, parameters.status());
    // Each pass's loss is the mean over its batch x seq tokens; the passes
    // are of one size, so their mean is the mean over every token.
    double sum = 0;
    for (int64_t first = 0; first < windows; first += batch) {
      absl::StatusOr<ir::TensorMap> data = job->corpus->Windows(first, batch, job->sequence_length);
      if (!data.ok()) return Failure(streams.err, *command, data.status());
      absl::StatusOr<std::vector<float>> losses = cpu::EvaluateLosses(job->step, *parameters, {*std::move(data)});
      if (!losses.ok()) return Failure(streams.err, *command, losses.status());
      sum += losses->front();
    }
    streams.err << absl::StrFormat("eval: %d windows of %d tokens of %s, %d per pass\n", windows,
                                   job->sequence_length, job->corpus->description(), batch);
    streams.out << absl::StrFormat("loss %.9g\n", sum / static_cast<double>(windows / batch));
    return 0;
  });
}

}  // namespace tandem::cli
