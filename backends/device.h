// Device: where an actor's stage functions compute, and where its buffers
// live; the boundary between the IR and a backend.
//
// A Device compiles each stage function once into an Executable (like
// PjRt's client and loaded executable): the executor (actor/executor.h)
// compiles its program's functions when it is created and runs every `run`
// instruction through the function's Executable. One backend per folder of
// backends/:
//   - cpu (backends/cpu/cpu_device.h): the reference kernels
//     (cpu::RunGraph); the default, and what every pipelined CPU run is
//     compared with bitwise.
//   - cuda (backends/cuda/cuda_device.h): CudaGraphRunner, a CUDA kernel for
//     every op and cuBLAS for matmul; only in builds with TANDEM_WITH_CUDA.
//     Device-resident: the executor keeps every buffer in the runner's
//     CudaDeviceMemory, and actors sharing a GPU exchange device tensors
//     over CUDA IPC on that memory's stream.
//   - fake-cuda (backends/fake/fake_cuda_device.h): the emulated device.
//     Device-resident: the executor keeps every buffer in FakeDeviceMemory,
//     and the reference kernels compute on that memory, so that pipelines
//     exercise the code paths of a device-resident GPU actor (device
//     buffers and lifetimes, the CUDA IPC data plane) on any machine, with
//     the reference's bits.
// A device-resident Device says so with memory(): the executor then holds
// DeviceTensors of that memory, uploads what arrives from the controller
// (state, inputs) and downloads only what leaves for it (losses, state,
// ReadBuffer).
//
// Naming a device: ir/device_spec.h; opening the one a name says:
// backends/open_device.h.
//
// Ownership and threading: a Device is shared (shared_ptr) by the
// executors of one actor and used from that actor's compute thread only.
#ifndef TANDEM_BACKENDS_DEVICE_H_
#define TANDEM_BACKENDS_DEVICE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "backends/device_memory.h"
#include "backends/tensor_handle.h"
#include "ir/elementwise_runs.h"
#include "ir/graph.h"
#include "ir/host_tensor.h"

namespace tandem::backends {

// The most a device can do, for benchmarks' share of peak (`tandem bench
// kernels`): bytes per second between its compute and its memory, and the
// dense matmul rate in the device's precision. 0 where not known.
struct PeakRates {
  double memory_bytes_per_second = 0;
  double matmul_flops_per_second = 0;
  std::string basis;  // how they were worked out, e.g. "NVIDIA H100: 132 SMs of sm_90 at 1980 MHz (...), memory 5120-bit at 2619 MHz"
};

// A graph compiled for one device. What follows from the graph alone (the
// nodes each output needs, when each value is released, each node's type
// checks, bf16 casts and launch plans) is worked out once by
// Device::Compile; Run does only the work of one call. Holds its own copy
// of the graph. Used from its device's thread only, like the device, and
// must not outlive it.
class Executable {
 public:
  virtual ~Executable() = default;
  // The graph's outputs by name, computed from `inputs` by input name, with
  // the errors of cpu::RunGraph and the device's own. Inputs and outputs are
  // where the device's memory() says (host tensors when it is null).
  virtual absl::StatusOr<HandleMap> Run(const HandleMap& inputs) = 0;
  // The runs of elementwise nodes the device evaluates as one (a kernel
  // each on a GPU), whose time Device::set_node_times gives to the run's
  // last member; null where the device times node by node.
  virtual const ir::ElementwiseRuns* fused_runs() const { return nullptr; }
  // The (matmul, bias add) pairs the device computes as one GEMM with the
  // bias epilogue (a GPU's cuBLASLt), whose time Device::set_node_times
  // gives to the matmul (the add's 0); empty where there are none.
  virtual std::vector<std::pair<ir::ValueId, ir::ValueId>> bias_epilogues() const { return {}; }
};

// A data-dependent failure a device found only after the Run that caused
// it had returned (CUDA's range checks, read back once at the step's end):
// which Run since the last SettleRuns (0: the first), and the error
// cpu::RunGraph would have given.
struct DeferredFailure {
  int64_t run = 0;
  absl::Status status;
};

class Device {
 public:
  virtual ~Device() = default;
  // "cpu", "cuda:0", "cuda:0+bf16", "fake-cuda".
  virtual std::string name() const = 0;
  // The memory an executor on this device keeps its buffers in; null when
  // they are host tensors.
  virtual DeviceMemory* memory() const { return nullptr; }
  // `graph` (a verified graph) compiled for this device; InvalidArgument or
  // Unimplemented naming the node for one the device cannot run.
  virtual absl::StatusOr<std::unique_ptr<Executable>> Compile(const ir::Graph& graph) = 0;
  // Compile and Run once: for callers that run a graph once.
  absl::StatusOr<HandleMap> Run(const ir::Graph& graph, const HandleMap& inputs);
  // A host tensor as this device keeps it (the tensor itself on a host
  // device), and back.
  virtual absl::StatusOr<TensorHandle> Upload(const ir::HostTensor& tensor) { return TensorHandle(tensor); }
  virtual absl::StatusOr<ir::HostTensor> Download(const TensorHandle& handle);
  // acc + grad (f32, of one type), with cpu::AccumulateGradient's bits,
  // where memory() says: the executor's kAccumulate. On the CPU, that
  // function itself; on a device-resident device, the device's own add
  // (ResidentDevice).
  virtual absl::StatusOr<TensorHandle> Accumulate(const TensorHandle& acc, const TensorHandle& grad) = 0;
  // The CUDA device ordinal this device computes on; -1 when it is no GPU.
  virtual int cuda_ordinal() const { return -1; }
  // The bytes free on the device for new allocations, where the device has
  // memory of its own to ask (a GPU: cudaMemGetInfo); nullopt for host
  // memory, which the controller checks before any actor starts. An actor
  // refuses a program whose static peak exceeds it before loading state.
  virtual std::optional<int64_t> FreeBytes() const { return std::nullopt; }
  // Per-node timing, for profiles: while `node_ms` is set (null: off), every
  // Run adds the time of each node of its graph, in milliseconds, to
  // (*node_ms)[node id], growing the vector to the graph's size. The CUDA
  // device times the GPU's work with events; Unimplemented for the others.
  virtual absl::Status set_node_times(std::vector<double>* node_ms);
  // Whether Runs may leave their data-dependent checks (CUDA's range
  // checks) to SettleRuns instead of waiting for them: an executor, which
  // settles at every step's end, turns it on. Off by default: every Run
  // reports its own errors. A device that checks on the host ignores it.
  virtual void set_deferred_checks(bool on) {}
  // Waits for the checks a device defers past its Runs (at most until
  // `deadline`) and returns the earliest failure among the Runs since the
  // last call; nullopt when they all passed, or the device defers nothing
  // (every Run reports its own errors).
  virtual absl::StatusOr<std::optional<DeferredFailure>> SettleRuns(absl::Time deadline) {
    return std::optional<DeferredFailure>();
  }
  // The device's peak rates, where it can say (a GPU: from the runtime's
  // attributes); nullopt for the CPU, whose benchmarks report time only.
  virtual std::optional<PeakRates> Peak() const { return std::nullopt; }

  // Run from host tensors to host tensors (Upload, Run, Download): for
  // callers outside an executor (the reference trainer, benchmarks).
  absl::StatusOr<ir::TensorMap> RunGraph(const ir::Graph& graph, const ir::TensorMap& inputs);
};

// A device-resident Device (CUDA, the fake GPU): memory() is its own, never
// null. Host tensors go in and out by copies on that memory's stream, each
// wait ending after `wait_timeout` (DeadlineExceeded); it accumulates with
// the bits of cpu::AccumulateGradient by running the graph `acc + grad`
// (one kAdd, whose reference kernel is that add) on itself, compiled once
// per type on first use.
class ResidentDevice : public Device {
 public:
  explicit ResidentDevice(absl::Duration wait_timeout) : wait_timeout_(wait_timeout) {}
  absl::StatusOr<TensorHandle> Upload(const ir::HostTensor& tensor) override;
  // A host tensor is returned as it is.
  absl::StatusOr<ir::HostTensor> Download(const TensorHandle& handle) override;
  // InvalidArgument naming the device for tensors missing or of different
  // types.
  absl::StatusOr<TensorHandle> Accumulate(const TensorHandle& acc, const TensorHandle& grad) override;

 protected:
  absl::Duration wait_timeout() const { return wait_timeout_; }

 private:
  const absl::Duration wait_timeout_;
  std::map<std::string, std::unique_ptr<Executable>> accumulators_;  // acc + grad, by type
};

}  // namespace tandem::backends

#endif  // TANDEM_BACKENDS_DEVICE_H_
