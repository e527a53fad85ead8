// `tandem bench compile`: trace and compile a deep GPT for a large
// interleaved schedule; times each phase and counts the instructions.
#include <chrono>
#include <ostream>

#include "absl/strings/str_format.h"
#include "controller/actor_lowering.h"
#include "controller/compiler.h"
#include "controller/step_plan.h"
#include "examples/models/gpt.h"
#include "schedules/generators.h"
#include "tools/cli/arguments.h"
#include "tools/cli/commands.h"

namespace tandem::cli {
namespace {

using Clock = std::chrono::steady_clock;

double MillisecondsSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

}  // namespace

int RunCompileBench(const CommandArgs& args, std::ostream& out, std::ostream& err) {
  Arguments arguments;
  arguments.AddOption("layers", "decoder blocks", "96");
  arguments.AddOption("actors", "pipeline actors", "8");
  arguments.AddOption("microbatches", "microbatches per step", "128");
  arguments.AddOption("virtual", "stages per actor (interleaved)", "2");
  arguments.AddFlag("json", "print JSON");
  if (absl::Status status = arguments.Parse(args); !status.ok()) {
    err << "tandem bench compile: " << status.message() << "\n" << arguments.Usage();
    return 2;
  }
  absl::StatusOr<int64_t> layers = arguments.GetInt("layers");
  absl::StatusOr<int64_t> actors = arguments.GetInt("actors");
  absl::StatusOr<int64_t> microbatches = arguments.GetInt("microbatches");
  absl::StatusOr<int64_t> virtual_stages = arguments.GetInt("virtual");
  for (const auto* value : {&layers, &actors, &microbatches, &virtual_stages}) {
    if (!value->ok()) {
      err << "tandem bench compile: " << value->status().message() << "\n";
      return 2;
    }
  }
  absl::StatusOr<schedules::Schedule> schedule = schedules::Generate(
      "interleaved", {.actors = static_cast<int32_t>(*actors), .microbatches = static_cast<int32_t>(*microbatches),
                      .virtual_stages = static_cast<int32_t>(*virtual_stages)});
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
  config.num_layers = *layers;
  config.num_stages = schedule->num_stages;
  if (absl::Status status = examples::ValidateGptConfig(config); !status.ok()) {
    err << "tandem bench compile: " << status.message() << "\n";
    return 1;
  }

  Clock::time_point start = Clock::now();
  absl::StatusOr<ir::TrainStep> step = TraceTrainStep("gpt", examples::GptModel(config), Adam({}),
                                                      {.num_microbatches = static_cast<int32_t>(*microbatches)});
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
  if (arguments.Flag("json")) {
    out << absl::StrFormat(
        "{\"layers\": %d, \"actors\": %d, \"stages\": %d, \"microbatches\": %d, \"graph_nodes\": %d, "
        "\"trace_ms\": %.1f, \"split_ms\": %.1f, \"lower_ms\": %.1f, \"compile_ms\": %.1f, "
        "\"trace_plus_compile_ms\": %.1f, \"instructions\": %d}\n",
        *layers, schedule->num_actors, schedule->num_stages, *microbatches, nodes, trace_ms, split_ms, lower_ms,
        compile_ms, trace_ms + compile_ms, instructions);
    return 0;
  }
  out << absl::StrFormat("GPT, %d layers, traced for %d microbatches; interleaved 1F1B, %d actors x %d stages each\n",
                         *layers, *microbatches, schedule->num_actors, *virtual_stages);
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

}  // namespace tandem::cli
