// FakeCudaDevice: the emulated GPU behind `--device fake-cuda`, a
// device-resident Device (device.h) whose memory is FakeDeviceMemory
// (memfd "device memory", an asynchronous stream, interprocess events).
//
// An executor on it keeps every buffer in that memory, and actors that share
// it exchange device tensors over the CUDA IPC data plane
// (actor/ipc_transport.h), exactly as device-resident GPU actors do. Run
// computes with the CPU reference kernels on the device memory itself: it
// waits for the stream (so copies a receive enqueued have landed), reads the
// inputs in place, runs cpu::RunGraph and uploads each output into an
// allocation of its own. The bits are therefore the reference's.
//
// Injected faults, for the tests of how a failing device is reported
// (TANDEM_FAULT, parsed by ParseFakeCudaFaults):
//   - "fake-cuda-poison:A:N": actor A's N-th Run (from 1) poisons the stream
//     (FakeDeviceMemory::Poison), as a kernel that faulted; that Run and
//     every later device call fail.
//   - "fake-cuda-die:A:N": actor A's process kills itself (SIGKILL) right
//     after its N-th device send was handed to the data plane, with the copy
//     into the peer's ring still on its stream: a peer dying mid-transfer.
//     The data plane (actor/device_transport.h) carries it out.
// Any other TANDEM_FAULT value belongs to someone else and means no fault.
//
// Errors: inputs that are not tensors of this device's memory are
// InvalidArgument; waits on the stream end at Options::wait_timeout
// (DeadlineExceeded); the memory's errors otherwise.
//
// Ownership and threading: owns its FakeDeviceMemory. Used from one compute
// thread (device.h); its memory may be used from any thread.
#ifndef TANDEM_BACKENDS_FAKE_FAKE_CUDA_DEVICE_H_
#define TANDEM_BACKENDS_FAKE_FAKE_CUDA_DEVICE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "backends/device.h"
#include "backends/fake/fake_device_memory.h"
#include "ir/graph.h"
#include "ir/graph_plan.h"

namespace tandem::fake {

struct FakeCudaFaults {
  int64_t poison_at_run = -1;  // the Run that poisons the stream; -1: none
  int64_t die_at_send = -1;    // the device send that kills the process; -1: none
  int64_t free_bytes = -1;     // the device reports this much free (a small GPU); -1: unknown
};

// The faults `fault` (TANDEM_FAULT's value) injects into actor `actor`.
// InvalidArgument for a fake-cuda-* value that is malformed.
absl::StatusOr<FakeCudaFaults> ParseFakeCudaFaults(absl::string_view fault, int32_t actor);

class FakeCudaDevice final : public backends::ResidentDevice {
 public:
  struct Options {
    absl::Duration wait_timeout = absl::Minutes(1);
    int64_t poison_at_run = -1;
    // What FreeBytes reports, to emulate a GPU of that much free memory;
    // -1: nothing (host memory, which the controller checks).
    int64_t free_bytes = -1;
    FakeDeviceMemory::Options memory;
  };

  static absl::StatusOr<std::shared_ptr<FakeCudaDevice>> Create(Options options);

  std::string name() const override { return "fake-cuda"; }
  backends::DeviceMemory* memory() const override { return memory_.get(); }
  std::optional<int64_t> FreeBytes() const override {
    return options_.free_bytes >= 0 ? std::optional<int64_t>(options_.free_bytes) : std::nullopt;
  }
  absl::StatusOr<std::unique_ptr<backends::Executable>> Compile(const ir::Graph& graph) override;

  FakeDeviceMemory& fake_memory() { return *memory_; }

 private:
  class Compiled;

  FakeCudaDevice(Options options, std::unique_ptr<FakeDeviceMemory> memory)
      : ResidentDevice(options.wait_timeout), options_(options), memory_(std::move(memory)) {}

  // One call of a compiled graph: the reference kernels on the device
  // memory, in stream order, with the injected faults.
  absl::StatusOr<backends::HandleMap> RunPlanned(const ir::Graph& graph, const ir::GraphPlan& plan,
                                                 const backends::HandleMap& inputs);

  const Options options_;
  std::unique_ptr<FakeDeviceMemory> memory_;
  int64_t runs_ = 0;
};

}  // namespace tandem::fake

#endif  // TANDEM_BACKENDS_FAKE_FAKE_CUDA_DEVICE_H_
