// `tandem bench block`: one forward+backward of one pre-norm GPT decoder
// block in the reference interpreter, next to the same block in PyTorch on
// the CPU with the same thread count (tools/bench/torch_block.py, run by
// Debian's /usr/bin/python3), and their ratio. With --device cuda[+bf16]
// the Tandem side is the actor's CUDA device (actor/device.h) and PyTorch
// runs eagerly on the same GPU (bf16: autocast matmuls).
//
// The block is examples/models/gpt.cc's, op for op: x + attn(ln1(x)), then
// x + mlp(ln2(x)). The traced model is loss = mean(block(x) * probe) with x
// declared as a parameter, so the backward computes dx like a block inside
// a network, plus every weight gradient; probe is a fixed random label. The
// timed call is Device::RunGraph of the step's microbatch graph (forward and
// backward, no optimizer update).
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "ir/graph.h"
#include "ir/interpreter.h"
#include "ir/kernels.h"
#include "ir/op.h"
#include "ir/optimizers.h"
#include "ir/trace.h"
#include "actor/device.h"
#include "tools/cli/arguments.h"
#include "tools/cli/launcher_option.h"
#include "tools/cli/commands.h"

#ifndef TANDEM_SOURCE_DIR
#define TANDEM_SOURCE_DIR "."
#endif

namespace tandem::cli {
namespace {

constexpr char kUsage[] =
    "usage: tandem bench block [options]\n\n"
    "Times one forward+backward of one pre-norm GPT decoder block (causal\n"
    "attention + GELU MLP) in the reference interpreter and in PyTorch on the\n"
    "CPU with the same thread count, and prints their ratio (the project's goal\n"
    "is <= 1.25). Each side warms up once and reports the median of --repeats.\n\n";

struct BlockConfig {
  int64_t dim = 256;
  int64_t seq = 128;
  int64_t batch = 8;
  int64_t heads = 4;
};

using Clock = std::chrono::steady_clock;

double MillisecondsSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

// ---- The block, written as examples/models/gpt.cc writes it (gpt.h does
// not export its block).

Tensor Linear(Tracer& t, const std::string& name, const Tensor& x, int64_t in, int64_t out) {
  Tensor w = t.Parameter(name + ".w", {in, out}, init::Normal(0.02));
  Tensor b = t.Parameter(name + ".b", {out}, init::Zeros());
  return matmul(x, w) + b;
}

Tensor LayerNorm(Tracer& t, const std::string& name, const Tensor& x, int64_t dim) {
  Tensor gamma = t.Parameter(name + ".g", {dim}, init::Ones());
  Tensor beta = t.Parameter(name + ".b", {dim}, init::Zeros());
  return layer_norm(x, gamma, beta);
}

Tensor SplitHeads(const Tensor& x, const BlockConfig& c) {
  return transpose(reshape(x, {c.batch, c.seq, c.heads, c.dim / c.heads}), {0, 2, 1, 3});
}

Tensor Attention(Tracer& t, const Tensor& x, const BlockConfig& c) {
  const int64_t d = c.dim;
  Tensor qkv = Linear(t, "attn.qkv", x, d, 3 * d);
  Tensor q = SplitHeads(slice(qkv, -1, 0, d), c);
  Tensor k = SplitHeads(slice(qkv, -1, d, 2 * d), c);
  Tensor v = SplitHeads(slice(qkv, -1, 2 * d, 3 * d), c);
  double scale = 1.0 / std::sqrt(static_cast<double>(d / c.heads));
  Tensor scores = causal_mask(matmul(q, k, {.transpose_b = true}) * scale);
  Tensor heads = matmul(softmax(scores), v);
  Tensor merged = reshape(transpose(heads, {0, 2, 1, 3}), {c.batch, c.seq, d});
  return Linear(t, "attn.proj", merged, d, d);
}

Tensor Block(Tracer& t, Tensor x, const BlockConfig& c) {
  x = x + Attention(t, LayerNorm(t, "ln1", x, c.dim), c);
  Tensor hidden = gelu(Linear(t, "mlp.fc", LayerNorm(t, "ln2", x, c.dim), c.dim, 4 * c.dim));
  return x + Linear(t, "mlp.proj", hidden, 4 * c.dim, c.dim);
}

ModelFunction BlockModel(const BlockConfig& c) {
  return [c](Tracer& t) {
    Tensor x = t.Parameter("x", {c.batch, c.seq, c.dim}, init::Normal(1.0));
    Tensor probe = t.Label("probe", {ir::DType::kF32, {c.batch, c.seq, c.dim}});
    return mean(Block(t, x, c) * probe);
  };
}

// ---- Per-op profile: RunGraph's loop (same order, same releases) with a
// clock around every kernel.

struct OpTime {
  double ms = 0;
  int64_t count = 0;
};

struct NodeTime {
  double ms = 0;
  ir::ValueId id = 0;
};

absl::Status Profile(const ir::Graph& graph, const ir::TensorMap& inputs, int64_t repeats, std::ostream& out) {
  const int32_t n = graph.size();
  std::vector<int32_t> last_use(n, -1);
  for (ir::ValueId id = 0; id < n; ++id) {
    for (ir::ValueId operand : graph.node(id).operands) last_use[operand] = id;
  }
  for (const ir::GraphOutput& output : graph.outputs()) last_use[output.value] = n;
  std::map<std::string, OpTime> by_op;
  std::vector<NodeTime> by_node(n);
  double total_ms = 0;
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
        absl::StatusOr<ir::HostTensor> result = ir::EvaluateNode(node, operands);
        double ms = MillisecondsSince(start);
        if (!result.ok()) return result.status();
        values[id] = *std::move(result);
        std::string key = absl::StrCat(ir::OpName(node.op), " (", std::string(1, ir::PhaseLetter(node.phase)), ")");
        by_op[key].ms += ms / static_cast<double>(repeats);
        by_op[key].count += r == 0 ? 1 : 0;
        by_node[id].ms += ms / static_cast<double>(repeats);
        by_node[id].id = id;
        total_ms += ms / static_cast<double>(repeats);
      }
      for (ir::ValueId operand : node.operands) {
        if (last_use[operand] == id) values[operand] = ir::HostTensor();
      }
    }
  }
  std::vector<std::pair<std::string, OpTime>> ops(by_op.begin(), by_op.end());
  std::sort(ops.begin(), ops.end(), [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
  out << absl::StrFormat("\nprofile: mean over %d runs, %.1f ms in kernels; op (phase F/I/W)\n", repeats, total_ms);
  out << absl::StrFormat("  %-26s %6s %10s %7s\n", "op", "nodes", "ms", "share");
  for (const auto& [name, time] : ops) {
    out << absl::StrFormat("  %-26s %6d %10.2f %6.1f%%\n", name, time.count, time.ms, 100.0 * time.ms / total_ms);
  }
  std::sort(by_node.begin(), by_node.end(), [](const NodeTime& a, const NodeTime& b) { return a.ms > b.ms; });
  out << "\nslowest nodes:\n";
  for (size_t i = 0; i < std::min<size_t>(15, by_node.size()); ++i) {
    const ir::Node& node = graph.node(by_node[i].id);
    std::string shapes;
    for (ir::ValueId operand : node.operands) {
      absl::StrAppend(&shapes, shapes.empty() ? "" : ", ", ir::TypeToString(graph.type(operand)));
    }
    out << absl::StrFormat("  %8.2f ms  %%%d = %s(%s) -> %s  %c  %s\n", by_node[i].ms, by_node[i].id,
                           ir::OpName(node.op), shapes, ir::TypeToString(node.type), ir::PhaseLetter(node.phase),
                           node.location.ToString());
  }
  return absl::OkStatus();
}

// ---- PyTorch, in a child process.

struct TorchResult {
  std::optional<double> ms;  // unset when torch could not run
  std::string blas;          // "openblas", "reference", ...
  std::string blas_libraries;
  std::string version;
  std::string error;
};

// The value of `"key": ` in a flat JSON object: a number, a string, or the
// raw text of a list.
std::optional<std::string> JsonField(const std::string& json, const std::string& key) {
  std::string quoted = absl::StrCat("\"", key, "\":");
  size_t at = json.find(quoted);
  if (at == std::string::npos) return std::nullopt;
  at = json.find_first_not_of(' ', at + quoted.size());
  if (at == std::string::npos) return std::nullopt;
  if (json[at] == '"') {
    size_t end = json.find('"', at + 1);
    return end == std::string::npos ? std::nullopt : std::optional(json.substr(at + 1, end - at - 1));
  }
  size_t end = json[at] == '[' ? json.find(']', at) + 1 : json.find_first_of(",}", at);
  return json.substr(at, end - at);
}

std::string JsonEscape(const std::string& text) {
  std::string escaped;
  for (char ch : text) {
    if (ch == '"' || ch == '\\') {
      escaped += '\\';
      escaped += ch;
    } else if (static_cast<unsigned char>(ch) < 0x20) {
      escaped += ' ';
    } else {
      escaped += ch;
    }
  }
  return escaped;
}

std::string ShellQuote(const std::string& text) {
  std::string quoted = "'";
  for (char ch : text) quoted += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return quoted + "'";
}

TorchResult RunTorch(const std::string& python, const std::string& script, const BlockConfig& c, int64_t threads,
                     int64_t repeats, const actor::DeviceSpec& device) {
  TorchResult result;
  std::string command = absl::StrCat(ShellQuote(python), " ", ShellQuote(script), " --dim ", c.dim, " --seq ", c.seq,
                                     " --batch ", c.batch, " --heads ", c.heads, " --threads ", threads,
                                     " --repeats ", repeats,
                                     device.kind == actor::DeviceSpec::Kind::kCuda ? " --device cuda" : "",
                                     device.bf16_matmul ? " --bf16" : "", " 2>&1");
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    result.error = absl::StrCat("cannot start ", python);
    return result;
  }
  std::string output;
  std::array<char, 4096> buffer;
  while (size_t got = fread(buffer.data(), 1, buffer.size(), pipe)) output.append(buffer.data(), got);
  int status = pclose(pipe);
  // The JSON is the last line that opens an object; anything else is noise
  // or an error message.
  std::string json;
  size_t start = 0;
  std::string last_line;
  while (start < output.size()) {
    size_t end = output.find('\n', start);
    if (end == std::string::npos) end = output.size();
    std::string line = output.substr(start, end - start);
    if (!line.empty() && line[0] == '{') json = line;
    if (!line.empty()) last_line = line;
    start = end + 1;
  }
  double ms = 0;
  std::optional<std::string> ms_text = JsonField(json, "torch_ms");
  if (status != 0 || !ms_text || !absl::SimpleAtod(*ms_text, &ms)) {
    std::optional<std::string> error = JsonField(json, "error");
    result.error = error ? *error : (last_line.empty() ? absl::StrCat(python, " exited with status ", status) : last_line);
    return result;
  }
  result.ms = ms;
  result.blas = JsonField(json, "blas").value_or("unknown");
  result.blas_libraries = JsonField(json, "blas_libraries").value_or("[]");
  result.version = JsonField(json, "torch_version").value_or("?");
  return result;
}

}  // namespace

int RunBlockBench(const CommandArgs& args, std::ostream& out, std::ostream& err) {
  Arguments arguments;
  arguments.AddOption("dim", "model width", "256");
  arguments.AddOption("seq", "sequence length", "128");
  arguments.AddOption("batch", "sequences per batch", "8");
  arguments.AddOption("heads", "attention heads (must divide --dim)", "4");
  arguments.AddOption("threads", "BLAS threads on both sides (torch: intra-op and OpenBLAS)", "1");
  arguments.AddOption("repeats", "timed runs after one warm-up; the median is reported", "10");
  arguments.AddOption("python", "the Python that has torch (Debian's python3-torch)", "/usr/bin/python3");
  arguments.AddOption("torch-script", "the PyTorch side",
                      absl::StrCat(TANDEM_SOURCE_DIR, "/tools/bench/torch_block.py"));
  arguments.AddOption("device", "cpu, or cuda[:N][+bf16]: Tandem's CUDA device against PyTorch on the same GPU",
                      "cpu");
  arguments.AddFlag("no-torch", "time Tandem only");
  arguments.AddFlag("profile", "also time every kernel of the Tandem run and print the top ops");
  arguments.AddFlag("json", "print one JSON object instead of the table");
  arguments.AddFlag("help", "show this help");
  if (absl::Status status = arguments.Parse(args); !status.ok()) {
    err << "tandem bench block: " << status.message() << "\n" << kUsage << arguments.Usage();
    return 2;
  }
  if (arguments.Flag("help")) {
    out << kUsage << arguments.Usage();
    return 0;
  }
  BlockConfig config;
  int64_t threads = 1;
  int64_t repeats = 10;
  for (auto [name, target] : std::vector<std::pair<const char*, int64_t*>>{{"dim", &config.dim},
                                                                            {"seq", &config.seq},
                                                                            {"batch", &config.batch},
                                                                            {"heads", &config.heads},
                                                                            {"threads", &threads},
                                                                            {"repeats", &repeats}}) {
    absl::StatusOr<int64_t> value = arguments.GetInt(name);
    if (!value.ok() || *value < 1) {
      err << "tandem bench block: --" << name << " needs a positive integer\n";
      return 2;
    }
    *target = *value;
  }
  absl::StatusOr<actor::DeviceSpec> device_spec = DeviceFrom(arguments);
  if (!device_spec.ok()) {
    err << "tandem bench block: " << device_spec.status().message() << "\n";
    return 2;
  }
  if (device_spec->kind == actor::DeviceSpec::Kind::kCuda && arguments.Flag("profile")) {
    err << "tandem bench block: --profile times the reference kernels; it needs --device cpu\n";
    return 2;
  }
  absl::StatusOr<std::shared_ptr<actor::Device>> device = actor::OpenDevice(*device_spec, 0);
  if (!device.ok()) {
    err << "tandem bench block: " << device.status().message() << "\n";
    return 1;
  }
  if (config.dim % config.heads != 0) {
    err << "tandem bench block: --dim " << config.dim << " is not divisible by --heads " << config.heads << "\n";
    return 2;
  }

  absl::StatusOr<ir::TrainStep> step =
      TraceTrainStep("gpt_block", BlockModel(config), Sgd(SgdOptions{}), TraceOptions{.num_microbatches = 1});
  if (!step.ok()) {
    err << "tandem bench block: " << step.status().message() << "\n";
    return 1;
  }
  ir::TensorMap inputs = ir::InitialState(*step);
  inputs["probe"] = ir::MakeTensor({ir::DType::kF32, {config.batch, config.seq, config.dim}},
                                   ir::Initializer{.kind = ir::Initializer::Kind::kNormal, .b = 1.0, .seed = 7});
  ir::SetBlasThreads(static_cast<int>(threads));
  std::vector<double> tandem_times;
  for (int64_t r = 0; r <= repeats; ++r) {  // run 0 is the warm-up
    Clock::time_point start = Clock::now();
    // On a GPU, the time includes the host boundary: inputs up, outputs down.
    absl::StatusOr<ir::TensorMap> outputs = (*device)->RunGraph(step->microbatch, inputs);
    double ms = MillisecondsSince(start);
    if (!outputs.ok()) {
      err << "tandem bench block: " << outputs.status().message() << "\n";
      return 1;
    }
    if (r > 0) tandem_times.push_back(ms);
  }
  const double tandem_ms = Median(tandem_times);

  TorchResult torch;
  if (arguments.Flag("no-torch")) {
    torch.error = "skipped (--no-torch)";
  } else {
    torch = RunTorch(*arguments.Get("python"), *arguments.Get("torch-script"), config, threads, repeats,
                     *device_spec);
  }
  const double ratio = torch.ms ? tandem_ms / *torch.ms : 0.0;

  if (arguments.Flag("json")) {
    auto number = [](const std::optional<double>& v) { return v ? absl::StrFormat("%.3f", *v) : "null"; };
    out << absl::StrFormat(
        "{\"benchmark\": \"block\", \"device\": \"%s\", \"dim\": %d, \"seq\": %d, \"batch\": %d, \"heads\": %d, \"threads\": %d, "
        "\"repeats\": %d, \"tandem_ms\": %.3f, \"tandem_min_ms\": %.3f, \"torch_ms\": %s, \"ratio\": %s, "
        "\"torch_blas\": \"%s\", \"torch_blas_libraries\": %s, \"torch_error\": \"%s\"}\n",
        (*device)->name(), config.dim, config.seq, config.batch, config.heads, threads, repeats, tandem_ms,
        *std::min_element(tandem_times.begin(), tandem_times.end()), number(torch.ms),
        number(torch.ms ? std::optional<double>(ratio) : std::nullopt), JsonEscape(torch.blas), torch.blas_libraries.empty() ? "[]" : torch.blas_libraries,
        JsonEscape(torch.error));
  } else {
    out << absl::StrFormat(
        "GPT block forward+backward (pre-norm, causal attention + GELU MLP): dim %d, seq %d, batch %d, heads %d\n"
        "threads %d on both sides; median of %d runs after one warm-up\n\n",
        config.dim, config.seq, config.batch, config.heads, threads, repeats);
    out << absl::StrFormat("  %-36s %12s\n", "executor", "ms/fwd+bwd");
    out << absl::StrFormat("  %-36s %12.1f\n",
                           device_spec->kind == actor::DeviceSpec::Kind::kCpu
                               ? std::string("tandem (reference interpreter)")
                               : absl::StrCat("tandem (", (*device)->name(), ")"),
                           tandem_ms);
    if (torch.ms) {
      out << absl::StrFormat("  %-36s %12.1f\n", absl::StrCat("pytorch ", torch.version, " (", actor::DeviceSpecName(*device_spec), ")"), *torch.ms);
      out << absl::StrFormat("  %-36s %11.2fx%s\n", "ratio tandem / pytorch", ratio,
                             ratio <= 1.25 ? "  (goal <= 1.25: met)" : "  (goal <= 1.25: NOT met)");
      out << "\ntorch BLAS: " << torch.blas << " " << torch.blas_libraries << "\n";
      if (torch.blas != "openblas") {
        out << "warning: torch is not using OpenBLAS; the reference-BLAS fallback is ~12x slower, so the ratio "
               "above is not meaningful\n";
      }
    } else {
      out << absl::StrFormat("  %-36s %12s\n", "pytorch (cpu)", "unavailable");
      out << "\npytorch unavailable: " << torch.error << "\n";
    }
  }
  if (arguments.Flag("profile")) {
    if (absl::Status status = Profile(step->microbatch, inputs, repeats, out); !status.ok()) {
      err << "tandem bench block: profile: " << status.message() << "\n";
      return 1;
    }
  }
  return 0;
}

}  // namespace tandem::cli
