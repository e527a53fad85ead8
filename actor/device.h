// Device: where an actor's stage functions compute.
//
// The executor (actor/executor.h) runs every `run` instruction through its
// Device. Two kinds:
//   - cpu: the reference kernels (ir::RunGraph); the default, and what every
//     pipelined CPU run is compared with bitwise.
//   - cuda: CudaGraphRunner (actor/cuda/cuda_graph_runner.h), a CUDA kernel
//     for every op and cuBLAS for matmul; only in builds with
//     TANDEM_WITH_CUDA. Tensors cross the host boundary at each function
//     call; the executor's buffers stay host tensors, so every transport
//     works unchanged.
//
// Naming a device: "cpu"; "cuda" (the actor's own GPU: actor id modulo the
// visible devices, so several actors may share one GPU); "cuda:N"; either
// CUDA form with "+bf16" (matmul operands rounded to bf16, f32
// accumulation).
//
// Ownership and threading: a Device is shared (shared_ptr) by the
// executors of one actor and used from that actor's compute thread only.
#ifndef TANDEM_ACTOR_DEVICE_H_
#define TANDEM_ACTOR_DEVICE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ir/graph.h"
#include "ir/interpreter.h"

namespace tandem::actor {

struct DeviceSpec {
  enum class Kind : uint8_t { kCpu, kCuda };
  Kind kind = Kind::kCpu;
  int index = -1;  // CUDA: the device ordinal; -1 picks actor % visible devices
  bool bf16_matmul = false;
  friend bool operator==(const DeviceSpec&, const DeviceSpec&) = default;
};

// "cpu", "cuda", "cuda:1", "cuda+bf16", "cuda:1+bf16". InvalidArgument
// naming the accepted forms for anything else.
absl::StatusOr<DeviceSpec> ParseDeviceSpec(absl::string_view text);
// The inverse of ParseDeviceSpec.
std::string DeviceSpecName(const DeviceSpec& spec);

class Device {
 public:
  virtual ~Device() = default;
  // "cpu", "cuda:0", "cuda:0+bf16".
  virtual std::string name() const = 0;
  // `graph`'s outputs by name, computed from `inputs` by input name, with the
  // errors of ir::RunGraph.
  virtual absl::StatusOr<ir::TensorMap> RunGraph(const ir::Graph& graph, const ir::TensorMap& inputs) = 0;
  // The CUDA device ordinal this device computes on; -1 when it is no GPU.
  virtual int cuda_ordinal() const { return -1; }
};

// The reference-kernel device (stateless; shared by everyone).
std::shared_ptr<Device> CpuDevice();

// OK when this build and machine have the device `spec` names (always, for
// the CPU), without opening it: a controller checks before starting
// actors. FailedPrecondition otherwise, saying why without naming the
// device (callers add the name): "this build of Tandem has no CUDA backend
// (...)", "no CUDA device is visible (<the CUDA runtime's reason>)", "only 1
// CUDA device(s) visible".
absl::Status CheckDeviceVisible(const DeviceSpec& spec);

// Opens the device `spec` names for actor `actor`: CheckDeviceVisible's
// errors as "device cuda for actor 1: no CUDA device is visible (...)".
absl::StatusOr<std::shared_ptr<Device>> OpenDevice(const DeviceSpec& spec, int32_t actor);

}  // namespace tandem::actor

#endif  // TANDEM_ACTOR_DEVICE_H_
