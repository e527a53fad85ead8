// `tandem bench step`: one training step of the example GPT on the
// reference interpreter (forward and backward of every microbatch, the
// gradients summed, one Adam update) at several kernel thread counts, next
// to the same step in PyTorch on the CPU with the same thread counts
// (tools/bench/torch_gpt_step.py, run by the Python environment build/venv).
// It also checks what the threads must not change: the first step's losses
// and updated state are bit-identical at every thread count.
#include <algorithm>
#include <cstring>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "backends/cpu/interpreter.h"
#include "backends/cpu/kernel_threads.h"
#include "backends/cpu/kernels.h"
#include "controller/memory_fit.h"
#include "examples/example_job.h"
#include "ir/host_tensor.h"
#include "ir/state_source.h"
#include "schedules/json_text.h"
#include "tools/cli/bench_support.h"
#include "tools/cli/commands.h"
#include "tools/cli/model_options.h"

namespace tandem::cli {
namespace {

struct StepBenchOptions {
  examples::ExampleJobOptions model;
  std::vector<int> threads;  // empty: 1 and every core
  int64_t repeats = 5;
  std::string python = DefaultPython();
  std::string torch_script = TorchScriptDirectory() + "/torch_gpt_step.py";
  bool no_torch = false;
  bool json = false;
};

// One thread count's run: the median step, and the first step's losses and
// state (to compare across thread counts).
struct ThreadCountRun {
  int threads = 0;
  double ms = 0;
  std::vector<float> losses;
  ir::TensorMap state;
  TorchResult torch;
};

absl::StatusOr<ThreadCountRun> MeasureTandem(const examples::ExampleJob& job, const ir::TensorMap& initial, int threads,
                                             int64_t repeats) {
  ThreadCountRun measured;
  measured.threads = threads;
  cpu::KernelThreads kernel_threads(threads);
  ir::TensorMap state = initial;
  std::vector<double> times;
  for (int64_t r = 0; r <= repeats; ++r) {  // run 0 is the warm-up, and the one compared
    absl::StatusOr<std::vector<ir::TensorMap>> next_batch = job.train_batch(static_cast<uint64_t>(r));
    if (!next_batch.ok()) return next_batch.status();
    const std::vector<ir::TensorMap>& batch = *next_batch;
    const Clock::time_point start = Clock::now();
    absl::StatusOr<cpu::StepResult> result =
        kernel_threads.Run([&] { return cpu::RunReferenceStep(job.step, state, batch, r + 1); });
    const double ms = MillisecondsSince(start);
    if (!result.ok()) return result.status();
    if (r == 0) {
      measured.losses = result->losses;
      measured.state = state;
    } else {
      times.push_back(ms);
    }
  }
  measured.ms = Median(times);
  return measured;
}

bool SameBits(const ThreadCountRun& a, const ThreadCountRun& b) {
  if (a.losses.size() != b.losses.size() ||
      std::memcmp(a.losses.data(), b.losses.data(), a.losses.size() * sizeof(float)) != 0) {
    return false;
  }
  for (const auto& [name, tensor] : a.state) {
    auto it = b.state.find(name);
    if (it == b.state.end() || !it->second.BitwiseEquals(tensor)) return false;
  }
  return a.state.size() == b.state.size();
}

int RunStepBench(StepBenchOptions options, std::ostream& out, std::ostream& err) {
  if (options.model.model != "gpt") {
    err << "tandem bench step: the PyTorch side is the example GPT's; --model must be gpt\n";
    return 2;
  }
  if (options.model.preset.empty()) {
    // Without a preset, the benchmark's own GPT (4 layers, d=256, 8 heads,
    // seq 64, batch 4) under the sizes given; a preset's sizes are its own.
    options.model.layers = options.model.layers.value_or(4);
    options.model.dim = options.model.dim.value_or(256);
    options.model.heads = options.model.heads.value_or(8);
    options.model.seq = options.model.seq.value_or(64);
    options.model.batch = options.model.batch.value_or(4);
  }
  absl::StatusOr<examples::ExampleJob> job = examples::MakeExampleJob(options.model);
  if (!job.ok()) {
    err << "tandem bench step: " << job.status().message() << "\n";
    return 2;
  }
  if (options.threads.empty()) {
    options.threads = {1};
    if (cpu::HostCores() > 1) options.threads.push_back(cpu::HostCores());
  }
  if (absl::Status fits = controller::CheckWholeModelFitsThisHost(job->step, controller::WholeModel::kTraining);
      !fits.ok()) {
    err << "tandem bench step: " << fits << "\n";
    return 1;
  }
  absl::StatusOr<ir::TensorMap> initial = ir::MaterializeStates(ir::SeedSources(job->step));
  if (!initial.ok()) {
    err << "tandem bench step: " << initial.status().message() << "\n";
    return 1;
  }
  cpu::SetBlasThreads(1);  // GEMM tiles on one BLAS thread each
  ir::SetStorageCacheBytes(ir::kComputeStorageCacheBytes);  // as the actors do
  const ir::TensorType& wte = job->step.FindState("wte")->type;
  const int64_t dim = wte.shape[1], vocab = wte.shape[0];
  const int64_t seq = job->step.FindState("wpe")->type.shape[0];
  std::vector<ThreadCountRun> runs;
  for (int threads : options.threads) {
    absl::StatusOr<ThreadCountRun> measured = MeasureTandem(*job, *initial, threads, options.repeats);
    if (!measured.ok()) {
      err << "tandem bench step: " << measured.status().message() << "\n";
      return 1;
    }
    if (options.no_torch) {
      measured->torch.error = "skipped (--no-torch)";
    } else {
      measured->torch = RunTorchScript(
          options.python, options.torch_script,
          absl::StrCat("--dim ", dim, " --heads ", job->gpt->num_heads, " --seq ", seq, " --batch ",
                       job->microbatch_size, " --layers ", job->gpt->num_layers, " --microbatches ",
                       options.model.microbatches, " --vocab ", vocab, " --threads ", threads, " --repeats ",
                       options.repeats));
    }
    runs.push_back(*std::move(measured));
  }
  bool same = true;
  for (const ThreadCountRun& run : runs) same = same && SameBits(run, runs.front());

  if (options.json) {
    nlohmann::ordered_json json;
    json["benchmark"] = "step";
    json["model"] = job->description;
    json["repeats"] = options.repeats;
    json["bits_identical_across_threads"] = same;
    json["tandem_blas"] = cpu::BlasDescription();
    json["runs"] = nlohmann::ordered_json::array();
    for (const ThreadCountRun& run : runs) {
      json["runs"].push_back({{"threads", run.threads},
                              {"tandem_ms", run.ms},
                              {"speedup_vs_first", runs.front().ms / run.ms},
                              {"torch_ms", run.torch.ms ? nlohmann::ordered_json(*run.torch.ms) : nullptr},
                              {"ratio", run.torch.ms ? nlohmann::ordered_json(run.ms / *run.torch.ms) : nullptr},
                              {"torch_blas", run.torch.blas},
                              {"torch_error", run.torch.error}});
    }
    out << schedules::JsonText(json) << "\n";
    return same ? 0 : 1;
  }
  out << "one training step (forward+backward of every microbatch, one Adam update) on the reference interpreter\n"
      << job->description << "\nmedian of " << options.repeats << " steps after one warm-up\n\n";
  out << absl::StrFormat("  %7s  %12s  %10s  %12s  %14s\n", "threads", "tandem ms", "speedup", "pytorch ms",
                         "tandem/pytorch");
  for (const ThreadCountRun& run : runs) {
    out << absl::StrFormat("  %7d  %12.1f  %9.2fx  %12s  %14s\n", run.threads, run.ms, runs.front().ms / run.ms,
                           run.torch.ms ? absl::StrFormat("%.1f", *run.torch.ms) : "-",
                           run.torch.ms ? absl::StrFormat("%.2fx", run.ms / *run.torch.ms) : "-");
  }
  out << "\nlosses and updated state of the first step bit-identical at every thread count: "
      << (same ? "yes" : "NO") << "\ntandem BLAS: " << cpu::BlasDescription() << "\n";
  const ThreadCountRun& first = runs.front();
  if (first.torch.ms) {
    out << "pytorch " << first.torch.version << ", BLAS: " << first.torch.blas << "\n";
  } else {
    out << "pytorch unavailable: " << first.torch.error << "\n";
  }
  return same ? 0 : 1;
}

}  // namespace

void AddStepBench(CommandLine& command_line, CLI::App& bench) {
  CLI::App* command = command_line.Add(
      bench, "step", "one GPT training step on the reference at 1..N kernel threads vs PyTorch", "[options]",
      "Times one training step of the example GPT (forward and backward of every microbatch, one Adam update) on "
      "the reference interpreter at each --threads count, next to the same step in PyTorch on the CPU with the "
      "same thread count, and checks that the step's losses and updated state are bit-identical at every count. "
      "Exits 1 if they are not. The model: 4 layers, d=256, 8 heads, seq 64, batch 4 x 4 microbatches unless the "
      "options say otherwise; a --preset brings its own sizes (e.g. --preset gpt2-small --seq 64 --batch 4).");
  auto options = std::make_shared<StepBenchOptions>();
  AddModelOptions(*command, options->model);
  command->add_option("--threads", options->threads, "kernel thread counts, e.g. 1,2 (default: 1 and every core)")
      ->delimiter(',')
      ->check(CLI::Range(1, 4096));
  AddIntegerOption(*command, "--repeats", options->repeats, "timed steps after one warm-up; the median is reported");
  command
      ->add_option("--python", options->python, "the Python that has torch (default: build/venv, made by tools/setup.sh)")
      ->capture_default_str();
  command->add_option("--torch-script", options->torch_script, "the PyTorch side")->capture_default_str();
  command->add_flag("--no-torch", options->no_torch, "time Tandem only");
  command->add_flag("--json", options->json, "print one JSON object instead of the table");
  command_line.OnRun(command, [options, &streams = command_line.streams()] {
    return RunStepBench(*options, streams.out, streams.err);
  });
}

}  // namespace tandem::cli
