// tandem-bench-runner-on-cpu: the CUDA backend's host work per call,
// measured on the CPU (the runner built on CUDA's execution model,
// backends/cuda/cuda_on_cpu.h). The training graph of one transformer block
// (layer norms, causal self-attention, GELU MLP, forward and backward, as
// `tandem bench block` traces it) at tiny shapes is run again and again two
// ways, interleaved in one process:
//   compile per call: CudaGraphRunner::Run(graph, ...), which compiles the
//     graph (plan, type checks, index maps) and runs it, as every call did
//     before executables;
//   executable: CudaGraphRunner::Compile once, then Run(executable, ...).
// Twice: with the kernels, and with them skipped (cuda_on_cpu's
// SetKernelsSkipped: launches and GEMMs return at once), which leaves the
// runner's host work per call: the graph walk, allocations, plans and
// launch calls (the emulator's own launch bookkeeping included). Prints
// calls per second of each way, their ratio, and one compile's time.
//
// Usage: tandem-bench-runner-on-cpu [--seconds S] [--dim D]
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <string>

#include "absl/strings/numbers.h"
#include "backends/cuda/cuda_graph_runner.h"
#include "backends/cuda/cuda_on_cpu.h"
#include "ir/initial_state.h"
#include "ir/layers.h"
#include "ir/optimizers.h"
#include "ir/trace.h"

namespace tandem {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

int Fail(const absl::Status& status) {
  std::cerr << "tandem-bench-runner-on-cpu: " << status << "\n";
  return 1;
}

// One block (`tandem bench block`'s) whose loss is its output against a probe.
ModelFunction BlockModel(int64_t dim) {
  return [dim](Tracer& t) {
    const ir::Initializer weights = init::Normal(0.02);
    Tensor x = t.Parameter("x", {1, 4, dim}, init::Normal(1.0));
    Tensor probe = t.Label("probe", {ir::DType::kF32, {1, 4, dim}});
    x = x + layers::CausalSelfAttention(t, "attn", layers::LayerNorm(t, "ln1", x, dim), 2, weights);
    x = x + layers::GeluMlp(t, "mlp", layers::LayerNorm(t, "ln2", x, dim), 4 * dim, weights);
    return mean(x * probe);
  };
}

struct Timing {
  int64_t calls = 0;
  double per_call_s = 0;
  double executable_s = 0;
};

// Alternating calls each way until `seconds` have passed.
absl::StatusOr<Timing> Measure(cuda::CudaGraphRunner& runner, const ir::Graph& graph,
                               const cuda::CudaExecutable& executable, const cuda::DeviceTensorMap& inputs,
                               double seconds) {
  Timing timing;
  const Clock::time_point end =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  while (Clock::now() < end) {
    Clock::time_point start = Clock::now();
    absl::StatusOr<cuda::DeviceTensorMap> a = runner.Run(graph, inputs);
    timing.per_call_s += SecondsSince(start);
    if (!a.ok()) return a.status();
    start = Clock::now();
    absl::StatusOr<cuda::DeviceTensorMap> b = runner.Run(executable, inputs);
    timing.executable_s += SecondsSince(start);
    if (!b.ok()) return b.status();
    ++timing.calls;
  }
  return timing;
}

void Print(const std::string& what, const Timing& t) {
  std::cout << what << ": " << t.calls << " calls each way\n"
            << "  compile per call: " << t.calls / t.per_call_s << " calls/s (" << 1e6 * t.per_call_s / t.calls
            << " us/call)\n"
            << "  executable:       " << t.calls / t.executable_s << " calls/s (" << 1e6 * t.executable_s / t.calls
            << " us/call)\n"
            << "  ratio (calls/s, executable / compile per call): " << t.per_call_s / t.executable_s << "\n";
}

int Main(int argc, char** argv) {
  double seconds = 3.0;
  int64_t dim = 8;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    const bool has_value = i + 1 < argc;
    bool ok = has_value;
    if (flag == "--seconds" && has_value) {
      ok = absl::SimpleAtod(argv[++i], &seconds) && seconds > 0 && seconds <= 600;
    } else if (flag == "--dim" && has_value) {
      ok = absl::SimpleAtoi(argv[++i], &dim) && dim >= 2 && dim <= 256 && dim % 2 == 0;
    } else {
      ok = false;
    }
    if (!ok) {
      std::cerr << "usage: tandem-bench-runner-on-cpu [--seconds S in (0, 600]] [--dim D, even, 2..256]\n";
      return 2;
    }
  }
  absl::StatusOr<ir::TrainStep> step =
      TraceTrainStep("block", BlockModel(dim), Sgd(SgdOptions{}), TraceOptions{.num_microbatches = 1});
  if (!step.ok()) return Fail(step.status());
  const ir::Graph& graph = step->microbatch;
  absl::StatusOr<ir::TensorMap> state = ir::InitialState(*step);
  if (!state.ok()) return Fail(state.status());

  absl::StatusOr<std::unique_ptr<cuda::CudaGraphRunner>> runner = cuda::CudaGraphRunner::Create({});
  if (!runner.ok()) return Fail(runner.status());
  cuda::DeviceTensorMap inputs;
  for (ir::ValueId id : graph.Inputs()) {
    const std::string& name = graph.node(id).attributes.GetString("name");
    auto it = state->find(name);
    absl::StatusOr<ir::HostTensor> value = it != state->end() ? absl::StatusOr<ir::HostTensor>(it->second)
                                                                 : ir::HostTensor::Allocate(graph.node(id).type);
    if (!value.ok()) return Fail(value.status());
    absl::StatusOr<backends::DeviceTensor> uploaded =
        backends::CopyToDevice((*runner)->memory(), *value, absl::Now() + absl::Minutes(1));
    if (!uploaded.ok()) return Fail(uploaded.status());
    inputs[name] = *std::move(uploaded);
  }

  const Clock::time_point start = Clock::now();
  absl::StatusOr<std::unique_ptr<cuda::CudaExecutable>> executable = (*runner)->Compile(graph);
  const double compile_s = SecondsSince(start);
  if (!executable.ok()) return Fail(executable.status());

  std::cout << "graph: one transformer block's training graph, dim " << dim << ", seq 4 (" << graph.size()
            << " nodes), on the CUDA runner built for the CPU\n"
            << "one compile: " << 1e6 * compile_s << " us\n";
  absl::StatusOr<Timing> with_kernels = Measure(**runner, graph, **executable, inputs, seconds / 2);
  if (!with_kernels.ok()) return Fail(with_kernels.status());
  Print("with the kernels", *with_kernels);
  cuda_on_cpu::SetKernelsSkipped(true);
  absl::StatusOr<Timing> host_only = Measure(**runner, graph, **executable, inputs, seconds / 2);
  cuda_on_cpu::SetKernelsSkipped(false);
  if (!host_only.ok()) return Fail(host_only.status());
  Print("host work only (kernels skipped)", *host_only);
  return 0;
}
}  // namespace
}  // namespace tandem

int main(int argc, char** argv) { return tandem::Main(argc, argv); }
