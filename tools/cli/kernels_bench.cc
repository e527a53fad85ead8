// `tandem bench kernels`: every kernel of an example model's training step,
// timed one by one at the model's shapes, as llm.c's dev/cuda benchmarks
// time theirs. The step (forward and backward of every microbatch, the
// gradients' accumulation, the optional norm and the update) is traced; each
// distinct kernel (an op with its attributes and operand types) runs alone
// as a one-node graph on the device, on operands made for it (floats
// uniform in [0.5, 1.5), so that no log, sqrt or division meets a NaN or a
// subnormal; ids uniform over the range their op accepts), warmed up once,
// and its median over --repeats is reported with how often the step runs
// it: the table is sorted by the kernel's time per step, so its first rows
// are what to make faster. Bytes and flops are the op's cost rule's
// (ir/op_def.h: as XLA's HloCostAnalysis counts them; bytes read and
// written once, a lower bound); a matmul's rate, and fused attention's (its
// products never leave the chip), is its FLOP/s, the others' their bytes per
// second.
// On a GPU the achieved rate is also a share of the device's peak
// (Device::Peak), and each kernel's time on the CPU backend is beside it.
//
// Kernels alone are not the step: the CPU and CUDA backends evaluate runs
// of elementwise nodes as one pass (ir/elementwise_runs.h; `tandem bench
// block --profile` shows the runs) and a GPU overlaps nothing here, so the
// sum of the rows is the step's kernel time without fusion, to compare
// with `tandem bench step`.
#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "backends/cpu/kernel_threads.h"
#include "backends/cpu/kernels.h"
#include "backends/device.h"
#include "backends/open_device.h"
#include "examples/example_job.h"
#include "ir/attributes.h"
#include "ir/device_spec.h"
#include "ir/graph.h"
#include "ir/host_tensor.h"
#include "ir/initial_state.h"
#include "ir/op.h"
#include "ir/op_def.h"
#include "ir/verifier.h"
#include "schedules/json_text.h"
#include "tools/cli/bench_support.h"
#include "tools/cli/commands.h"
#include "tools/cli/model_options.h"
#include "tools/cli/pipeline_options.h"

namespace tandem::cli {
namespace {

struct KernelsBenchOptions {
  examples::ExampleJobOptions model;
  LauncherOptions device;  // only --device
  int64_t threads = 0;     // 0: every core
  int64_t repeats = 5;
  int64_t top = 30;
  bool json = false;
};

// One distinct kernel of the step.
struct Kernel {
  ir::Node node;  // its first occurrence, operands renumbered 0..n-1
  std::vector<ir::TensorType> operands;
  std::string op;          // "matmul {transpose_b=1}"
  std::string signature;   // "f32[256,768], f32[2304,768] -> f32[256,2304]"
  std::string where;       // the phases it runs in: F, I, W, U, and A for accumulation
  int64_t count = 0;       // runs per step
  ir::OpCost cost;         // its cost rule's flops, transcendentals and bytes (ir/op_def.h)
  bool compute_bound = false;  // a matmul or attention: its rate is FLOP/s, the others' bytes/s
  double ms = 0;           // on the device, median of the repeats
  std::optional<double> cpu_ms;  // the CPU backend's, beside a GPU's
  double step_ms() const { return static_cast<double>(count) * ms; }
};

std::string AttributesText(const ir::Attributes& attributes) {
  if (attributes.empty()) return "";
  std::vector<std::string> parts;
  for (const auto& [name, value] : attributes.values()) {
    parts.push_back(absl::StrCat(name, "=", ir::AttributeValueToString(value)));
  }
  return absl::StrCat(" {", absl::StrJoin(parts, ","), "}");
}

// The step's kernels, each with its count per step, in first-seen order.
class KernelCatalogue {
 public:
  // Every node of `graph` but its inputs, run `times` per step.
  void AddGraph(const ir::Graph& graph, int64_t times) {
    if (times == 0) return;
    for (const ir::Node& node : graph.nodes()) {
      if (node.op == ir::OpKind::kInput) continue;
      std::vector<ir::TensorType> operands;
      for (ir::ValueId operand : node.operands) operands.push_back(graph.type(operand));
      Add(node, std::move(operands), std::string(1, ir::PhaseLetter(node.phase)), times);
    }
  }

  // The executor's gradient accumulation: acc + grad (an f32 add, the
  // device's Accumulate) for each accumulator, run `times` per step.
  void AddAccumulation(const ir::TrainStep& step, int64_t times) {
    if (times == 0) return;
    for (const ir::Accumulator& accumulator : step.accumulators) {
      const std::optional<ir::ValueId> source = step.microbatch.FindOutput(accumulator.source);
      if (!source) continue;
      const ir::TensorType& type = step.microbatch.type(*source);
      ir::Node add;
      add.op = ir::OpKind::kAdd;
      add.type = type;
      add.operands = {0, 1};
      Add(add, {type, type}, "A", times);
    }
  }

  std::vector<Kernel>& kernels() { return kernels_; }
  int64_t nodes_per_step() const { return nodes_per_step_; }

 private:
  void Add(const ir::Node& node, std::vector<ir::TensorType> operands, const std::string& phase, int64_t times) {
    nodes_per_step_ += times;
    std::vector<std::string> types;
    for (const ir::TensorType& type : operands) types.push_back(ir::TypeToString(type));
    const std::string op = absl::StrCat(ir::OpName(node.op), AttributesText(node.attributes));
    const std::string signature = absl::StrCat(absl::StrJoin(types, ", "), " -> ", ir::TypeToString(node.type));
    const std::string key = absl::StrCat(op, " ", signature);
    auto [it, added] = index_.try_emplace(key, kernels_.size());
    if (added) {
      Kernel kernel;
      kernel.node = node;
      kernel.node.operands.clear();
      for (size_t i = 0; i < operands.size(); ++i) kernel.node.operands.push_back(static_cast<ir::ValueId>(i));
      kernel.op = op;
      kernel.signature = signature;
      kernel.cost = ir::NodeCost(node, operands);
      const ir::OpFamily family = ir::Def(node.op).family;
      kernel.compute_bound = family == ir::OpFamily::kMatMul || family == ir::OpFamily::kAttention;
      kernel.operands = std::move(operands);
      kernels_.push_back(std::move(kernel));
    }
    Kernel& kernel = kernels_[it->second];
    kernel.count += times;
    if (kernel.where.find(phase) == std::string::npos) kernel.where += phase;
  }

  std::vector<Kernel> kernels_;
  std::map<std::string, size_t> index_;
  int64_t nodes_per_step_ = 0;
};

// The kernel as a graph of its own: one input per operand, the node, its
// output.
absl::StatusOr<ir::Graph> KernelGraph(const Kernel& kernel) {
  ir::Graph graph("kernel");
  for (size_t i = 0; i < kernel.operands.size(); ++i) {
    ir::Node input;
    input.op = ir::OpKind::kInput;
    input.attributes = ir::Attributes{{"name", absl::StrCat("x", i)},
                                      {"role", std::string(ir::InputRoleName(ir::InputRole::kData))}};
    input.type = kernel.operands[i];
    graph.Append(std::move(input));
  }
  ir::Node node = kernel.node;
  node.stage = 0;
  const ir::ValueId id = graph.Append(std::move(node));
  graph.AddOutput("y", id);
  if (absl::Status verified = ir::VerifyGraph(graph); !verified.ok()) {
    return absl::InternalError(absl::StrCat(kernel.op, " (", kernel.signature, ") alone: ", verified.message()));
  }
  return graph;
}

// Operands for the kernels: floats uniform in [0.5, 1.5), one tensor per
// type (shared by every kernel that reads that type); ids uniform over
// [0, bound) where the op reads ids, else 0.
class Operands {
 public:
  absl::StatusOr<ir::TensorMap> For(const Kernel& kernel) {
    ir::TensorMap inputs;
    for (size_t i = 0; i < kernel.operands.size(); ++i) {
      const ir::TensorType& type = kernel.operands[i];
      absl::StatusOr<ir::HostTensor> tensor =
          type.dtype == ir::DType::kI32 ? Ids(type, IdBound(kernel, i)) : Floats(type);
      if (!tensor.ok()) return tensor.status();
      inputs.emplace(absl::StrCat("x", i), *std::move(tensor));
    }
    return inputs;
  }

 private:
  // The exclusive bound of the ids operand `i` of `kernel` reads (ir/op.h):
  // the table's rows, the logits' classes, num_embeddings; 1 elsewhere.
  static int64_t IdBound(const Kernel& kernel, size_t i) {
    const ir::Node& node = kernel.node;
    switch (node.op) {
      case ir::OpKind::kEmbedding:
        if (i == 1) return kernel.operands[0].shape.at(0);
        break;
      case ir::OpKind::kCrossEntropy:
      case ir::OpKind::kCrossEntropyGrad:
        if (i == 1) return kernel.operands[0].shape.back();
        break;
      case ir::OpKind::kEmbeddingGrad:
        if (i == 0) return node.attributes.GetInt("num_embeddings");
        break;
      default:
        break;
    }
    return 1;
  }

  absl::StatusOr<ir::HostTensor> Ids(const ir::TensorType& type, int64_t bound) {
    absl::StatusOr<ir::HostTensor> tensor = ir::HostTensor::Allocate(type);
    if (!tensor.ok()) return tensor.status();
    uint64_t state = 0x9e3779b97f4a7c15ull;
    for (int64_t i = 0; i < type.num_elements(); ++i) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;  // an LCG: the same ids every run
      tensor->i32()[i] = static_cast<int32_t>((state >> 33) % static_cast<uint64_t>(std::max<int64_t>(bound, 1)));
    }
    return tensor;
  }

  absl::StatusOr<ir::HostTensor> Floats(const ir::TensorType& type) {
    const std::string key = ir::TypeToString(type);
    auto it = floats_.find(key);
    if (it != floats_.end()) return it->second;
    absl::StatusOr<ir::HostTensor> tensor =
        ir::MakeTensor(type, ir::Initializer{.kind = ir::Initializer::Kind::kUniform, .a = 0.5, .b = 1.5, .seed = 1});
    if (!tensor.ok()) return tensor.status();
    floats_.emplace(key, *tensor);
    return tensor;
  }

  std::map<std::string, ir::HostTensor> floats_;
};

// The median time of one run of `graph` on `device` (after a warm-up):
// the kernel's own time on a GPU (its events), the call's on the CPU.
absl::StatusOr<double> TimeKernel(backends::Device& device, const ir::Graph& graph, const ir::TensorMap& inputs,
                                  int64_t repeats) {
  absl::StatusOr<std::unique_ptr<backends::Executable>> executable = device.Compile(graph);
  if (!executable.ok()) return executable.status();
  backends::HandleMap handles;
  for (const auto& [name, tensor] : inputs) {
    absl::StatusOr<backends::TensorHandle> handle = device.Upload(tensor);
    if (!handle.ok()) return handle.status();
    handles.emplace(name, *std::move(handle));
  }
  const bool resident = device.memory() != nullptr;
  std::vector<double> times;
  for (int64_t r = 0; r <= repeats; ++r) {  // run 0 is the warm-up
    std::vector<double> node_ms;
    if (resident && r > 0) {
      if (absl::Status status = device.set_node_times(&node_ms); !status.ok()) return status;
    }
    const Clock::time_point start = Clock::now();
    absl::StatusOr<backends::HandleMap> outputs = (*executable)->Run(handles);
    const double wall_ms = MillisecondsSince(start);
    if (resident) {
      if (absl::Status status = device.set_node_times(nullptr); !status.ok()) return status;
    }
    if (!outputs.ok()) return outputs.status();
    if (r == 0) continue;
    times.push_back(resident ? node_ms.at(static_cast<size_t>(graph.size() - 1)) : wall_ms);
  }
  return Median(times);
}

// Human units for a table cell.
std::string Rate(double per_second, const char* unit) {
  if (per_second >= 1e12) return absl::StrFormat("%.2f T%s", per_second / 1e12, unit);
  if (per_second >= 1e9) return absl::StrFormat("%.2f G%s", per_second / 1e9, unit);
  return absl::StrFormat("%.1f M%s", per_second / 1e6, unit);
}

// The kernel's achieved rate against the device's peak: flops for a
// matmul or attention (against the matmul rate of the device's precision),
// bytes for the others; unset where the peak is unknown.
std::optional<double> PeakShare(const Kernel& kernel, const std::optional<backends::PeakRates>& peak) {
  if (!peak || kernel.ms <= 0) return std::nullopt;
  const double seconds = kernel.ms / 1e3;
  if (kernel.compute_bound) {
    if (peak->matmul_flops_per_second <= 0) return std::nullopt;
    return kernel.cost.flops / seconds / peak->matmul_flops_per_second;
  }
  if (peak->memory_bytes_per_second <= 0) return std::nullopt;
  return kernel.cost.bytes / seconds / peak->memory_bytes_per_second;
}

void PrintKernels(const KernelsBenchOptions& options, const examples::ExampleJob& job, const std::string& device,
                  const std::optional<backends::PeakRates>& peak, int64_t nodes_per_step, int threads,
                  const std::vector<Kernel>& kernels, std::ostream& out) {
  double total_ms = 0, total_cpu_ms = 0;
  for (const Kernel& kernel : kernels) {
    total_ms += kernel.step_ms();
    total_cpu_ms += static_cast<double>(kernel.count) * kernel.cpu_ms.value_or(0);
  }
  const bool beside_cpu = !kernels.empty() && kernels.front().cpu_ms.has_value();
  if (options.json) {
    nlohmann::ordered_json json;
    json["benchmark"] = "kernels";
    json["device"] = device;
    json["model"] = job.description;
    json["threads"] = threads;
    json["repeats"] = options.repeats;
    json["nodes_per_step"] = nodes_per_step;
    json["kernels_per_step_ms"] = total_ms;
    json["cpu_kernels_per_step_ms"] = beside_cpu ? nlohmann::ordered_json(total_cpu_ms) : nullptr;
    json["peak"] = peak ? nlohmann::ordered_json({{"memory_bytes_per_second", peak->memory_bytes_per_second},
                                                  {"matmul_flops_per_second", peak->matmul_flops_per_second},
                                                  {"basis", peak->basis}})
                        : nlohmann::ordered_json(nullptr);
    json["kernels"] = nlohmann::ordered_json::array();
    for (const Kernel& kernel : kernels) {
      const double seconds = kernel.ms / 1e3;
      const std::optional<double> share = PeakShare(kernel, peak);
      json["kernels"].push_back({
          {"op", kernel.op},
          {"signature", kernel.signature},
          {"where", kernel.where},
          {"count", kernel.count},
          {"ms", kernel.ms},
          {"step_ms", kernel.step_ms()},
          {"share", total_ms > 0 ? kernel.step_ms() / total_ms : 0.0},
          {"bytes", kernel.cost.bytes},
          {"bytes_per_second", seconds > 0 ? kernel.cost.bytes / seconds : 0.0},
          {"flops", kernel.cost.flops},
          {"flops_per_second", seconds > 0 ? kernel.cost.flops / seconds : 0.0},
          {"transcendentals", kernel.cost.transcendentals},
          {"peak_share", share ? nlohmann::ordered_json(*share) : nullptr},
          {"cpu_ms", kernel.cpu_ms ? nlohmann::ordered_json(*kernel.cpu_ms) : nullptr},
      });
    }
    out << schedules::JsonText(json) << "\n";
    return;
  }
  out << "every kernel of one training step, each alone at the model's shapes, on " << device << "\n"
      << job.description << "\n"
      << absl::StrFormat("%d nodes per step, %d distinct kernels; %d threads; median of %d runs after one warm-up\n",
                         nodes_per_step, kernels.size(), threads, options.repeats)
      << absl::StrFormat("sum of the kernels' times per step: %.1f ms", total_ms)
      << (beside_cpu ? absl::StrFormat(" (the CPU backend's: %.1f ms)", total_cpu_ms) : "") << "\n";
  if (peak) out << "peak: " << Rate(peak->memory_bytes_per_second, "B/s") << ", matmul "
                << (peak->matmul_flops_per_second > 0 ? Rate(peak->matmul_flops_per_second, "FLOP/s") : "unknown")
                << " (" << peak->basis << ")\n";
  out << "where: F forward, I/W backward (input/weight gradients), A gradient accumulation, U update\n\n";
  out << absl::StrFormat("  %6s %5s %10s %10s %6s %11s %14s %6s%s  %s\n", "share", "where", "ms/step", "ms", "count",
                         "bytes", "rate", "peak", beside_cpu ? absl::StrFormat(" %10s", "cpu ms") : "", "kernel");
  const size_t shown = std::min<size_t>(kernels.size(), static_cast<size_t>(options.top));
  for (size_t i = 0; i < shown; ++i) {
    const Kernel& kernel = kernels[i];
    const double seconds = kernel.ms / 1e3;
    const std::string rate = seconds <= 0            ? "-"
                             : kernel.compute_bound ? Rate(kernel.cost.flops / seconds, "FLOP/s")
                                                    : Rate(kernel.cost.bytes / seconds, "B/s");
    const std::optional<double> share = PeakShare(kernel, peak);
    out << absl::StrFormat("  %5.1f%% %5s %10.3f %10.4f %6d %11.0f %14s %6s%s  %s (%s)\n",
                           total_ms > 0 ? 100.0 * kernel.step_ms() / total_ms : 0.0, kernel.where, kernel.step_ms(),
                           kernel.ms, kernel.count, kernel.cost.bytes, rate,
                           share ? absl::StrFormat("%.0f%%", 100.0 * *share) : "-",
                           beside_cpu ? absl::StrFormat(" %10.4f", kernel.cpu_ms.value_or(0)) : "", kernel.op,
                           kernel.signature);
  }
  if (shown < kernels.size()) {
    double rest_ms = 0;
    for (size_t i = shown; i < kernels.size(); ++i) rest_ms += kernels[i].step_ms();
    out << absl::StrFormat("  ... %d more kernels, %.1f%% of the sum (--top to show them)\n", kernels.size() - shown,
                           total_ms > 0 ? 100.0 * rest_ms / total_ms : 0.0);
  }
}

int RunKernelsBench(const KernelsBenchOptions& options, std::ostream& out, std::ostream& err) {
  absl::StatusOr<ir::DeviceSpec> spec = DeviceFrom(options.device);
  if (!spec.ok()) {
    err << "tandem bench kernels: " << spec.status().message() << "\n";
    return 2;
  }
  if (spec->kind == ir::DeviceSpec::Kind::kFakeCuda) {
    err << "tandem bench kernels: the emulated GPU runs the reference kernels; time them with --device cpu, or a "
           "GPU's with --device cuda\n";
    return 2;
  }
  absl::StatusOr<examples::ExampleJob> job = examples::MakeExampleJob(options.model);
  if (!job.ok()) {
    err << "tandem bench kernels: " << job.status().message() << "\n";
    return 2;
  }
  absl::StatusOr<std::shared_ptr<backends::Device>> device = backends::OpenDevice(*spec, 0);
  if (!device.ok()) {
    err << "tandem bench kernels: " << device.status().message() << "\n";
    return 1;
  }
  std::shared_ptr<backends::Device> cpu_device;  // beside a GPU
  if (spec->kind != ir::DeviceSpec::Kind::kCpu) {
    absl::StatusOr<std::shared_ptr<backends::Device>> opened = backends::OpenDevice(ir::DeviceSpec{}, 0);
    if (!opened.ok()) {
      err << "tandem bench kernels: " << opened.status().message() << "\n";
      return 1;
    }
    cpu_device = *std::move(opened);
  }

  const ir::TrainStep& step = job->step;
  const int64_t microbatches = static_cast<int64_t>(step.num_microbatches) * step.num_replicas;
  KernelCatalogue catalogue;
  catalogue.AddGraph(step.microbatch, microbatches);
  catalogue.AddAccumulation(step, microbatches - 1);
  catalogue.AddGraph(step.norm, 1);
  catalogue.AddGraph(step.update, 1);
  std::vector<Kernel>& kernels = catalogue.kernels();

  const int threads = options.threads > 0 ? static_cast<int>(options.threads) : cpu::HostCores();
  cpu::SetBlasThreads(1);  // GEMM tiles on one BLAS thread each, as the actors run them
  ir::SetStorageCacheBytes(ir::kComputeStorageCacheBytes);
  cpu::KernelThreads kernel_threads(threads);
  Operands operands;
  for (Kernel& kernel : kernels) {
    const absl::Status timed = [&]() -> absl::Status {
      absl::StatusOr<ir::Graph> graph = KernelGraph(kernel);
      if (!graph.ok()) return graph.status();
      absl::StatusOr<ir::TensorMap> inputs = operands.For(kernel);
      if (!inputs.ok()) return inputs.status();
      absl::StatusOr<double> ms =
          kernel_threads.Run([&] { return TimeKernel(**device, *graph, *inputs, options.repeats); });
      if (!ms.ok()) return ms.status();
      kernel.ms = *ms;
      if (cpu_device != nullptr) {
        absl::StatusOr<double> cpu_ms =
            kernel_threads.Run([&] { return TimeKernel(*cpu_device, *graph, *inputs, options.repeats); });
        if (!cpu_ms.ok()) return cpu_ms.status();
        kernel.cpu_ms = *cpu_ms;
      }
      return absl::OkStatus();
    }();
    if (!timed.ok()) {
      err << "tandem bench kernels: " << kernel.op << " (" << kernel.signature << "): " << timed.message() << "\n";
      return 1;
    }
  }
  std::stable_sort(kernels.begin(), kernels.end(),
                   [](const Kernel& a, const Kernel& b) { return a.step_ms() > b.step_ms(); });
  PrintKernels(options, *job, (*device)->name(), (*device)->Peak(), catalogue.nodes_per_step(), threads, kernels,
               out);
  return 0;
}

}  // namespace

void AddKernelsBench(CommandLine& command_line, CLI::App& bench) {
  CLI::App* command = command_line.Add(
      bench, "kernels", "every kernel of a model's training step, timed one by one at its shapes", "[options]",
      "Traces one training step of an example model (--model, --preset, or --dim/--seq/--batch/...), runs each "
      "distinct kernel of it (an op with its attributes and operand types) alone on the device, and prints each "
      "one's median time, its count and time per step, the bytes it moves and its achieved rate (GB/s, or "
      "FLOP/s for a matmul), sorted by time per step. With --device cuda the rate is also a share of the GPU's "
      "peak and the CPU backend's time is beside each kernel.");
  auto options = std::make_shared<KernelsBenchOptions>();
  AddModelOptions(*command, options->model);
  command
      ->add_option("--device", options->device.device,
                   "cpu (the reference kernels), or cuda[:N][+tf32|+bf16]: the GPU's kernels beside the CPU's")
      ->capture_default_str();
  AddIntegerOption(*command, "--threads", options->threads, "the kernels' threads on the CPU (0: every core)", 0)
      ->check(CLI::Range(int64_t{0}, int64_t{4096}));
  AddIntegerOption(*command, "--repeats", options->repeats,
                   "timed runs of each kernel after one warm-up; the median is reported")
      ->check(CLI::Range(int64_t{1}, int64_t{1000}));
  AddIntegerOption(*command, "--top", options->top, "rows of the table (the JSON has every kernel)");
  command->add_flag("--json", options->json, "print one JSON object instead of the table");
  command_line.OnRun(command, [options, &streams = command_line.streams()] {
    return RunKernelsBench(*options, streams.out, streams.err);
  });
}

}  // namespace tandem::cli
