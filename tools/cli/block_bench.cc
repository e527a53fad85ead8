// `tandem bench block`: one forward+backward of one pre-norm GPT decoder
// block in the reference interpreter, next to the same block in PyTorch on
// the CPU with the same thread count (tools/bench/torch_block.py, run by
// the Python environment build/venv), and their ratio. With --device
// cuda[+tf32|+bf16] the Tandem side is the actor's CUDA device
// (backends/device.h) and PyTorch runs eagerly on the same GPU in the same
// precision (bf16: autocast matmuls; --torch-sdpa: fused attention).
//
// The block is examples/models/gpt.cc's, op for op: x + attn(ln1(x)), then
// x + mlp(ln2(x)). The traced model is loss = mean(block(x) * probe) with x
// declared as a parameter, so the backward computes dx like a block inside
// a network, plus every weight gradient; probe is a fixed random label. The
// timed call is Device::Run of the step's microbatch graph (forward and
// backward, no optimizer update) on inputs already on the device, until its
// loss is back on the host.
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "backends/cpu/kernel_threads.h"
#include "backends/cpu/kernels.h"
#include "backends/device.h"
#include "backends/open_device.h"
#include "ir/device_spec.h"
#include "ir/graph.h"
#include "ir/graph_plan.h"
#include "ir/host_tensor.h"
#include "ir/initial_state.h"
#include "ir/layers.h"
#include "ir/op.h"
#include "ir/optimizers.h"
#include "ir/trace.h"
#include "schedules/json_text.h"
#include "tools/cli/bench_support.h"
#include "tools/cli/commands.h"
#include "tools/cli/pipeline_options.h"

namespace tandem::cli {
namespace {

struct BlockConfig {
  int64_t dim = 256;
  int64_t seq = 128;
  int64_t batch = 8;
  int64_t heads = 4;
  layers::AttentionImpl attention = layers::AttentionImpl::kFused;
};

// ---- The block: examples/models/gpt.cc's decoder block, on the same layers.

Tensor Block(Tracer& t, Tensor x, const BlockConfig& c) {
  const ir::Initializer weights = init::Normal(0.02);
  x = x + layers::CausalSelfAttention(t, "attn", layers::LayerNorm(t, "ln1", x, c.dim), c.heads, weights,
                                      c.attention);
  return x + layers::GeluMlp(t, "mlp", layers::LayerNorm(t, "ln2", x, c.dim), 4 * c.dim, weights);
}

ModelFunction BlockModel(const BlockConfig& c) {
  return [c](Tracer& t) {
    Tensor x = t.Parameter("x", {c.batch, c.seq, c.dim}, init::Normal(1.0));
    Tensor probe = t.Label("probe", {ir::DType::kF32, {c.batch, c.seq, c.dim}});
    return mean(Block(t, x, c) * probe);
  };
}

// ---- Per-op profile: each node's time, from the reference kernels' clock
// (CPU) or the GPU's events (backends/device.h's set_node_times).

struct OpTime {
  double ms = 0;
  int64_t count = 0;
};

struct NodeTime {
  double ms = 0;
  ir::ValueId id = 0;
};

// The reference kernels' time per node, summed over `repeats` runs of
// RunGraph's loop (same order, same releases) with a clock around every
// kernel.
absl::StatusOr<std::vector<double>> CpuNodeTimes(const ir::Graph& graph, const ir::TensorMap& inputs,
                                                 int64_t repeats) {
  const int32_t n = graph.size();
  const std::vector<int32_t> last_use = ir::LastUses(graph, graph.outputs());
  std::vector<double> node_ms(n, 0.0);
  for (int64_t r = 0; r < repeats; ++r) {
    std::vector<ir::HostTensor> values(n);
    std::vector<const ir::HostTensor*> operands;
    for (ir::ValueId id = 0; id < n; ++id) {
      const ir::Node& node = graph.node(id);
      if (node.op == ir::OpKind::kInput) {
        values[id] = inputs.at(node.attributes.GetString("name"));
      } else {
        operands.clear();
        for (ir::ValueId operand : node.operands) operands.push_back(&values[operand]);
        Clock::time_point start = Clock::now();
        absl::StatusOr<ir::HostTensor> result = cpu::EvaluateNode(node, operands);
        node_ms[id] += MillisecondsSince(start);
        if (!result.ok()) return result.status();
        values[id] = *std::move(result);
      }
      for (ir::ValueId operand : node.operands) {
        if (last_use[operand] == id) values[operand] = ir::HostTensor();
      }
    }
  }
  return node_ms;
}

// What the profile calls node `id`: its op, or for the last member of a
// run the device launched as one, "fused " and the run's ops ("fused
// add+gelu").
std::string ProfiledOp(const ir::Graph& graph, ir::ValueId id, const ir::ElementwiseRuns* fused) {
  const int32_t run = fused == nullptr ? ir::ElementwiseRuns::kNotInRun : fused->role[static_cast<size_t>(id)];
  if (run < 0) return ir::OpName(graph.node(id).op);
  std::string ops = "fused ";
  for (ir::ValueId member : fused->runs[static_cast<size_t>(run)]) {
    absl::StrAppend(&ops, member == fused->runs[static_cast<size_t>(run)].front() ? "" : "+",
                    ir::OpName(graph.node(member).op));
  }
  return ops;
}

// The profile of `graph` from its per-node times summed over `repeats`
// runs: time by op (and phase), then the slowest nodes. A run of nodes the
// device launched as one (`fused`, null for none) is timed as its last
// member and shown as the run; a matmul whose GEMM added its bias
// (`epilogues`: (matmul, add) pairs) is timed and shown as "matmul+bias",
// its add not at all.
void PrintProfile(const ir::Graph& graph, const std::vector<double>& node_ms, const ir::ElementwiseRuns* fused,
                  const std::vector<std::pair<ir::ValueId, ir::ValueId>>& epilogues, int64_t repeats, const char* what,
                  std::ostream& out) {
  std::vector<bool> with_bias(static_cast<size_t>(graph.size()), false), bias_taken(with_bias);
  for (const auto& [matmul, add] : epilogues) {
    with_bias[static_cast<size_t>(matmul)] = true;
    bias_taken[static_cast<size_t>(add)] = true;
  }
  const auto op_name = [&](ir::ValueId id) {
    return with_bias[static_cast<size_t>(id)] ? std::string("matmul+bias") : ProfiledOp(graph, id, fused);
  };
  std::map<std::string, OpTime> by_op;
  std::vector<NodeTime> by_node;
  double total_ms = 0;
  for (ir::ValueId id = 0; id < graph.size() && id < static_cast<ir::ValueId>(node_ms.size()); ++id) {
    const ir::Node& node = graph.node(id);
    if (node.op == ir::OpKind::kInput) continue;
    if (fused != nullptr && fused->role[static_cast<size_t>(id)] == ir::ElementwiseRuns::kInsideRun) continue;
    if (bias_taken[static_cast<size_t>(id)]) continue;
    const double ms = node_ms[id] / static_cast<double>(repeats);
    const std::string key = absl::StrCat(op_name(id), " (", std::string(1, ir::PhaseLetter(node.phase)), ")");
    by_op[key].ms += ms;
    by_op[key].count += 1;
    by_node.push_back({ms, id});
    total_ms += ms;
  }
  std::vector<std::pair<std::string, OpTime>> ops(by_op.begin(), by_op.end());
  std::sort(ops.begin(), ops.end(), [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
  out << absl::StrFormat("\nprofile: mean over %d runs, %.2f ms %s; op (phase F/I/W)\n", repeats, total_ms, what);
  out << absl::StrFormat("  %-34s %6s %10s %7s\n", "op", "nodes", "ms", "share");
  for (const auto& [name, time] : ops) {
    out << absl::StrFormat("  %-34s %6d %10.3f %6.1f%%\n", name, time.count, time.ms, 100.0 * time.ms / total_ms);
  }
  std::sort(by_node.begin(), by_node.end(), [](const NodeTime& a, const NodeTime& b) { return a.ms > b.ms; });
  out << "\nslowest nodes:\n";
  for (size_t i = 0; i < std::min<size_t>(15, by_node.size()); ++i) {
    const ir::Node& node = graph.node(by_node[i].id);
    std::string shapes;
    for (ir::ValueId operand : node.operands) {
      absl::StrAppend(&shapes, shapes.empty() ? "" : ", ", ir::TypeToString(graph.type(operand)));
    }
    out << absl::StrFormat("  %8.3f ms  %%%d = %s(%s) -> %s  %c  %s\n", by_node[i].ms, by_node[i].id,
                           op_name(by_node[i].id), shapes, ir::TypeToString(node.type), ir::PhaseLetter(node.phase),
                           node.location.ToString());
  }
}

// ---- PyTorch, in a child process.

TorchResult RunTorch(const std::string& python, const std::string& script, const BlockConfig& c, int64_t threads,
                     int64_t repeats, const ir::DeviceSpec& device, bool sdpa) {
  return RunTorchScript(python, script,
                        absl::StrCat(" --dim ", c.dim, " --seq ", c.seq, " --batch ", c.batch, " --heads ", c.heads,
                                     " --threads ", threads, " --repeats ", repeats,
                                     device.kind == ir::DeviceSpec::Kind::kCuda ? " --device cuda" : "",
                                     device.precision == ir::DeviceSpec::Precision::kBf16 ? " --bf16" : "",
                                     device.precision == ir::DeviceSpec::Precision::kTf32 ? " --tf32" : "",
                                     sdpa ? " --sdpa" : ""));
}

struct BlockBenchOptions {
  BlockConfig config;
  int64_t threads = 1;
  int64_t repeats = 10;
  std::string python = DefaultPython();
  std::string torch_script = TorchScriptDirectory() + "/torch_block.py";
  LauncherOptions device;  // only --device
  bool no_torch = false;
  bool torch_sdpa = false;
  bool unfused = false;  // a GPU's elementwise nodes a kernel each, no bias epilogue
  bool profile = false;
  bool json = false;
};

// The traced block on its device, with its inputs already there (as state
// and activations are in a pipeline). RunOnce ends when its smallest output
// (the loss) is back on the host, which on a GPU waits for every kernel.
class BlockOnDevice {
 public:
  static absl::StatusOr<BlockOnDevice> Create(const BlockConfig& config, std::shared_ptr<backends::Device> device) {
    BlockOnDevice block;
    block.device_ = std::move(device);
    absl::StatusOr<ir::TrainStep> step =
        TraceTrainStep("gpt_block", BlockModel(config), Sgd(SgdOptions{}), TraceOptions{.num_microbatches = 1});
    if (!step.ok()) return step.status();
    block.step_ = *std::move(step);
    absl::StatusOr<ir::TensorMap> state = ir::InitialState(block.step_);
    if (!state.ok()) return state.status();
    block.inputs_ = *std::move(state);
    absl::StatusOr<ir::HostTensor> probe =
        ir::MakeTensor({ir::DType::kF32, {config.batch, config.seq, config.dim}},
                       ir::Initializer{.kind = ir::Initializer::Kind::kNormal, .b = 1.0, .seed = 7});
    if (!probe.ok()) return probe.status();
    block.inputs_["probe"] = *std::move(probe);
    for (const auto& [name, tensor] : block.inputs_) {
      absl::StatusOr<backends::TensorHandle> uploaded = block.device_->Upload(tensor);
      if (!uploaded.ok()) return uploaded.status();
      block.handles_.emplace(name, *std::move(uploaded));
    }
    absl::StatusOr<std::unique_ptr<backends::Executable>> executable = block.device_->Compile(block.graph());
    if (!executable.ok()) return executable.status();
    block.executable_ = *std::move(executable);
    return block;
  }

  absl::Status RunOnce() const {
    absl::StatusOr<backends::HandleMap> outputs = executable_->Run(handles_);
    if (!outputs.ok()) return outputs.status();
    const backends::TensorHandle* smallest = nullptr;
    for (const auto& [name, handle] : *outputs) {
      if (smallest == nullptr || handle.num_bytes() < smallest->num_bytes()) smallest = &handle;
    }
    if (smallest == nullptr) return absl::OkStatus();
    return device_->Download(*smallest).status();
  }

  // Per-node times summed over `repeats` runs: the reference kernels' clock
  // on the CPU, the GPU's events on a CUDA device.
  absl::StatusOr<std::vector<double>> NodeTimes(int64_t repeats) const {
    if (device_->memory() == nullptr) return CpuNodeTimes(graph(), inputs_, repeats);
    std::vector<double> node_ms;
    absl::Status status = device_->set_node_times(&node_ms);
    for (int64_t r = 0; r < repeats && status.ok(); ++r) status = RunOnce();
    status.Update(device_->set_node_times(nullptr));
    if (!status.ok()) return status;
    return node_ms;
  }

  const ir::Graph& graph() const { return step_.microbatch; }
  // The runs of nodes the device launches as one (null: node by node).
  const ir::ElementwiseRuns* fused_runs() const { return executable_->fused_runs(); }
  // The matmuls launched with their bias add as one GEMM (none: node by node).
  std::vector<std::pair<ir::ValueId, ir::ValueId>> bias_epilogues() const { return executable_->bias_epilogues(); }
  const backends::Device& device() const { return *device_; }

 private:
  std::shared_ptr<backends::Device> device_;
  std::unique_ptr<backends::Executable> executable_;  // the microbatch graph's, compiled once
  ir::TrainStep step_;
  ir::TensorMap inputs_;
  backends::HandleMap handles_;
};

// The table (or --json) of one measurement.
void PrintBlockReport(const BlockBenchOptions& options, const ir::DeviceSpec& spec, const std::string& device,
                      const std::vector<double>& tandem_times, const TorchResult& torch, std::ostream& out) {
  const BlockConfig& config = options.config;
  const double tandem_ms = Median(tandem_times);
  const double ratio = torch.ms ? tandem_ms / *torch.ms : 0.0;
  // The project's goals: 1.25x PyTorch on the CPU, 1.0x on a GPU.
  const double goal = spec.kind == ir::DeviceSpec::Kind::kCpu ? 1.25 : 1.0;
  if (options.json) {
    nlohmann::ordered_json json;
    json["benchmark"] = "block";
    json["device"] = device;
    json["dim"] = config.dim;
    json["seq"] = config.seq;
    json["batch"] = config.batch;
    json["heads"] = config.heads;
    json["attention"] = layers::AttentionImplName(config.attention);
    json["fused_elementwise"] = !options.unfused;
    json["threads"] = options.threads;
    json["repeats"] = options.repeats;
    json["tandem_ms"] = tandem_ms;
    json["tandem_min_ms"] = *std::min_element(tandem_times.begin(), tandem_times.end());
    json["torch_ms"] = torch.ms ? nlohmann::ordered_json(*torch.ms) : nullptr;
    json["ratio"] = torch.ms ? nlohmann::ordered_json(ratio) : nullptr;
    json["goal_ratio"] = goal;
    json["torch_blas"] = torch.blas;
    json["torch_blas_libraries"] = torch.blas_libraries;
    json["torch_error"] = torch.error;
    out << schedules::JsonText(json) << "\n";
    return;
  }
  out << absl::StrFormat(
      "GPT block forward+backward (pre-norm, %s causal attention + GELU MLP): dim %d, seq %d, batch %d, heads %d\n"
      "threads %d on both sides; median of %d runs after one warm-up\n\n",
      layers::AttentionImplName(config.attention), config.dim, config.seq, config.batch, config.heads, options.threads,
      options.repeats);
  if (options.unfused) out << "a kernel per elementwise node, no bias epilogue (--unfused)\n\n";
  out << absl::StrFormat("  %-36s %12s\n", "executor", "ms/fwd+bwd");
  out << absl::StrFormat("  %-36s %12.1f\n",
                         spec.kind == ir::DeviceSpec::Kind::kCpu ? std::string("tandem (reference interpreter)")
                                                                 : absl::StrCat("tandem (", device, ")"),
                         tandem_ms);
  if (!torch.ms) {
    out << absl::StrFormat("  %-36s %12s\n", "pytorch", "unavailable");
    out << "\npytorch unavailable: " << torch.error << "\n";
    return;
  }
  out << absl::StrFormat("  %-36s %12.1f\n",
                         absl::StrCat("pytorch ", torch.version, " (", ir::DeviceSpecName(spec),
                                      options.torch_sdpa ? ", fused attention" : "", ")"),
                         *torch.ms);
  out << absl::StrFormat("  %-36s %11.2fx  (goal <= %.2f: %s)\n", "ratio tandem / pytorch", ratio, goal,
                         ratio <= goal ? "met" : "NOT met");
  if (spec.kind == ir::DeviceSpec::Kind::kCpu) {
    out << "\ntorch BLAS: " << torch.blas << " " << schedules::JsonText(torch.blas_libraries) << "\n";
    if (torch.blas == "reference") {
      out << "warning: torch uses the reference BLAS, ~12x slower than an optimized one, so the ratio above is "
             "not meaningful\n";
    }
  }
}

int RunBlockBench(const BlockBenchOptions& options, std::ostream& out, std::ostream& err) {
  const BlockConfig& config = options.config;
  absl::StatusOr<ir::DeviceSpec> device_spec = DeviceFrom(options.device);
  if (!device_spec.ok()) {
    err << "tandem bench block: " << device_spec.status().message() << "\n";
    return 2;
  }
  if (device_spec->kind == ir::DeviceSpec::Kind::kFakeCuda && options.profile) {
    err << "tandem bench block: --profile times the reference kernels (--device cpu) or the GPU's (cuda)\n";
    return 2;
  }
  if (config.dim % config.heads != 0) {
    err << "tandem bench block: --dim " << config.dim << " is not divisible by --heads " << config.heads << "\n";
    return 2;
  }
  if (options.unfused && device_spec->kind != ir::DeviceSpec::Kind::kCuda) {
    err << "tandem bench block: --unfused applies to --device cuda (the reference kernels' fused runs are part of "
           "the interpreter)\n";
    return 2;
  }
  absl::StatusOr<std::shared_ptr<backends::Device>> device =
      backends::OpenDevice(*device_spec, 0, {.fuse_elementwise = !options.unfused});
  if (!device.ok()) {
    err << "tandem bench block: " << device.status().message() << "\n";
    return 1;
  }
  absl::StatusOr<BlockOnDevice> block = BlockOnDevice::Create(config, *device);
  if (!block.ok()) {
    err << "tandem bench block: " << block.status().message() << "\n";
    return 1;
  }
  // The kernels' threads, with GEMM tiles on one BLAS thread each
  // (backends/cpu/kernel_threads.h), and freed tensors' storage kept for the
  // next run, as the actors do.
  cpu::SetBlasThreads(1);
  ir::SetStorageCacheBytes(ir::kComputeStorageCacheBytes);
  cpu::KernelThreads kernel_threads(static_cast<int>(options.threads));
  std::vector<double> tandem_times;
  for (int64_t r = 0; r <= options.repeats; ++r) {  // run 0 is the warm-up
    Clock::time_point start = Clock::now();
    const absl::Status ran = kernel_threads.Run([&] { return block->RunOnce(); });
    const double ms = MillisecondsSince(start);
    if (!ran.ok()) {
      err << "tandem bench block: " << ran.message() << "\n";
      return 1;
    }
    if (r > 0) tandem_times.push_back(ms);
  }
  TorchResult torch;
  if (options.no_torch) {
    torch.error = "skipped (--no-torch)";
  } else {
    torch = RunTorch(options.python, options.torch_script, config, options.threads, options.repeats, *device_spec,
                     options.torch_sdpa);
  }
  PrintBlockReport(options, *device_spec, (*device)->name(), tandem_times, torch, out);
  if (options.profile) {
    // On the CPU, the kernels timed on the threads the block ran on.
    absl::StatusOr<std::vector<double>> node_ms =
        kernel_threads.Run([&] { return block->NodeTimes(options.repeats); });
    if (!node_ms.ok()) {
      err << "tandem bench block: profile: " << node_ms.status().message() << "\n";
      return 1;
    }
    PrintProfile(block->graph(), *node_ms, block->fused_runs(), block->bias_epilogues(), options.repeats,
                 device_spec->kind == ir::DeviceSpec::Kind::kCpu ? "in kernels" : "of GPU time", out);
  }
  return 0;
}

}  // namespace

void AddBlockBench(CommandLine& command_line, CLI::App& bench) {
  CLI::App* command = command_line.Add(
      bench, "block", "one GPT block forward+backward: Tandem's device vs PyTorch eager", "[options]",
      "Times one forward+backward of one pre-norm GPT decoder block (causal attention + GELU MLP) on Tandem's device "
      "and in PyTorch with the same thread count (on the same GPU with --device cuda), and prints their ratio (the "
      "project's goal on the CPU is <= 1.25). Each side warms up once and reports the median of --repeats.");
  auto options = std::make_shared<BlockBenchOptions>();
  AddIntegerOption(*command, "--dim", options->config.dim, "model width");
  AddIntegerOption(*command, "--seq", options->config.seq, "sequence length");
  AddIntegerOption(*command, "--batch", options->config.batch, "sequences per batch");
  AddIntegerOption(*command, "--heads", options->config.heads, "attention heads (must divide --dim)");
  command->add_option("--threads", options->threads, "threads on both sides (Tandem: its kernels' threads; torch: intra-op and OpenBLAS)")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  AddIntegerOption(*command, "--repeats", options->repeats, "timed runs after one warm-up; the median is reported");
  command
      ->add_option("--python", options->python, "the Python that has torch (default: build/venv, made by tools/setup.sh)")
      ->capture_default_str();
  command->add_option("--torch-script", options->torch_script, "the PyTorch side")->capture_default_str();
  command
      ->add_option("--device", options->device.device,
                   "cpu, or cuda[:N][+tf32|+bf16]: Tandem's CUDA device against PyTorch on the same GPU, in the "
                   "same precision")
      ->capture_default_str();
  command
      ->add_option_function<std::string>(
          "--attention",
          [options](const std::string& name) { options->config.attention = *layers::ParseAttentionImpl(name); },
          "Tandem's attention: fused (the attention op, the default) or composed (matmul, causal_mask, softmax)")
      ->check(CLI::IsMember({"fused", "composed"}));
  command->add_flag("--no-torch", options->no_torch, "time Tandem only");
  command->add_flag("--unfused", options->unfused,
                    "GPU: a kernel per elementwise node instead of one per run of them, and no bias epilogue "
                    "(a linear layer's matmul and add as two launches), to measure what fusing saves");
  command->add_flag("--profile", options->profile,
                    "also time every node of the Tandem run and print the top ops: the reference kernels' time on "
                    "the CPU, GPU time (CUDA events around each node) with --device cuda");
  command->add_flag("--torch-sdpa", options->torch_sdpa,
                    "PyTorch's side uses fused attention (scaled_dot_product_attention), not the explicit softmax");
  command->add_flag("--json", options->json, "print one JSON object instead of the table");
  command_line.OnRun(command, [options, &streams = command_line.streams()] {
    return RunBlockBench(*options, streams.out, streams.err);
  });
}

}  // namespace tandem::cli
