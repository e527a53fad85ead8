// `tandem bench dispatch` and `tandem bench fidelity`: benchmarks of
// pipelines running on actors (by default the local launcher's processes).
//
// dispatch: one trivial MLP step, fused (one runStep RPC per actor) against
// per-task (one runRange RPC per task), side by side in one run: RPCs per
// step, the controller's CPU time per step (getrusage of this process, every
// thread of the controller included) and wall time per step. With
// --data-parallel D the pipeline runs on D replicas (P x D actors, each
// replica its own microbatches), so the controller's cost can be measured
// as actors grow either way.
//
// graph: the two-tower model (examples/models/two_tower.h) on 3 actors,
// its stage DAG under graph-1f1b and graph-gpipe against the same three
// stages as a chain under 1F1B, GPipe and ZB-H1, each measured and predicted
// like fidelity's; the ratio of the best of each.
//
// async: the same MLP under 1F1B, 2BW and PipeDream with the same
// microbatches per update: step time, throughput and measured bubble.
//
// fidelity: an MLP whose layers are large matmuls, so that compute dominates.
// Calibration: each schedule runs a few steps and the actors' instruction
// timings give the mean duration of each (task kind, stage); the simulator
// then predicts the step from those costs (plus each actor's update, which
// the simulator does not model). Measured: the median wall time of the
// steps at the controller. Goal: measured / predicted <= 1.05.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <ostream>
#include <tuple>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "backends/cpu/kernels.h"
#include "controller/pipeline.h"
#include "controller/step_trace.h"
#include "examples/models/mlp.h"
#include "examples/models/two_tower.h"
#include "ir/initial_state.h"
#include "ir/statistics.h"
#include "schedules/generators.h"
#include "schedules/json_text.h"
#include "schedules/simulator.h"
#include "tools/cli/commands.h"
#include "tools/cli/pipeline_options.h"

namespace tandem::cli {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// CPU time (user + system) of this process, every thread, in microseconds.
double ProcessCpuMicros() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto micros = [](const timeval& t) { return static_cast<double>(t.tv_sec) * 1e6 + static_cast<double>(t.tv_usec); };
  return micros(usage.ru_utime) + micros(usage.ru_stime);
}

// An MLP of `stages` stages with `layers_per_stage` hidden layers of
// `width`, trained with plain SGD (its update is a few elementwise ops), on
// `replicas` data-parallel replicas of `microbatches` microbatches each.
absl::StatusOr<ir::TrainStep> BenchMlp(int32_t stages, int32_t microbatches, int64_t width, int64_t batch,
                                       int64_t layers_per_stage, int32_t replicas = 1, WeightUpdates updates = {}) {
  examples::MlpConfig config;
  config.input_dim = width;
  config.hidden_dim = width;
  config.num_classes = std::min<int64_t>(width, 10);
  config.num_layers = stages * layers_per_stage;
  config.batch_size = batch;
  config.num_stages = stages;
  if (absl::Status status = examples::ValidateMlpConfig(config); !status.ok()) return status;
  return TraceTrainStep("mlp", examples::MlpModel(config), Sgd({.learning_rate = 1e-3}),
                        {.num_microbatches = microbatches, .num_replicas = replicas, .seed = 7, .updates = updates});
}

// Deterministic inputs for every microbatch of every replica.
std::vector<ir::TensorMap> BenchBatches(const ir::TrainStep& step) {
  const int32_t count = step.num_microbatches * step.num_replicas;
  std::vector<ir::TensorMap> batches(count);
  for (int32_t m = 0; m < count; ++m) {
    for (ir::ValueId id : step.microbatch.Inputs()) {
      const ir::Node& node = step.microbatch.node(id);
      if (!ir::HasRole(node, ir::InputRole::kData) && !ir::HasRole(node, ir::InputRole::kLabel)) continue;
      ir::HostTensor tensor(node.type);
      if (node.type.dtype == ir::DType::kI32) {
        for (int64_t i = 0; i < tensor.num_elements(); ++i) tensor.i32()[i] = static_cast<int32_t>((i + m) % 2);
      } else {
        tensor = *ir::MakeTensor(node.type, {ir::Initializer::Kind::kNormal, 0.0, 1.0, static_cast<uint64_t>(m + 1)});
      }
      batches[m][node.attributes.GetString("name")] = tensor;
    }
  }
  return batches;
}

struct Running {
  std::unique_ptr<controller::Pipeline> pipeline;
  std::string description;
};

absl::StatusOr<Running> StartPipeline(const LauncherOptions& launcher, const ir::TrainStep& step,
                                      const schedules::Schedule& schedule) {
  absl::StatusOr<LauncherChoice> choice = MakeLauncher(launcher);
  if (!choice.ok()) return choice.status();
  Running running;
  running.description = choice->description;
  absl::StatusOr<std::unique_ptr<controller::Pipeline>> pipeline =
      controller::Pipeline::Create(step, schedule, ir::SeedSources(step), std::move(choice->launcher));
  if (!pipeline.ok()) return pipeline.status();
  running.pipeline = *std::move(pipeline);
  return running;
}

int Fail(std::ostream& err, absl::string_view bench, const absl::Status& status, int code = 1) {
  err << "tandem bench " << bench << ": " << status.message() << "\n";
  return code;
}

// Runs two warm-up steps, then `steps` measured ones whose reports go to
// `trace`; the median wall time of the measured steps, in seconds.
absl::StatusOr<double> MedianStepSeconds(controller::Pipeline& pipeline, const std::vector<ir::TensorMap>& batches,
                                         int64_t steps, controller::StepTrace& trace) {
  std::vector<double> walls;
  for (int64_t s = 0; s < steps + 2; ++s) {
    const Clock::time_point start = Clock::now();
    absl::StatusOr<controller::StepReport> report = pipeline.Step(batches);
    const double wall = SecondsSince(start);
    if (!report.ok()) return report.status();
    if (s < 2) continue;  // warm-up
    walls.push_back(wall);
    trace.AddStep(*report);
  }
  return ir::Median(walls);
}

struct DispatchBenchOptions {
  LauncherOptions launcher;
  int32_t actors = 4;
  int32_t replicas = 1;
  int32_t microbatches = 64;
  int64_t steps = 20;
  bool json = false;
};

int RunDispatchBench(const DispatchBenchOptions& options, std::ostream& out, std::ostream& err) {
  cpu::SetBlasThreads(1);
  // Trivial compute: 2-wide layers, one example per microbatch.
  absl::StatusOr<ir::TrainStep> step = BenchMlp(options.actors, options.microbatches, 2, 1, 1, options.replicas);
  if (!step.ok()) return Fail(err, "dispatch", step.status());
  absl::StatusOr<schedules::Schedule> schedule =
      schedules::Generate("1f1b", {.actors = options.actors, .microbatches = options.microbatches});
  if (!schedule.ok()) return Fail(err, "dispatch", schedule.status());
  absl::StatusOr<Running> running = StartPipeline(options.launcher, *step, *schedule);
  if (!running.ok()) return Fail(err, "dispatch", running.status());
  const std::vector<ir::TensorMap> batches = BenchBatches(*step);

  struct Mode {
    const char* name;
    controller::Dispatch dispatch;
    double rpcs = 0, cpu_us = 0, wall_ms = 0;  // per step
  };
  std::vector<Mode> modes = {{"fused", controller::Dispatch::kFused}, {"per-task", controller::Dispatch::kPerTask}};
  for (Mode& mode : modes) {
    // One warm-up step, then the measured ones.
    if (absl::StatusOr<controller::StepReport> r = running->pipeline->Step(batches, mode.dispatch); !r.ok()) {
      return Fail(err, "dispatch", r.status());
    }
    int64_t rpcs = 0;
    const double cpu_before = ProcessCpuMicros();
    const Clock::time_point start = Clock::now();
    for (int64_t s = 0; s < options.steps; ++s) {
      absl::StatusOr<controller::StepReport> r = running->pipeline->Step(batches, mode.dispatch);
      if (!r.ok()) return Fail(err, "dispatch", r.status());
      rpcs += r->rpcs;
    }
    const double n = static_cast<double>(options.steps);
    mode.wall_ms = SecondsSince(start) * 1e3 / n;
    mode.cpu_us = (ProcessCpuMicros() - cpu_before) / n;
    mode.rpcs = static_cast<double>(rpcs) / n;
  }
  const double ratio = modes[1].cpu_us / std::max(modes[0].cpu_us, 1e-9);
  if (options.json) {
    nlohmann::ordered_json json;
    json["actors"] = options.actors * options.replicas;
    json["pipeline_actors"] = options.actors;
    json["data_parallel"] = options.replicas;
    json["microbatches"] = options.microbatches;
    json["steps"] = options.steps;
    json["rpcs_per_step_fused"] = modes[0].rpcs;
    json["rpcs_per_step_per_task"] = modes[1].rpcs;
    json["controller_us_per_step_fused"] = modes[0].cpu_us;
    json["controller_us_per_step_per_task"] = modes[1].cpu_us;
    json["wall_ms_per_step_fused"] = modes[0].wall_ms;
    json["wall_ms_per_step_per_task"] = modes[1].wall_ms;
    json["controller_time_ratio"] = ratio;
    out << schedules::JsonText(json) << "\n";
    return 0;
  }
  const std::string shape =
      options.replicas == 1
          ? absl::StrFormat("%d actors", options.actors)
          : absl::StrFormat("%d actors (%d replicas of %d)", options.actors * options.replicas, options.replicas,
                            options.actors);
  out << absl::StrFormat("dispatch: %s, 1F1B, %d microbatches%s, trivial compute; %s; %d steps each\n\n", shape,
                         options.microbatches, options.replicas == 1 ? "" : " per replica", running->description,
                         options.steps);
  out << absl::StrFormat("  %-9s %12s %24s %14s\n", "dispatch", "RPCs/step", "controller CPU us/step", "wall ms/step");
  for (const Mode& mode : modes) {
    out << absl::StrFormat("  %-9s %12.1f %24.1f %14.3f\n", mode.name, mode.rpcs, mode.cpu_us, mode.wall_ms);
  }
  out << absl::StrFormat("\n  controller time, per-task / fused: %.1fx (goal >= 10x)\n", ratio);
  return 0;
}

struct FidelityBenchOptions {
  LauncherOptions launcher;
  int32_t actors = 2;
  int32_t microbatches = 16;
  int64_t width = 768;
  int64_t batch = 128;
  int64_t steps = 5;
  std::string schedules = "gpipe,1f1b,zb-h1";
  bool json = false;
};

int RunFidelityBench(const FidelityBenchOptions& options, std::ostream& out, std::ostream& err) {
  cpu::SetBlasThreads(1);
  absl::StatusOr<ir::TrainStep> step = BenchMlp(options.actors, options.microbatches, options.width, options.batch,
                                                /*layers_per_stage=*/2);
  if (!step.ok()) return Fail(err, "fidelity", step.status());
  const std::vector<ir::TensorMap> batches = BenchBatches(*step);

  struct Row {
    std::string schedule;
    double measured_ms = 0, span_ms = 0, predicted_ms = 0, simulated_ms = 0, update_ms = 0;
  };
  std::vector<Row> rows;
  std::string description;
  for (absl::string_view name : absl::StrSplit(options.schedules, ',')) {
    absl::StatusOr<schedules::Schedule> schedule =
        schedules::Generate(name, {.actors = options.actors, .microbatches = options.microbatches});
    if (!schedule.ok()) return Fail(err, "fidelity", schedule.status());
    absl::StatusOr<Running> running = StartPipeline(options.launcher, *step, *schedule);
    if (!running.ok()) return Fail(err, "fidelity", running.status());
    description = running->description;
    const controller::CompiledStep& compiled = running->pipeline->compiled();

    // Calibration and measurement: the steps after two warm-up steps.
    controller::StepTrace trace(compiled);
    absl::StatusOr<double> median = MedianStepSeconds(*running->pipeline, batches, options.steps, trace);
    if (!median.ok()) return Fail(err, "fidelity", median.status());
    const schedules::CostModel costs = trace.CalibratedCosts();
    const std::vector<double> update_us = trace.UpdateUs();
    absl::StatusOr<schedules::SimulationResult> simulated = schedules::Simulate(*schedule, costs);
    if (!simulated.ok()) return Fail(err, "fidelity", simulated.status());
    Row row;
    row.schedule = std::string(name);
    row.measured_ms = *median * 1e3;
    row.span_ms = trace.MeanSpanUs() * 1e-3;
    row.update_ms = *std::max_element(update_us.begin(), update_us.end()) * 1e-3;
    row.simulated_ms = simulated->makespan * 1e-3;
    row.predicted_ms = row.simulated_ms + row.update_ms;
    rows.push_back(row);
  }
  if (options.json) {
    nlohmann::ordered_json json_rows = nlohmann::ordered_json::array();
    for (const Row& row : rows) {
      json_rows.push_back({{"schedule", row.schedule},
                           {"measured_ms", row.measured_ms},
                           {"span_ms", row.span_ms},
                           {"predicted_ms", row.predicted_ms},
                           {"simulated_ms", row.simulated_ms},
                           {"update_ms", row.update_ms},
                           {"ratio", row.measured_ms / row.predicted_ms}});
    }
    const nlohmann::ordered_json json = {
        {"actors", options.actors}, {"microbatches", options.microbatches}, {"width", options.width},
        {"batch", options.batch},   {"rows", json_rows}};
    out << schedules::JsonText(json) << "\n";
    return 0;
  }
  out << absl::StrFormat(
      "fidelity: MLP, %d actors, %d microbatches, 2 layers of %d x %d per stage (batch %d); %s; median of %d steps\n"
      "predicted = simulated makespan from calibrated per-(kind, stage) costs + the slowest actor's update;\n"
      "span = the instructions' own time (first to last on any actor): measured - span is the step's dispatch,\n"
      "inputs and end, which the simulator does not model\n\n",
      options.actors, options.microbatches, options.width, options.width, options.batch, description, options.steps);
  out << absl::StrFormat("  %-10s %13s %9s %14s %13s %20s\n", "schedule", "measured ms", "span ms", "predicted ms",
                         "(update ms)", "measured/predicted");
  for (const Row& row : rows) {
    out << absl::StrFormat("  %-10s %13.2f %9.2f %14.2f %13.2f %20.3f\n", row.schedule, row.measured_ms, row.span_ms,
                           row.predicted_ms, row.update_ms, row.measured_ms / row.predicted_ms);
  }
  out << "\n  goal: measured/predicted <= 1.05\n";
  return 0;
}

struct GraphBenchOptions {
  LauncherOptions launcher;
  int32_t microbatches = 16;
  int64_t width = 384;
  int64_t batch = 128;
  std::vector<int64_t> towers = {4, 3};
  int64_t head_layers = 3;
  int64_t steps = 5;
  std::string schedules = "graph-1f1b,graph-gpipe,1f1b,gpipe,zb-h1";
  bool json = false;
};

// The two-tower model on 3 actors: its stage DAG (left tower, right tower,
// head) under the graph schedules, against the same stages as a chain under
// the sequential ones; each schedule measured and predicted as in fidelity.
int RunGraphBench(const GraphBenchOptions& options, std::ostream& out, std::ostream& err) {
  cpu::SetBlasThreads(1);
  if (options.towers.size() != 2) return Fail(err, "graph", absl::InvalidArgumentError("--towers takes two depths"));
  examples::TwoTowerConfig config;
  config.input_dim = options.width;
  config.hidden_dim = options.width;
  config.left_layers = options.towers[0];
  config.right_layers = options.towers[1];
  config.head_layers = options.head_layers;
  config.batch_size = options.batch;
  config.num_stages = 3;
  if (absl::Status status = examples::ValidateTwoTowerConfig(config); !status.ok()) return Fail(err, "graph", status);
  absl::StatusOr<ir::TrainStep> step = TraceTrainStep("two-tower", examples::TwoTowerModel(config),
                                                      Sgd({.learning_rate = 1e-3}),
                                                      {.num_microbatches = options.microbatches, .seed = 7});
  if (!step.ok()) return Fail(err, "graph", step.status());
  const std::vector<ir::TensorMap> batches = BenchBatches(*step);

  struct Row {
    std::string schedule;
    bool graph = false;
    double measured_ms = 0, predicted_ms = 0, bubble = 0;
  };
  std::vector<Row> rows;
  std::string description;
  for (absl::string_view name : absl::StrSplit(options.schedules, ',')) {
    Row row;
    row.schedule = std::string(name);
    row.graph = schedules::TakesStageGraph(name);
    schedules::GeneratorOptions generator{.actors = 3, .microbatches = options.microbatches};
    if (row.graph) generator.stage_edges = step->stage_edges;
    absl::StatusOr<schedules::Schedule> schedule = schedules::Generate(name, generator);
    if (!schedule.ok()) return Fail(err, "graph", schedule.status());
    absl::StatusOr<Running> running = StartPipeline(options.launcher, *step, *schedule);
    if (!running.ok()) return Fail(err, "graph", running.status());
    description = running->description;
    controller::StepTrace trace(running->pipeline->compiled());
    absl::StatusOr<double> median = MedianStepSeconds(*running->pipeline, batches, options.steps, trace);
    if (!median.ok()) return Fail(err, "graph", median.status());
    absl::StatusOr<schedules::SimulationResult> simulated = schedules::Simulate(*schedule, trace.CalibratedCosts());
    if (!simulated.ok()) return Fail(err, "graph", simulated.status());
    const std::vector<double> update_us = trace.UpdateUs();
    row.measured_ms = *median * 1e3;
    row.predicted_ms = simulated->makespan * 1e-3 + *std::max_element(update_us.begin(), update_us.end()) * 1e-3;
    row.bubble = simulated->bubble;
    rows.push_back(row);
  }
  const Row* best_graph = nullptr;
  const Row* best_chain = nullptr;
  for (const Row& row : rows) {
    const Row*& best = row.graph ? best_graph : best_chain;
    if (best == nullptr || row.measured_ms < best->measured_ms) best = &row;
  }
  if (options.json) {
    nlohmann::ordered_json json_rows = nlohmann::ordered_json::array();
    for (const Row& row : rows) {
      json_rows.push_back({{"schedule", row.schedule}, {"stage_graph", row.graph ? "dag" : "chain"},
                           {"measured_ms", row.measured_ms}, {"predicted_ms", row.predicted_ms},
                           {"simulated_bubble", row.bubble}});
    }
    nlohmann::ordered_json json = {{"actors", 3}, {"microbatches", options.microbatches}, {"width", options.width},
                                   {"batch", options.batch}, {"rows", json_rows}};
    if (best_graph != nullptr && best_chain != nullptr) {
      json["graph_over_best_chain"] = best_graph->measured_ms / best_chain->measured_ms;
    }
    out << schedules::JsonText(json) << "\n";
    return 0;
  }
  out << absl::StrFormat(
      "graph: two-tower (towers of %d and %d layers, head %d, width %d, batch %d), 3 actors, %d microbatches; %s; "
      "median of %d steps\n"
      "stages: left tower, right tower, head. dag: %s; chain: the same stages as 0->1->2\n"
      "predicted = simulated makespan from calibrated per-(kind, stage) costs + the slowest actor's update\n\n",
      options.towers[0], options.towers[1], options.head_layers, options.width, options.batch, options.microbatches,
      description, options.steps, ir::FormatStageEdges(step->stage_edges));
  out << absl::StrFormat("  %-12s %-6s %13s %14s %18s\n", "schedule", "stages", "measured ms", "predicted ms",
                         "simulated bubble");
  for (const Row& row : rows) {
    out << absl::StrFormat("  %-12s %-6s %13.2f %14.2f %17.1f%%\n", row.schedule, row.graph ? "dag" : "chain",
                           row.measured_ms, row.predicted_ms, row.bubble * 100);
  }
  if (best_graph != nullptr && best_chain != nullptr) {
    out << absl::StrFormat("\n  best dag (%s) / best chain (%s): measured %.3f, predicted %.3f\n",
                           best_graph->schedule, best_chain->schedule,
                           best_graph->measured_ms / best_chain->measured_ms,
                           best_graph->predicted_ms / best_chain->predicted_ms);
  }
  return 0;
}

struct AsyncBenchOptions {
  LauncherOptions launcher;
  int32_t actors = 4;
  int32_t microbatches = 8;  // per update, under every schedule
  int32_t updates = 4;       // per step, under 2bw and pipedream's window
  int64_t width = 512;
  int64_t batch = 64;
  int64_t steps = 5;
  bool json = false;
};

// The same MLP on the same actors, the same microbatches per update: 1F1B
// flushes after every update; 2BW runs `updates` of them per step without a
// flush between them; PipeDream runs as many microbatches per step as 2BW
// with an update after each. Measured: the median step, microbatches per
// second, and the measured bubble (the fraction of actor time not in run
// instructions).
int RunAsyncBench(const AsyncBenchOptions& options, std::ostream& out, std::ostream& err) {
  cpu::SetBlasThreads(1);
  struct Row {
    std::string schedule;
    int32_t microbatches = 0, updates = 0;
    double step_ms = 0, microbatches_per_s = 0, bubble = 0;
  };
  const int32_t window = options.microbatches * options.updates;
  const std::vector<std::tuple<std::string, int32_t, WeightUpdates>> cases = {
      {"1f1b", options.microbatches, {}},
      {"2bw", window, {WeightUpdates::Mode::kTwoBuffer, options.microbatches}},
      {"pipedream", window, {WeightUpdates::Mode::kPipeDream, 1}}};
  std::vector<Row> rows;
  std::string description;
  for (const auto& [name, microbatches, updates] : cases) {
    absl::StatusOr<ir::TrainStep> step =
        BenchMlp(options.actors, microbatches, options.width, options.batch, /*layers_per_stage=*/2, 1, updates);
    if (!step.ok()) return Fail(err, "async", step.status());
    absl::StatusOr<schedules::Schedule> schedule =
        schedules::Generate(name, {.actors = options.actors, .microbatches = microbatches});
    if (!schedule.ok()) return Fail(err, "async", schedule.status());
    absl::StatusOr<Running> running = StartPipeline(options.launcher, *step, *schedule);
    if (!running.ok()) return Fail(err, "async", running.status());
    description = running->description;
    const std::vector<ir::TensorMap> batches = BenchBatches(*step);
    controller::StepTrace trace(running->pipeline->compiled());
    absl::StatusOr<double> median = MedianStepSeconds(*running->pipeline, batches, options.steps, trace);
    if (!median.ok()) return Fail(err, "async", median.status());
    Row row{name, microbatches, step->updates_per_step()};
    row.step_ms = *median * 1e3;
    row.microbatches_per_s = microbatches / *median;
    const std::vector<double> bubble = trace.MeasuredBubble();
    for (double b : bubble) row.bubble += b / static_cast<double>(bubble.size());
    rows.push_back(row);
  }
  const double base = rows.front().microbatches_per_s;
  if (options.json) {
    nlohmann::ordered_json json_rows = nlohmann::ordered_json::array();
    for (const Row& row : rows) {
      json_rows.push_back({{"schedule", row.schedule}, {"microbatches_per_step", row.microbatches},
                           {"updates_per_step", row.updates}, {"step_ms", row.step_ms},
                           {"microbatches_per_s", row.microbatches_per_s}, {"measured_bubble", row.bubble},
                           {"throughput_vs_1f1b", row.microbatches_per_s / base}});
    }
    const nlohmann::ordered_json json = {{"actors", options.actors},        {"microbatches_per_update", options.microbatches},
                                         {"width", options.width},          {"batch", options.batch},
                                         {"rows", json_rows}};
    out << schedules::JsonText(json) << "\n";
    return 0;
  }
  out << absl::StrFormat(
      "async: MLP, %d actors, 2 layers of %d x %d per stage (batch %d), %d microbatches per update; %s; median of "
      "%d steps\n\n",
      options.actors, options.width, options.width, options.batch, options.microbatches, description, options.steps);
  out << absl::StrFormat("  %-10s %12s %12s %10s %16s %16s %10s\n", "schedule", "mb/step", "updates/step", "step ms",
                         "microbatches/s", "measured bubble", "vs 1f1b");
  for (const Row& row : rows) {
    out << absl::StrFormat("  %-10s %12d %12d %10.2f %16.1f %15.1f%% %9.2fx\n", row.schedule, row.microbatches,
                           row.updates, row.step_ms, row.microbatches_per_s, 100 * row.bubble,
                           row.microbatches_per_s / base);
  }
  return 0;
}

}  // namespace

void AddPipelineBenches(CommandLine& command_line, CLI::App& bench) {
  CLI::App* dispatch =
      command_line.Add(bench, "dispatch", "fused vs per-task dispatch: RPCs and controller CPU per step (P=4, M=64)",
                       "[--actors P] [--microbatches M] [--steps N] [launcher options] [--json]");
  auto dispatch_options = std::make_shared<DispatchBenchOptions>();
  AddLauncherOptions(*dispatch, dispatch_options->launcher);
  AddIntegerOption(*dispatch, "--actors", dispatch_options->actors, "pipeline actors");
  AddIntegerOption(*dispatch, "--data-parallel", dispatch_options->replicas,
                   "replicas of the pipeline (P x D actors), gradients all-reduced among them");
  AddIntegerOption(*dispatch, "--microbatches", dispatch_options->microbatches, "microbatches per step");
  AddIntegerOption(*dispatch, "--steps", dispatch_options->steps, "measured steps per dispatch mode");
  dispatch->add_flag("--json", dispatch_options->json, "print JSON");
  command_line.OnRun(dispatch, [dispatch_options, &streams = command_line.streams()] {
    return RunDispatchBench(*dispatch_options, streams.out, streams.err);
  });

  CLI::App* fidelity = command_line.Add(
      bench, "fidelity", "measured step time vs the simulator's prediction (GPipe, 1F1B, ZB-H1; P=2, M=16)",
      "[--actors P] [--microbatches M] [--width W] [--batch B] [--steps N] [--schedules A,B] [launcher options] "
      "[--json]");
  auto fidelity_options = std::make_shared<FidelityBenchOptions>();
  AddLauncherOptions(*fidelity, fidelity_options->launcher);
  AddIntegerOption(*fidelity, "--actors", fidelity_options->actors, "pipeline actors");
  AddIntegerOption(*fidelity, "--microbatches", fidelity_options->microbatches, "microbatches per step");
  AddIntegerOption(*fidelity, "--width", fidelity_options->width, "hidden width of the calibrated layers");
  AddIntegerOption(*fidelity, "--batch", fidelity_options->batch, "examples per microbatch");
  AddIntegerOption(*fidelity, "--steps", fidelity_options->steps,
                   "measured steps per schedule (after 2 warm-up steps)");
  fidelity->add_option("--schedules", fidelity_options->schedules, "comma-separated built-in schedules")
      ->capture_default_str();
  fidelity->add_flag("--json", fidelity_options->json, "print JSON");
  command_line.OnRun(fidelity, [fidelity_options, &streams = command_line.streams()] {
    return RunFidelityBench(*fidelity_options, streams.out, streams.err);
  });

  CLI::App* graph = command_line.Add(
      bench, "graph",
      "branch-parallel pipelines: the two-tower model on its stage DAG vs the same stages as a chain (3 actors)",
      "[--microbatches M] [--width W] [--batch B] [--towers L,R] [--head-layers H] [--steps N] [--schedules A,B] "
      "[launcher options] [--json]");
  auto graph_options = std::make_shared<GraphBenchOptions>();
  AddLauncherOptions(*graph, graph_options->launcher);
  AddIntegerOption(*graph, "--microbatches", graph_options->microbatches, "microbatches per step");
  AddIntegerOption(*graph, "--width", graph_options->width, "input and hidden width of every layer");
  AddIntegerOption(*graph, "--batch", graph_options->batch, "examples per microbatch");
  graph->add_option("--towers", graph_options->towers, "layers of the left and right towers")
      ->delimiter(',')
      ->expected(2)
      ->capture_default_str();
  AddIntegerOption(*graph, "--head-layers", graph_options->head_layers, "layers of the head that merges them");
  AddIntegerOption(*graph, "--steps", graph_options->steps, "measured steps per schedule (after 2 warm-up steps)");
  graph->add_option("--schedules", graph_options->schedules,
                    "comma-separated built-in schedules; graph-* run the stage DAG, the others the chain")
      ->capture_default_str();
  graph->add_flag("--json", graph_options->json, "print JSON");
  command_line.OnRun(graph, [graph_options, &streams = command_line.streams()] {
    return RunGraphBench(*graph_options, streams.out, streams.err);
  });

  CLI::App* async = command_line.Add(
      bench, "async", "asynchronous pipelines: 2BW and PipeDream against 1F1B, the same microbatches per update",
      "[--actors P] [--microbatches M] [--updates K] [--width W] [--batch B] [--steps N] [launcher options] [--json]");
  auto async_options = std::make_shared<AsyncBenchOptions>();
  AddLauncherOptions(*async, async_options->launcher);
  AddIntegerOption(*async, "--actors", async_options->actors, "pipeline actors");
  AddIntegerOption(*async, "--microbatches", async_options->microbatches, "microbatches per update (2bw's m)");
  AddIntegerOption(*async, "--updates", async_options->updates, "updates per step under 2bw (pipedream: as many microbatches)");
  AddIntegerOption(*async, "--width", async_options->width, "hidden width of every layer");
  AddIntegerOption(*async, "--batch", async_options->batch, "examples per microbatch");
  AddIntegerOption(*async, "--steps", async_options->steps, "measured steps per schedule (after 2 warm-up steps)");
  async->add_flag("--json", async_options->json, "print JSON");
  command_line.OnRun(async, [async_options, &streams = command_line.streams()] {
    return RunAsyncBench(*async_options, streams.out, streams.err);
  });
}

}  // namespace tandem::cli
