// `tandem bench compile`: trace and compile a deep GPT for a large
// interleaved schedule; times each phase and counts the instructions.
#include <chrono>
#include <memory>
#include <ostream>

#include "absl/strings/str_format.h"
#include "controller/actor_lowering.h"
#include "controller/compiler.h"
#include "controller/step_plan.h"
#include "examples/models/gpt.h"
#include "schedules/generators.h"
#include "schedules/json_text.h"
#include "tools/cli/commands.h"

namespace tandem::cli {
namespace {

using Clock = std::chrono::steady_clock;

double MillisecondsSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

struct CompileBenchOptions {
  int64_t layers = 96;
  int32_t actors = 8;
  int32_t microbatches = 128;
  int32_t virtual_stages = 2;
  bool json = false;
};

int RunCompileBench(const CompileBenchOptions& options, std::ostream& out, std::ostream& err) {
  absl::StatusOr<schedules::Schedule> schedule = schedules::Generate(
      "interleaved",
      {.actors = options.actors, .microbatches = options.microbatches, .virtual_stages = options.virtual_stages});
  if (!schedule.ok()) {
    err << "tandem bench compile: " << schedule.status().message() << "\n";
    return 1;
  }
  examples::GptConfig config;  // tiny dims: the compiler's cost, not the model's
  config.vocab_size = 16;
  config.sequence_length = 4;
  config.model_dim = 8;
  config.num_heads = 2;
  config.batch_size = 1;
  config.num_layers = options.layers;
  config.num_stages = schedule->num_stages;
  if (absl::Status status = examples::ValidateGptConfig(config); !status.ok()) {
    err << "tandem bench compile: " << status.message() << "\n";
    return 1;
  }

  Clock::time_point start = Clock::now();
  absl::StatusOr<ir::TrainStep> step =
      TraceTrainStep("gpt", examples::GptModel(config), Adam({}), {.num_microbatches = options.microbatches});
  const double trace_ms = MillisecondsSince(start);
  if (!step.ok()) {
    err << "tandem bench compile: " << step.status().message() << "\n";
    return 1;
  }
  start = Clock::now();
  absl::StatusOr<controller::StepPlan> plan = controller::StepPlan::Build(*step, *schedule);
  const double split_ms = MillisecondsSince(start);
  if (!plan.ok()) {
    err << "tandem bench compile: " << plan.status().message() << "\n";
    return 1;
  }
  start = Clock::now();
  int64_t instructions = 0;
  for (int32_t actor = 0; actor < schedule->num_actors; ++actor) {
    absl::StatusOr<ir::ActorProgram> program = controller::LowerActor(*plan, actor);
    if (!program.ok()) {
      err << "tandem bench compile: " << program.status().message() << "\n";
      return 1;
    }
    instructions += static_cast<int64_t>(program->instructions.size());
  }
  const double lower_ms = MillisecondsSince(start);
  start = Clock::now();
  absl::StatusOr<controller::CompiledStep> compiled = controller::Compile(*step, *schedule);
  const double compile_ms = MillisecondsSince(start);
  if (!compiled.ok()) {
    err << "tandem bench compile: " << compiled.status().message() << "\n";
    return 1;
  }
  const int64_t nodes = step->microbatch.size() + step->update.size();
  if (options.json) {
    nlohmann::ordered_json json;
    json["layers"] = options.layers;
    json["actors"] = schedule->num_actors;
    json["stages"] = schedule->num_stages;
    json["microbatches"] = options.microbatches;
    json["graph_nodes"] = nodes;
    json["trace_ms"] = trace_ms;
    json["split_ms"] = split_ms;
    json["lower_ms"] = lower_ms;
    json["compile_ms"] = compile_ms;
    json["trace_plus_compile_ms"] = trace_ms + compile_ms;
    json["instructions"] = instructions;
    out << schedules::JsonText(json) << "\n";
    return 0;
  }
  out << absl::StrFormat("GPT, %d layers, traced for %d microbatches; interleaved 1F1B, %d actors x %d stages each\n",
                         options.layers, options.microbatches, schedule->num_actors, options.virtual_stages);
  out << absl::StrFormat("graph: %d nodes (microbatch %d, update %d); %d tasks\n\n", nodes, step->microbatch.size(),
                         step->update.size(), schedule->NumTasks());
  out << absl::StrFormat("  %-44s %10s\n", "phase", "ms");
  out << absl::StrFormat("  %-44s %10.1f\n", "trace + autodiff + update", trace_ms);
  out << absl::StrFormat("  %-44s %10.1f\n", "split + place + communicate (StepPlan)", split_ms);
  out << absl::StrFormat("  %-44s %10.1f\n", "lower + lifetimes (all actors)", lower_ms);
  out << absl::StrFormat("  %-44s %10.1f\n", "compile, whole (plan + lower + verify + hash)", compile_ms);
  out << absl::StrFormat("  %-44s %10.1f   (goal < 2000)\n\n", "trace + compile", trace_ms + compile_ms);
  out << "actor  instructions   runs  sends  receives  static peak bytes\n";
  for (int32_t actor = 0; actor < compiled->num_actors; ++actor) {
    const controller::ActorStats& s = compiled->stats[actor];
    out << absl::StrFormat("%5d  %12d  %5d  %5d  %8d  %17d\n", actor, s.instructions, s.runs, s.sends, s.receives,
                           compiled->programs[actor].static_peak_bytes);
  }
  return 0;
}

}  // namespace

void AddCompileBench(CommandLine& command_line, CLI::App& bench) {
  CLI::App* command = command_line.Add(bench, "compile", "trace and compile a deep GPT for interleaved 1F1B, by phase",
                                       "[--layers L] [--actors P] [--microbatches M] [--virtual V] [--json]");
  auto options = std::make_shared<CompileBenchOptions>();
  AddIntegerOption(*command, "--layers", options->layers, "decoder blocks");
  AddIntegerOption(*command, "--actors", options->actors, "pipeline actors");
  AddIntegerOption(*command, "--microbatches", options->microbatches, "microbatches per step");
  AddIntegerOption(*command, "--virtual", options->virtual_stages, "stages per actor (interleaved)");
  command->add_flag("--json", options->json, "print JSON");
  command_line.OnRun(command, [options, &streams = command_line.streams()] {
    return RunCompileBench(*options, streams.out, streams.err);
  });
}

}  // namespace tandem::cli
