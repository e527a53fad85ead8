// `tandem bench compile`: trace, compile and simulate a deep GPT for a large
// interleaved schedule, optionally on data-parallel replicas; times each
// phase and counts the instructions.
#include <chrono>
#include <map>
#include <memory>
#include <ostream>

#include "absl/strings/str_format.h"
#include "controller/actor_lowering.h"
#include "controller/compiler.h"
#include "controller/step_plan.h"
#include "examples/models/gpt.h"
#include "schedules/generators.h"
#include "schedules/json_text.h"
#include "schedules/simulator.h"
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
  int32_t replicas = 1;
  bool json = false;
};

// The gradient bytes each stage all-reduces: its accumulators.
std::map<int32_t, double> StageGradientBytes(const controller::CompiledStep& compiled,
                                             const schedules::Schedule& schedule) {
  std::map<int32_t, double> bytes;
  for (int32_t actor = 0; actor < compiled.actors_per_replica; ++actor) {
    const ir::ActorProgram& program = compiled.programs[actor];
    for (const ir::Instruction& instruction : program.instructions) {
      if (instruction.kind != ir::InstructionKind::kAllReduceStart) continue;
      for (ir::BufferId id : instruction.buffers) {
        bytes[static_cast<int32_t>(instruction.tag)] += static_cast<double>(program.buffers[id].type.num_bytes());
      }
    }
  }
  return bytes;
}

// One timed compilation: its inputs and results, and each phase's time.
struct CompileRun {
  schedules::Schedule schedule;
  ir::TrainStep step;
  controller::CompiledStep compiled;
  double trace_ms = 0, split_ms = 0, lower_ms = 0, compile_ms = 0, simulate_ms = 0;
  int64_t instructions = 0;  // of the lowered programs of one replica
};

// Traces a tiny GPT of `options.layers` layers, then times each phase of its
// compilation for interleaved 1F1B, and the simulation of the result.
absl::StatusOr<CompileRun> TimeCompile(const CompileBenchOptions& options) {
  CompileRun run;
  absl::StatusOr<schedules::Schedule> schedule = schedules::Generate(
      "interleaved",
      {.actors = options.actors, .microbatches = options.microbatches, .virtual_stages = options.virtual_stages});
  if (!schedule.ok()) return schedule.status();
  run.schedule = *std::move(schedule);
  examples::GptConfig config;  // tiny dims: the compiler's cost, not the model's
  config.vocab_size = 16;
  config.sequence_length = 4;
  config.model_dim = 8;
  config.num_heads = 2;
  config.batch_size = 1;
  config.num_layers = options.layers;
  config.num_stages = run.schedule.num_stages;
  if (absl::Status status = examples::ValidateGptConfig(config); !status.ok()) return status;

  Clock::time_point start = Clock::now();
  absl::StatusOr<ir::TrainStep> step =
      TraceTrainStep("gpt", examples::GptModel(config), Adam({}),
                     {.num_microbatches = options.microbatches, .num_replicas = options.replicas});
  run.trace_ms = MillisecondsSince(start);
  if (!step.ok()) return step.status();
  run.step = *std::move(step);
  start = Clock::now();
  absl::StatusOr<controller::StepPlan> plan = controller::StepPlan::Build(run.step, run.schedule);
  run.split_ms = MillisecondsSince(start);
  if (!plan.ok()) return plan.status();
  start = Clock::now();
  for (int32_t actor = 0; actor < run.schedule.num_actors; ++actor) {
    absl::StatusOr<ir::ActorProgram> program = controller::LowerActor(*plan, actor);
    if (!program.ok()) return program.status();
    run.instructions += static_cast<int64_t>(program->instructions.size());
  }
  run.lower_ms = MillisecondsSince(start);
  start = Clock::now();
  absl::StatusOr<controller::CompiledStep> compiled = controller::Compile(run.step, run.schedule);
  run.compile_ms = MillisecondsSince(start);
  if (!compiled.ok()) return compiled.status();
  run.compiled = *std::move(compiled);
  // The simulator plays one replica and the reductions (schedules/SIMULATION.md).
  start = Clock::now();
  schedules::CostModel costs;
  costs.data_parallel = options.replicas;
  costs.stage_gradient_bytes_override = StageGradientBytes(run.compiled, run.schedule);
  absl::StatusOr<schedules::SimulationResult> simulated = schedules::Simulate(run.schedule, costs);
  run.simulate_ms = MillisecondsSince(start);
  if (!simulated.ok()) return simulated.status();
  return run;
}

void PrintCompileRun(const CompileBenchOptions& options, const CompileRun& run, std::ostream& out) {
  const double total_ms = run.trace_ms + run.compile_ms + run.simulate_ms;
  int64_t all_instructions = 0;
  for (const controller::ActorStats& s : run.compiled.stats) all_instructions += s.instructions;
  const int64_t nodes = run.step.microbatch.size() + run.step.update.size();
  if (options.json) {
    nlohmann::ordered_json json;
    json["layers"] = options.layers;
    json["actors"] = run.schedule.num_actors;
    json["stages"] = run.schedule.num_stages;
    json["data_parallel"] = options.replicas;
    json["all_actors"] = run.compiled.num_actors;
    json["microbatches"] = options.microbatches;
    json["graph_nodes"] = nodes;
    json["trace_ms"] = run.trace_ms;
    json["split_ms"] = run.split_ms;
    json["lower_ms"] = run.lower_ms;
    json["compile_ms"] = run.compile_ms;
    json["trace_plus_compile_ms"] = run.trace_ms + run.compile_ms;
    json["simulate_ms"] = run.simulate_ms;
    json["total_ms"] = total_ms;
    json["instructions"] = run.instructions;
    json["all_instructions"] = all_instructions;
    out << schedules::JsonText(json) << "\n";
    return;
  }
  out << absl::StrFormat("GPT, %d layers, traced for %d microbatches; interleaved 1F1B, %d actors x %d stages each",
                         options.layers, options.microbatches, run.schedule.num_actors, options.virtual_stages);
  if (options.replicas > 1) {
    out << absl::StrFormat("; %d data-parallel replicas: %d actors, %d instructions", options.replicas,
                           run.compiled.num_actors, all_instructions);
  }
  out << "\n";
  out << absl::StrFormat("graph: %d nodes (microbatch %d, update %d); %d tasks\n\n", nodes, run.step.microbatch.size(),
                         run.step.update.size(), run.schedule.NumTasks());
  out << absl::StrFormat("  %-44s %10s\n", "phase", "ms");
  out << absl::StrFormat("  %-44s %10.1f\n", "trace + autodiff + update", run.trace_ms);
  out << absl::StrFormat("  %-44s %10.1f\n", "split + place + communicate (StepPlan)", run.split_ms);
  out << absl::StrFormat("  %-44s %10.1f\n", "lower + lifetimes (all actors)", run.lower_ms);
  out << absl::StrFormat("  %-44s %10.1f\n", "compile, whole (plan + lower + verify + hash)", run.compile_ms);
  out << absl::StrFormat("  %-44s %10.1f   (goal < 2000)\n", "trace + compile", run.trace_ms + run.compile_ms);
  out << absl::StrFormat("  %-44s %10.1f\n", "simulate (one replica + its reductions)", run.simulate_ms);
  out << absl::StrFormat("  %-44s %10.1f   (goal < 5000)\n\n", "total: trace + compile + simulate", total_ms);
  // Replicas run their position's program: one row per position.
  out << "actor  instructions   runs  sends  receives  all-reduces  reduce bytes sent  static peak bytes\n";
  for (int32_t actor = 0; actor < run.compiled.actors_per_replica; ++actor) {
    const controller::ActorStats& s = run.compiled.stats[actor];
    out << absl::StrFormat("%5d  %12d  %5d  %5d  %8d  %11d  %17d  %17d\n", actor, s.instructions, s.runs, s.sends,
                           s.receives, s.all_reduces, s.reduce_bytes_sent,
                           run.compiled.programs[actor].static_peak_bytes);
  }
  if (options.replicas > 1) {
    out << absl::StrFormat("(replicas 1..%d run the same programs under their own actor ids)\n", options.replicas - 1);
  }
}

int RunCompileBench(const CompileBenchOptions& options, std::ostream& out, std::ostream& err) {
  absl::StatusOr<CompileRun> run = TimeCompile(options);
  if (!run.ok()) {
    err << "tandem bench compile: " << run.status().message() << "\n";
    return 1;
  }
  PrintCompileRun(options, *run, out);
  return 0;
}

}  // namespace

void AddCompileBench(CommandLine& command_line, CLI::App& bench) {
  CLI::App* command = command_line.Add(bench, "compile", "trace, compile and simulate a deep GPT for interleaved 1F1B, by phase",
                                       "[--layers L] [--actors P] [--microbatches M] [--virtual V] [--data-parallel D] [--json]");
  auto options = std::make_shared<CompileBenchOptions>();
  AddIntegerOption(*command, "--layers", options->layers, "decoder blocks");
  AddIntegerOption(*command, "--actors", options->actors, "pipeline actors");
  AddIntegerOption(*command, "--microbatches", options->microbatches, "microbatches per step");
  AddIntegerOption(*command, "--virtual", options->virtual_stages, "stages per actor (interleaved)");
  AddIntegerOption(*command, "--data-parallel", options->replicas, "data-parallel replicas of the pipeline");
  command->add_flag("--json", options->json, "print JSON");
  command_line.OnRun(command, [options, &streams = command_line.streams()] {
    return RunCompileBench(*options, streams.out, streams.err);
  });
}

}  // namespace tandem::cli
