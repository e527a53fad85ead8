// `tandem bench peers`: Tandem beside the systems a user would pick instead,
// on the same model, weights, batch, stage split and thread count, on this
// machine: Tandem pipelined over actor processes and single-process (the
// reference), PyTorch 2 eager and torch.compile, JAX jit, and PyTorch's
// torch.distributed.pipelining (gloo, one process per stage) under each of
// its schedules. The peers run tools/bench/peers.py in the Python
// environment (build/venv), from the Hugging Face directory of Tandem's
// initial parameters (examples/hugging_face.h), so "the same model" is
// shown, not assumed: same parameter count, same first loss.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "backends/cpu/interpreter.h"
#include "backends/cpu/kernel_threads.h"
#include "backends/cpu/kernels.h"
#include "controller/memory_fit.h"
#include "controller/pipeline.h"
#include "examples/example_job.h"
#include "examples/hugging_face.h"
#include "ir/host_tensor.h"
#include "ir/safetensors.h"
#include "ir/state_source.h"
#include "schedules/generators.h"
#include "schedules/json_text.h"
#include "tools/cli/bench_support.h"
#include "tools/cli/commands.h"
#include "tools/cli/pipeline_options.h"

namespace tandem::cli {
namespace {

// One model of the table, as Tandem runs it: the options of its job, its
// pipeline's actors and schedule.
struct PeerRow {
  std::string name;
  examples::ExampleJobOptions model;
  int32_t actors = 2;
};

std::vector<PeerRow> Rows() {
  std::vector<PeerRow> rows;
  {
    PeerRow main{"main", {}, 4};  // the README's main job: the default gpt, 4 actors, 8 microbatches
    main.model.microbatches = 8;
    rows.push_back(main);
  }
  {
    PeerRow small{"gpt2-small", {}, 2};
    small.model.preset = "gpt2-small";
    small.model.seq = 128;
    small.model.batch = 2;
    small.model.microbatches = 4;
    rows.push_back(small);
  }
  {
    PeerRow llama{"llama", {}, 4};  // the README's llama, on the character corpus with its BPE's vocabulary
    llama.model.model = "llama";
    llama.model.layers = 4;
    llama.model.dim = 128;
    llama.model.heads = 8;
    llama.model.kv_heads = 2;
    llama.model.seq = 64;
    llama.model.batch = 8;
    llama.model.microbatches = 8;
    llama.model.vocab = 2048;
    rows.push_back(llama);
  }
  return rows;
}

struct PeersBenchOptions {
  std::vector<std::string> rows = {"main", "gpt2-small", "llama"};
  std::vector<std::string> peers = {"eager", "compile", "jax", "pipelining"};
  std::vector<std::string> schedules = {"gpipe", "1f1b", "interleaved-1f1b", "interleaved-zero-bubble",
                                        "zbv-zero-bubble"};
  int64_t steps = 3;
  int threads = 0;  // 0: every core
  std::string python = DefaultPython();
  std::string script = TorchScriptDirectory() + "/peers.py";
  bool json = false;
};

// One system's measurement.
struct Measured {
  std::string system;   // e.g. "tandem 1f1b x4", "torch eager"
  std::string kind;     // "single" or "pipelined": what it is compared with
  std::string version;
  double ms = 0;
  std::optional<double> first_loss;
  int64_t parameters = 0;
  double peak_mb = 0;
  std::string peak_what;  // "rss" or "tensors"
  std::string error;
};

// Removes a directory when it goes.
struct TemporaryDirectory {
  std::string path;
  TemporaryDirectory() {
    std::string name = (std::filesystem::temp_directory_path() / "tandem-peers-XXXXXX").string();
    if (mkdtemp(name.data()) != nullptr) path = name;
  }
  ~TemporaryDirectory() {
    std::error_code error;
    if (!path.empty()) std::filesystem::remove_all(path, error);
  }
};

// The microbatches' tokens and labels stacked [M, B, T], as peers.py reads them.
absl::Status WriteBatch(const std::vector<ir::TensorMap>& microbatches, const std::string& path) {
  std::vector<std::pair<std::string, ir::StateSource>> tensors;
  for (const char* name : {"tokens", "labels"}) {
    const ir::HostTensor& first = microbatches.front().at(name);
    ir::Shape shape = first.type().shape;
    shape.insert(shape.begin(), static_cast<int64_t>(microbatches.size()));
    absl::StatusOr<ir::HostTensor> stacked = ir::HostTensor::Allocate({ir::DType::kI32, shape});
    if (!stacked.ok()) return stacked.status();
    for (size_t m = 0; m < microbatches.size(); ++m) {
      std::copy_n(microbatches[m].at(name).data(), first.num_bytes(),
                  stacked->data() + static_cast<int64_t>(m) * first.num_bytes());
    }
    const ir::TensorType type = stacked->type();
    tensors.emplace_back(name, ir::StateSource{type, *std::move(stacked)});
  }
  return ir::WriteSafetensors(path, tensors, {});
}

double MeanOf(const std::vector<float>& values) {
  double sum = 0;
  for (float v : values) sum += v;
  return values.empty() ? 0 : sum / static_cast<double>(values.size());
}

int64_t ParameterCount(const ir::TrainStep& step) {
  int64_t count = 0;
  for (const ir::StateSpec& spec : step.state) {
    if (spec.role == ir::StateRole::kParameter) count += spec.type.num_elements();
  }
  return count;
}

// Tandem on one process: the reference interpreter at `threads` kernel threads.
Measured TandemSingle(const examples::ExampleJob& job, const std::vector<ir::TensorMap>& batch, int threads,
                      int64_t steps) {
  Measured measured{.system = absl::StrFormat("tandem single-process"), .kind = "single", .version = "tandem"};
  measured.parameters = ParameterCount(job.step);
  absl::StatusOr<ir::TensorMap> state = ir::MaterializeStates(ir::SeedSources(job.step));
  if (!state.ok()) {
    measured.error = std::string(state.status().message());
    return measured;
  }
  cpu::KernelThreads kernel_threads(threads);
  ir::SetStorageCacheBytes(ir::kComputeStorageCacheBytes);  // as the actors do
  const bool peak_known = controller::ResetPeakResidentBytes();
  std::vector<double> times;
  for (int64_t s = 0; s <= steps; ++s) {  // step 0: the warm-up, whose loss is the first
    const Clock::time_point start = Clock::now();
    absl::StatusOr<cpu::StepResult> result =
        kernel_threads.Run([&] { return cpu::RunReferenceStep(job.step, *state, batch, s + 1); });
    const double ms = MillisecondsSince(start);
    if (!result.ok()) {
      measured.error = std::string(result.status().message());
      return measured;
    }
    if (s == 0) measured.first_loss = MeanOf(result->losses);
    else times.push_back(ms);
  }
  measured.ms = Median(times);
  measured.peak_mb =
      peak_known ? static_cast<double>(controller::PeakResidentBytes().value_or(0)) / (1 << 20) : 0;
  measured.peak_what = "rss";
  ir::SetStorageCacheBytes(0);
  return measured;
}

// Tandem pipelined: `actors` local actor processes under 1F1B.
Measured TandemPipelined(const examples::ExampleJob& job, const std::vector<ir::TensorMap>& batch, int32_t actors,
                         int threads, int64_t steps) {
  Measured measured{.system = absl::StrFormat("tandem 1f1b, %d actor processes", actors), .kind = "pipelined",
                    .version = "tandem"};
  measured.parameters = ParameterCount(job.step);
  auto fail = [&](const absl::Status& status) {
    measured.error = std::string(status.message());
    return measured;
  };
  absl::StatusOr<schedules::Schedule> schedule =
      schedules::Generate("1f1b", {.actors = actors, .microbatches = job.step.num_microbatches});
  if (!schedule.ok()) return fail(schedule.status());
  LauncherOptions launcher;
  launcher.threads = std::max(1, threads / actors);
  absl::StatusOr<LauncherChoice> choice = MakeLauncher(launcher);
  if (!choice.ok()) return fail(choice.status());
  absl::StatusOr<std::unique_ptr<controller::Pipeline>> pipeline =
      controller::Pipeline::Create(job.step, *schedule, ir::SeedSources(job.step), std::move(choice->launcher));
  if (!pipeline.ok()) return fail(pipeline.status());
  std::vector<double> times;
  for (int64_t s = 0; s <= steps; ++s) {
    const Clock::time_point start = Clock::now();
    absl::StatusOr<controller::StepReport> report = (*pipeline)->Step(batch);
    const double ms = MillisecondsSince(start);
    if (!report.ok()) return fail(report.status());
    if (s == 0) measured.first_loss = MeanOf(report->losses);
    else times.push_back(ms);
    for (int64_t bytes : report->peak_live_bytes) {
      measured.peak_mb = std::max(measured.peak_mb, static_cast<double>(bytes) / (1 << 20));
    }
  }
  measured.ms = Median(times);
  measured.peak_what = "tensors";
  return measured;
}

Measured Peer(const PeersBenchOptions& options, const std::string& peer, const std::string& schedule,
              const std::string& model_dir, const std::string& batch, int32_t actors,
              const std::vector<int32_t>& stage_layers, int threads) {
  const bool pipelined = peer == "pipelining";
  Measured measured;
  measured.kind = pipelined ? "pipelined" : "single";
  measured.system = pipelined ? absl::StrFormat("torch.distributed.pipelining %s, %d processes", schedule, actors)
                    : peer == "jax"   ? "jax jit"
                    : peer == "eager" ? "torch eager"
                                      : "torch.compile";
  const std::string args =
      absl::StrCat("--peer ", peer, " --schedule ", schedule, " --model ", model_dir, " --batch ", batch,
                   " --actors ", actors, " --stage-layers ", absl::StrJoin(stage_layers, ","), " --threads ", threads,
                   " --steps ", options.steps);
  const ScriptReply reply = RunPythonScript(options.python, options.script, args);
  if (!reply.error.empty()) {
    measured.error = reply.error;
    return measured;
  }
  const nlohmann::ordered_json& json = reply.json;
  measured.ms = json.value("step_ms", 0.0);
  if (json.contains("first_loss") && json["first_loss"].is_number()) measured.first_loss = json["first_loss"];
  measured.parameters = json.value("parameters", int64_t{0});
  measured.peak_mb = json.value("peak_rss_mb", 0.0);
  measured.peak_what = "rss";
  measured.version = json.value("version", std::string("?"));
  return measured;
}

int RunPeersBench(const PeersBenchOptions& options, std::ostream& out, std::ostream& err) {
  cpu::SetBlasThreads(1);
  const int threads = options.threads > 0 ? options.threads
                                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  nlohmann::ordered_json json_rows = nlohmann::ordered_json::array();
  bool same_everywhere = true;
  if (!options.json) {
    out << "one training step (forward and backward of every microbatch, one Adam update) on this machine, "
        << threads << " threads in all; median of " << options.steps << " steps after a warm-up\n"
        << "tandem BLAS: " << cpu::BlasDescription() << "\n";
  }
  for (const PeerRow& row : Rows()) {
    if (std::find(options.rows.begin(), options.rows.end(), row.name) == options.rows.end()) continue;
    examples::ExampleJobOptions single_options = row.model;
    single_options.stages = 1;
    examples::ExampleJobOptions pipelined_options = row.model;
    pipelined_options.stages = row.actors;
    // Every pipeline, Tandem's and PyTorch's, splits the layers so that its
    // stages cost alike (the last one holds the head and the loss).
    absl::StatusOr<std::vector<int32_t>> balanced = examples::CostBalancedLayerStages(row.model, row.actors);
    if (!balanced.ok()) {
      err << "tandem bench peers: " << row.name << ": " << balanced.status().message() << "\n";
      return 1;
    }
    pipelined_options.layer_stages = *balanced;
    std::vector<int32_t> stage_layers(static_cast<size_t>(row.actors), 0);
    for (int32_t stage : *balanced) ++stage_layers[static_cast<size_t>(stage)];
    absl::StatusOr<examples::ExampleJob> single = examples::MakeExampleJob(single_options);
    if (!single.ok()) {
      err << "tandem bench peers: " << row.name << ": " << single.status().message() << "\n";
      return 1;
    }
    absl::StatusOr<examples::ExampleJob> pipelined = examples::MakeExampleJob(pipelined_options);
    if (!pipelined.ok()) {
      err << "tandem bench peers: " << row.name << ": " << pipelined.status().message() << "\n";
      return 1;
    }
    absl::StatusOr<std::vector<ir::TensorMap>> batch = single->train_batch(0);
    if (!batch.ok()) {
      err << "tandem bench peers: " << row.name << ": " << batch.status().message() << "\n";
      return 1;
    }
    TemporaryDirectory work;
    const std::string model_dir = work.path + "/model";
    const std::string batch_file = work.path + "/batch.safetensors";
    std::vector<std::pair<std::string, ir::StateSource>> parameters;
    const ir::StateSources seeds = ir::SeedSources(single->step);
    for (const ir::StateSpec& spec : single->step.state) {
      if (spec.role == ir::StateRole::kParameter) parameters.emplace_back(spec.name, seeds.at(spec.name));
    }
    if (absl::Status status = examples::WriteHuggingFaceModel(model_dir, *single, single_options, parameters, {});
        !status.ok()) {
      err << "tandem bench peers: " << status.message() << "\n";
      return 1;
    }
    if (absl::Status status = WriteBatch(*batch, batch_file); !status.ok()) {
      err << "tandem bench peers: " << status.message() << "\n";
      return 1;
    }
    std::vector<Measured> measured;
    measured.push_back(TandemSingle(*single, *batch, threads, options.steps));
    measured.push_back(TandemPipelined(*pipelined, *batch, row.actors, threads, options.steps));
    for (const std::string& peer : options.peers) {
      if (peer != "pipelining") {
        measured.push_back(Peer(options, peer, "1f1b", model_dir, batch_file, row.actors, stage_layers, threads));
        continue;
      }
      for (const std::string& schedule : options.schedules) {
        measured.push_back(Peer(options, peer, schedule, model_dir, batch_file, row.actors, stage_layers, threads));
      }
    }
    const Measured& tandem_single = measured[0];
    const Measured& tandem_pipelined = measured[1];
    const double tokens = static_cast<double>(single->items_per_step);
    const std::optional<double> reference_loss = tandem_single.first_loss;
    nlohmann::ordered_json json_systems = nlohmann::ordered_json::array();
    if (!options.json) {
      out << "\n" << row.name << ": " << single->description << "; pipelined over " << row.actors
          << " stages of " << absl::StrJoin(stage_layers, ", ") << " layers (balanced by cost); "
          << tandem_single.parameters << " parameters\n";
      out << absl::StrFormat("  %-52s %10s %10s %14s %9s %12s %s\n", "system", "step ms", "tokens/s",
                             "peak MB/proc", "vs tandem", "first loss", "version");
    }
    for (const Measured& m : measured) {
      const Measured& tandem = m.kind == "pipelined" ? tandem_pipelined : tandem_single;
      const bool ok = m.error.empty() && tandem.error.empty() && m.ms > 0;
      const double ratio = ok ? m.ms / tandem.ms : 0;
      const bool same_model = m.error.empty() && m.parameters == tandem_single.parameters && m.first_loss &&
                              reference_loss &&
                              std::abs(*m.first_loss - *reference_loss) <= 1e-4 * std::abs(*reference_loss);
      if (m.error.empty() && !same_model) same_everywhere = false;
      json_systems.push_back({{"system", m.system},
                              {"compared_with", m.kind},
                              {"version", m.version},
                              {"step_ms", m.error.empty() ? nlohmann::ordered_json(m.ms) : nullptr},
                              {"tokens_per_s", ok ? nlohmann::ordered_json(tokens / (m.ms / 1e3)) : nullptr},
                              {"peak_mb_per_process", m.peak_mb},
                              {"peak_of", m.peak_what},
                              {"ratio_to_tandem", ok ? nlohmann::ordered_json(ratio) : nullptr},
                              {"first_loss", m.first_loss ? nlohmann::ordered_json(*m.first_loss) : nullptr},
                              {"parameters", m.parameters},
                              {"same_model", same_model},
                              {"error", m.error}});
      if (options.json) continue;
      if (!m.error.empty()) {
        out << absl::StrFormat("  %-52s %s\n", m.system, absl::StrCat("failed: ", m.error.substr(0, 120)));
        continue;
      }
      out << absl::StrFormat("  %-52s %10.1f %10.0f %10.0f %-3s %8s %12.7f%s %s\n", m.system, m.ms,
                             tokens / (m.ms / 1e3), m.peak_mb, m.peak_what == "rss" ? "rss" : "tns",
                             ok ? absl::StrFormat("%.2fx", ratio) : "-", m.first_loss.value_or(NAN),
                             same_model ? " " : "!", m.version);
    }
    json_rows.push_back({{"row", row.name},
                         {"description", single->description},
                         {"actors", row.actors},
                         {"stage_layers", stage_layers},
                         {"tokens_per_step", tokens},
                         {"parameters", tandem_single.parameters},
                         {"systems", json_systems}});
  }
  if (options.json) {
    nlohmann::ordered_json json;
    json["threads"] = threads;
    json["steps"] = options.steps;
    json["tandem_blas"] = cpu::BlasDescription();
    json["same_model_everywhere"] = same_everywhere;
    json["rows"] = json_rows;
    out << schedules::JsonText(json) << "\n";
  } else {
    out << "\nvs tandem: the system's step time over Tandem's (pipelined systems against Tandem pipelined, the "
           "others against Tandem single-process); above 1.00x Tandem is faster. peak: resident memory (rss) of "
           "the process, or Tandem's actors' live tensors (tns). ! marks a system whose parameter count or first "
           "loss (within 1e-4 relative) differs from Tandem's: not the same model.\n"
        << "same model everywhere: " << (same_everywhere ? "yes" : "NO") << "\n";
  }
  return same_everywhere ? 0 : 1;
}

}  // namespace

void AddPeersBench(CommandLine& command_line, CLI::App& bench) {
  auto options = std::make_shared<PeersBenchOptions>();
  CLI::App* command = command_line.Add(
      bench, "peers", "Tandem beside PyTorch 2 (eager, torch.compile, pipelining) and JAX on the same models",
      "[--rows main,gpt2-small,llama] [--peers eager,compile,jax,pipelining] [--schedules ...] [--steps N] "
      "[--threads T] [--python P] [--json]",
      "Times one training step of the same model, weights and batch under Tandem (pipelined over actor "
      "processes under 1F1B, and single-process) and under the systems a user would pick instead: PyTorch 2 "
      "eager and torch.compile, JAX jit, and torch.distributed.pipelining (gloo, one process per stage) under "
      "each of its schedules, with the same stage split, microbatches and thread count (T in all: single "
      "processes take T, pipelines T / stages each). Rows: the README's main job (the default gpt, 4 stages, 8 "
      "microbatches), GPT-2 small at seq 128 (2 stages, 4 microbatches of 2), and the README's llama (4 "
      "stages). The peers start from the Hugging Face directory of Tandem's initial parameters and show that "
      "they are the same model: same parameter count, same loss on the first batch within 1e-4 (a ! marks "
      "one that is not; the exit status is then 1). Needs the Python environment (tools/setup.sh).");
  command->add_option("--rows", options->rows, "the models, of main, gpt2-small and llama")
      ->delimiter(',')
      ->check(CLI::IsMember({"main", "gpt2-small", "llama"}));
  command->add_option("--peers", options->peers, "the peers, of eager, compile, jax and pipelining")
      ->delimiter(',')
      ->check(CLI::IsMember({"eager", "compile", "jax", "pipelining"}));
  command->add_option("--schedules", options->schedules, "torch.distributed.pipelining's schedules to run")
      ->delimiter(',')
      ->check(CLI::IsMember({"gpipe", "1f1b", "interleaved-1f1b", "interleaved-zero-bubble", "zbv-zero-bubble"}));
  command->add_option("--steps", options->steps, "timed steps after the warm-up")
      ->check(CLI::Range(int64_t{1}, int64_t{1000}))
      ->capture_default_str();
  command->add_option("--threads", options->threads, "threads in all (default: every core)")
      ->check(CLI::Range(1, 4096));
  command->add_option("--python", options->python, "the Python environment's interpreter")->capture_default_str();
  command->add_option("--script", options->script, "the peers' script")->capture_default_str();
  command->add_flag("--json", options->json, "print one JSON object instead of the table");
  command_line.OnRun(command, [options, &streams = command_line.streams()] {
    return RunPeersBench(*options, streams.out, streams.err);
  });
}

}  // namespace tandem::cli
