// `tandem eval`: a language model's mean next-token loss over the first
// windows of a corpus, in order and without sampling, on the reference
// interpreter: a number any other tool can compute on the same tokens.
#include <cstdint>
#include <memory>
#include <numeric>
#include <optional>
#include <algorithm>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "backends/cpu/interpreter.h"
#include "controller/memory_fit.h"
#include "examples/example_job.h"
#include "examples/hugging_face.h"
#include "ir/safetensors.h"
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
  std::string gradients;  // where to write the loss's gradients; empty: nowhere
  std::string logits;     // where to write the windows' logits; empty: nowhere
};

// Writes `sum` / `passes` (the mean gradient over the passes) to the
// safetensors file `path`, each parameter under the name it was imported
// with: Hugging Face's for a model directory, Tandem's otherwise.
absl::Status WriteGradients(const std::string& path, ir::TensorMap sum, int64_t passes, const EvalOptions& options,
                            const ir::TrainStep& step) {
  const bool hugging_face = examples::IsHuggingFaceDirectory(options.parameters.import);
  std::vector<std::pair<std::string, ir::StateSource>> tensors;
  for (const ir::StateSpec& spec : step.state) {
    auto found = sum.find(spec.name);
    if (found == sum.end()) continue;
    float* values = found->second.f32();
    for (int64_t i = 0; i < found->second.num_elements(); ++i) values[i] /= static_cast<float>(passes);
    absl::StatusOr<std::string> name =
        hugging_face ? examples::HuggingFaceName(options.model.model, spec.name) : spec.name;
    if (!name.ok()) return name.status();
    const ir::TensorType type = found->second.type();
    tensors.emplace_back(*name, ir::StateSource{type, std::move(found->second)});
  }
  return ir::WriteSafetensors(path, tensors, {{"format", "pt"}});
}

}  // namespace

void AddEvalCommand(CommandLine& command_line) {
  auto options = std::make_shared<EvalOptions>();
  CLI::App* command = command_line.Add(
      command_line.root(), "eval", "a language model's mean next-token loss over the first windows of a corpus",
      "(--checkpoint DIR | --import F.safetensors | --import HF_DIR) --batches K [--seq N] [--gradients G.safetensors] "
      "[the model options it trained with]",
      "Loads the parameters of the checkpoint DIR (or the newest under a --checkpoint-dir), or of a safetensors "
      "file of parameters, into the model the options describe (the ones it was trained with: --model, sizes, "
      "--tokenizer and --data, or --data alone for a character-level model) and prints `loss X`: the mean "
      "next-token cross-entropy over the first K windows of the corpus, window i being tokens i*N to i*N+N-1, "
      "each followed by its target (the next token), in order and without sampling, so that any tool computing "
      "the loss over the same tokens gets the same number. Runs on the reference interpreter, --batch windows "
      "per forward pass (default 8; the largest count dividing K when it does not). A Hugging Face model "
      "directory (config.json, model.safetensors or its shards, and tokenizer.model when it has one) gives the "
      "model and its shape itself. With --gradients, also writes the gradient of that mean loss with respect "
      "to every parameter, as a safetensors file under the parameters' names (Hugging Face's for a directory); "
      "with --logits, the logits of every window (held in memory: K x N x vocab floats).");
  AddModelOptions(*command, options->model);
  CLI::Option* checkpoint =
      command->add_option("--checkpoint", options->parameters.checkpoint,
                          "a checkpoint, or a --checkpoint-dir (its newest)");
  CLI::Option* import =
      command->add_option("--import", options->parameters.import,
                          "a safetensors file of the model's parameters, or a Hugging Face model directory");
  checkpoint->excludes(import);
  command->add_option("--batches", options->windows, "K: the windows (sequences of --seq tokens) to evaluate")
      ->required()
      ->check(CLI::Range(int64_t{1}, kMaxWindows));
  command->add_option("--gradients", options->gradients,
                      "also write the mean loss's gradients to this safetensors file");
  command->add_option("--logits", options->logits,
                      "also write the windows' logits, [K, N, vocab] f32, to this safetensors file (\"logits\")");
  command_line.OnRun(command, [command, options, &streams = command_line.streams()] {
    if (absl::Status status = TakeImportedModel(*command, options->parameters.import, options->model); !status.ok()) {
      return Failure(streams.err, *command, status, 2);
    }
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
    absl::StatusOr<ir::TensorMap> parameters =
        LoadModelParameters(options->parameters, model.model, job->step, streams.err);
    if (!parameters.ok()) return Failure(streams.err, *command, parameters.status());
    // Each pass's loss is the mean over its batch x seq tokens; the passes
    // are of one size, so their mean is the mean over every token.
    std::optional<ir::TrainStep> forward;
    std::optional<ir::HostTensor> logits;
    if (!options->logits.empty()) {
      absl::StatusOr<ir::TrainStep> traced = TraceForwardStep("logits", job->logits);
      if (!traced.ok()) return Failure(streams.err, *command, traced.status());
      forward = *std::move(traced);
      const int64_t vocab = forward->microbatch.node(forward->microbatch.outputs().front().value).type.shape.back();
      absl::StatusOr<ir::HostTensor> all =
          ir::HostTensor::Allocate({ir::DType::kF32, {windows, job->sequence_length, vocab}});
      if (!all.ok()) return Failure(streams.err, *command, all.status());
      logits = *std::move(all);
    }
    double sum = 0;
    ir::TensorMap gradient_sum;
    for (int64_t first = 0; first < windows; first += batch) {
      absl::StatusOr<ir::TensorMap> data = job->corpus->Windows(first, batch, job->sequence_length);
      if (!data.ok()) return Failure(streams.err, *command, data.status());
      if (logits.has_value()) {
        ir::TensorMap tokens = {{"tokens", data->at("tokens")}};
        absl::StatusOr<std::vector<ir::HostTensor>> output = cpu::RunReferenceForward(*forward, *parameters, {tokens});
        if (!output.ok()) return Failure(streams.err, *command, output.status());
        const int64_t per_pass = output->front().num_elements();
        std::copy_n(output->front().f32(), per_pass, logits->f32() + first / batch * per_pass);
      }
      if (options->gradients.empty()) {
        absl::StatusOr<std::vector<float>> losses = cpu::EvaluateLosses(job->step, *parameters, {*std::move(data)});
        if (!losses.ok()) return Failure(streams.err, *command, losses.status());
        sum += losses->front();
        continue;
      }
      absl::StatusOr<cpu::LossAndGradients> pass = cpu::EvaluateGradients(job->step, *parameters, *data);
      if (!pass.ok()) return Failure(streams.err, *command, pass.status());
      sum += pass->loss;
      for (auto& [name, gradient] : pass->gradients) {
        auto [it, fresh] = gradient_sum.try_emplace(name, gradient);
        if (fresh) continue;
        absl::StatusOr<ir::HostTensor> total = cpu::AccumulateGradient(it->second, gradient);
        if (!total.ok()) return Failure(streams.err, *command, total.status());
        it->second = *std::move(total);
      }
    }
    if (logits.has_value()) {
      const ir::TensorType type = logits->type();
      if (absl::Status status = ir::WriteSafetensors(
              options->logits, {{"logits", ir::StateSource{type, *std::move(logits)}}}, {{"format", "pt"}});
          !status.ok()) {
        return Failure(streams.err, *command, status);
      }
    }
    if (!options->gradients.empty()) {
      if (absl::Status status =
              WriteGradients(options->gradients, std::move(gradient_sum), windows / batch, *options, job->step);
          !status.ok()) {
        return Failure(streams.err, *command, status);
      }
    }
    streams.err << absl::StrFormat("eval: %d windows of %d tokens of %s, %d per pass\n", windows,
                                   job->sequence_length, job->corpus->description(), batch);
    streams.out << absl::StrFormat("loss %.9g\n", sum / static_cast<double>(windows / batch));
    return 0;
  });
}

}  // namespace tandem::cli
