// `tandem bench generate`: what a KV cache and a pipeline do for
// generation. One language model (by default a llama of 8 layers, d=256,
// seq 256) extends the same prompts greedily three ways, side by side in
// one run: without a cache (a whole forward over the window per token, one
// prompt at a time: examples::Generate), with the cache in this process
// (controller::Generator::OnReference) and with it through a pipeline of
// actors (OnPipeline, the prompts in microbatches). It prints each way's
// prefill and decode tokens/s, decode against the uncached generation, and
// whether the three gave the same tokens (they must). The parameters are the
// model's seeded initial ones: the speed does not depend on their values.
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
#include "examples/generation.h"
#include "ir/initial_state.h"
#include "ir/trace.h"
#include "nlohmann/json.hpp"
#include "schedules/generators.h"
#include "tools/cli/bench_support.h"
#include "tools/cli/commands.h"
#include "tools/cli/model_options.h"
#include "tools/cli/pipeline_options.h"

namespace tandem::cli {
namespace {

struct GenerateBenchOptions {
  examples::ExampleJobOptions model;
  LauncherOptions launcher;
  int32_t actors = 4;
  int64_t prompts = 4;
  int64_t prompt_tokens = 32;
  int64_t tokens = 64;
  bool json = false;
};

struct Way {
  std::string name;
  double prefill_tokens_per_s = 0;
  double decode_tokens_per_s = 0;  // the uncached way: every token, each a whole forward
  double seconds = 0;
  std::vector<std::vector<int32_t>> tokens;
};

int Fail(std::ostream& err, const absl::Status& status, int code = 1) {
  err << "tandem bench generate: " << status.message() << "\n";
  return code;
}

double PerSecond(int64_t tokens, double seconds) { return seconds > 0 ? static_cast<double>(tokens) / seconds : 0; }

// A generation with the cache, as a Way.
absl::StatusOr<Way> Cached(std::string name, controller::Generator& generator,
                           const std::vector<std::vector<int32_t>>& prompts, int64_t tokens) {
  const absl::Time start = absl::Now();
  absl::StatusOr<controller::GenerationReport> report = generator.Generate(prompts, tokens, examples::TokenPicker({}));
  if (!report.ok()) return report.status();
  Way way{.name = std::move(name)};
  way.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  way.prefill_tokens_per_s = PerSecond(report->prefill_tokens, report->prefill_seconds);
  way.decode_tokens_per_s = PerSecond(report->decode_tokens, report->decode_seconds);
  way.tokens = std::move(report->tokens);
  return way;
}

int RunGenerateBench(const CLI::App& command, GenerateBenchOptions options, std::ostream& out, std::ostream& err) {
  examples::ExampleJobOptions& model = options.model;
  if (model.model == "gpt" && command.count("--model") == 0) model.model = "llama";
  if (model.model == "llama" && !model.dim.has_value()) {
    model.layers = model.layers.value_or(8);
    model.dim = 256;
    model.heads = model.heads.value_or(8);
    model.seq = model.seq.value_or(256);
  }
  if (options.prompt_tokens + 1 > model.seq.value_or(options.prompt_tokens + 1)) {
    return Fail(err, absl::InvalidArgumentError("--prompt-tokens must leave room in the window (--seq)"), 2);
  }
  cpu::SetBlasThreads(1);
  // Prompts of ids from the corpus's vocabulary, the same every run.
  examples::ExampleJobOptions whole = WholeModelOptions(model, options.prompts);
  absl::StatusOr<examples::ExampleJob> job = examples::MakeExampleJob(whole);
  if (!job.ok()) return Fail(err, job.status());
  if (!job->cached_logits) return Fail(err, absl::InvalidArgumentError("generation needs gpt or llama"), 2);
  const int64_t vocab = job->corpus->vocab_size();
  std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(options.prompts));
  for (int64_t p = 0; p < options.prompts; ++p) {
    for (int64_t i = 0; i < options.prompt_tokens; ++i) {
      prompts[p].push_back(static_cast<int32_t>((p * 131 + i * 17 + 7) % vocab));
    }
  }
  std::vector<Way> ways;

  // Without a cache: one prompt at a time, a whole forward per token.
  absl::StatusOr<examples::ExampleJob> single = examples::MakeExampleJob(WholeModelOptions(model, 1));
  if (!single.ok()) return Fail(err, single.status());
  absl::StatusOr<ir::TrainStep> forward = TraceForwardStep("generate", single->logits, {.seed = whole.seed});
  if (!forward.ok()) return Fail(err, forward.status());
  // The forward step's state is its parameters, from their initializers.
  absl::StatusOr<ir::TensorMap> parameters = ir::InitialState(*forward);
  if (!parameters.ok()) return Fail(err, parameters.status());
  {
    Way way{.name = "without a cache (a whole forward per token)"};
    const absl::Time start = absl::Now();
    for (const std::vector<int32_t>& prompt : prompts) {
      absl::StatusOr<std::vector<int32_t>> tokens =
          examples::Generate(forward->microbatch, *parameters, prompt, {.tokens = options.tokens});
      if (!tokens.ok()) return Fail(err, tokens.status());
      way.tokens.push_back(*std::move(tokens));
    }
    way.seconds = absl::ToDoubleSeconds(absl::Now() - start);
    way.decode_tokens_per_s = PerSecond(options.prompts * options.tokens, way.seconds);
    ways.push_back(std::move(way));
  }

  // With the cache in this process: one microbatch of every prompt.
  absl::StatusOr<controller::GenerationSteps> steps = TraceGenerationSteps(whole);
  if (!steps.ok()) return Fail(err, steps.status());
  {
    absl::StatusOr<std::unique_ptr<controller::Generator>> generator =
        controller::Generator::OnReference(*std::move(steps), *parameters);
    if (!generator.ok()) return Fail(err, generator.status());
    absl::StatusOr<Way> way = Cached("KV cache, this process", **generator, prompts, options.tokens);
    if (!way.ok()) return Fail(err, way.status());
    ways.push_back(*std::move(way));
  }

  // With the cache through the actors: a microbatch per actor.
  examples::ExampleJobOptions piped = whole;
  piped.stages = options.actors;
  piped.microbatches = static_cast<int32_t>(std::min<int64_t>(options.actors, options.prompts));
  piped.batch = (options.prompts + piped.microbatches - 1) / piped.microbatches;
  absl::StatusOr<controller::GenerationSteps> piped_steps = TraceGenerationSteps(piped);
  if (!piped_steps.ok()) return Fail(err, piped_steps.status());
  absl::StatusOr<LauncherChoice> launcher = MakeLauncher(options.launcher);
  if (!launcher.ok()) return Fail(err, launcher.status(), 2);
  absl::StatusOr<schedules::Schedule> gpipe =
      schedules::GenerateGPipe({.actors = options.actors, .microbatches = piped.microbatches});
  if (!gpipe.ok()) return Fail(err, gpipe.status());
  {
    // The actors generate the same parameters from the same initializers.
    ir::StateSources seeds;
    for (const ir::StateSpec& spec : piped_steps->prefill.state) {
      if (spec.role == ir::StateRole::kParameter) seeds[spec.name] = ir::StateSource{spec.type, spec.init};
    }
    absl::StatusOr<std::unique_ptr<controller::Generator>> generator = controller::Generator::OnPipeline(
        *std::move(piped_steps), controller::ForwardOnly(*gpipe), seeds, std::move(launcher->launcher));
    if (!generator.ok()) return Fail(err, generator.status());
    absl::StatusOr<Way> way = Cached(absl::StrFormat("KV cache, %d actors (%d microbatches of %d)", options.actors,
                                                     piped.microbatches, piped.batch.value_or(1)),
                                     **generator, prompts, options.tokens);
    if (!way.ok()) return Fail(err, way.status());
    ways.push_back(*std::move(way));
  }

  const bool same = std::all_of(ways.begin(), ways.end(), [&](const Way& way) { return way.tokens == ways[0].tokens; });
  const double uncached = ways[0].decode_tokens_per_s;
  if (options.json) {
    nlohmann::json json;
    json["benchmark"] = "generate";
    json["model"] = job->description;
    json["prompts"] = options.prompts;
    json["prompt_tokens"] = options.prompt_tokens;
    json["tokens"] = options.tokens;
    json["same_tokens"] = same;
    for (const Way& way : ways) {
      json["ways"].push_back({{"name", way.name},
                              {"prefill_tokens_per_s", way.prefill_tokens_per_s},
                              {"decode_tokens_per_s", way.decode_tokens_per_s},
                              {"decode_vs_uncached", uncached > 0 ? way.decode_tokens_per_s / uncached : 0.0},
                              {"seconds", way.seconds}});
    }
    out << json.dump(2) << "\n";
  } else {
    out << job->description << "\n"
        << absl::StrFormat("%d prompts of %d tokens, %d new tokens each (greedy), %s\n", options.prompts,
                           options.prompt_tokens, options.tokens, launcher->description);
    out << absl::StrFormat("%-48s %14s %14s %10s %9s\n", "", "prefill tok/s", "decode tok/s", "decode vs", "total s");
    for (const Way& way : ways) {
      out << absl::StrFormat("%-48s %14s %14.1f %9.2fx %9.2f\n", way.name,
                             way.prefill_tokens_per_s > 0 ? absl::StrFormat("%.1f", way.prefill_tokens_per_s) : "-",
                             way.decode_tokens_per_s, uncached > 0 ? way.decode_tokens_per_s / uncached : 0.0,
                             way.seconds);
    }
    out << (same ? "the same tokens all three ways\n" : "THE TOKENS DIFFER between the ways\n");
  }
  return same ? 0 : 1;
}

}  // namespace

void AddGenerateBench(CommandLine& command_line, CLI::App& bench) {
  CLI::App* command = command_line.Add(
      bench, "generate", "generation without a KV cache, with it, and with it through a pipeline",
      "[model options] [--actors P] [--prompts N] [--prompt-tokens L] [--tokens T] [launcher options]",
      "Extends N prompts of L tokens by T tokens each, greedily, three ways side by side in one run: without a "
      "cache (a whole forward over the window per token, one prompt at a time), with the cache in this process "
      "(one microbatch of every prompt), and with it through P actors (a microbatch per actor). The model is "
      "its seeded initial one (by default a llama of 8 layers, d=256, 8 heads, seq 256). Prints each way's "
      "prefill and decode tokens/s, decode against the uncached generation, and whether the tokens agree (exit "
      "1 when they do not).");
  auto options = std::make_shared<GenerateBenchOptions>();
  AddModelOptions(*command, options->model);
  AddLauncherOptions(*command, options->launcher);
  command->add_option("--actors", options->actors, "actors of the pipeline")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  AddIntegerOption(*command, "--prompts", options->prompts, "prompts")->check(CLI::Range(int64_t{1}, int64_t{256}));
  AddIntegerOption(*command, "--prompt-tokens", options->prompt_tokens, "tokens per prompt")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 16));
  AddIntegerOption(*command, "--tokens", options->tokens, "new tokens per prompt")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 16));
  command->add_flag("--json", options->json, "print one JSON object instead of the table");
  command_line.OnRun(command, [command, options, &streams = command_line.streams()] {
    return RunGenerateBench(*command, *options, streams.out, streams.err);
  });
}

}  // namespace tandem::cli
