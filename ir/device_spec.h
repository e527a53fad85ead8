// Where an actor computes: the one name of a device that launchers pass on
// (tandem-actor --device), actors open (backends/device.h) and controllers use
// to tell which actors share a device.
//
// Naming a device: "cpu"; "cuda" (the actor's own GPU: GpuForRank of its
// rank, so several actors may share one GPU); "cuda:N"; either CUDA form
// with a precision: "+tf32" (f32 matmuls on TF32 tensor cores) or "+bf16"
// (the operands of matmuls and of attention's products rounded to bf16,
// f32 accumulation); "fake-cuda" (the
// emulated GPU, one per host) or "fake-cuda/N" (N emulated GPUs per host,
// actor x on GpuForRank(x, N), as `cuda` places actors on real ones).
#ifndef TANDEM_IR_DEVICE_SPEC_H_
#define TANDEM_IR_DEVICE_SPEC_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tandem::ir {

inline constexpr int kMaxFakeGpus = 64;

struct DeviceSpec {
  enum class Kind : uint8_t { kCpu, kCuda, kFakeCuda };
  // How a CUDA device computes matmuls; everything else is f32.
  enum class Precision : uint8_t { kF32, kTf32, kBf16 };
  Kind kind = Kind::kCpu;
  int index = -1;  // CUDA: the device ordinal; -1 picks GpuForRank
  int fake_gpus = 1;  // fake-cuda: emulated GPUs per host
  Precision precision = Precision::kF32;
  friend bool operator==(const DeviceSpec&, const DeviceSpec&) = default;
};

// "cpu", "cuda", "cuda:1", "cuda+tf32", "cuda:1+bf16", "fake-cuda",
// "fake-cuda/2" (at most kMaxFakeGpus).
// InvalidArgument naming the accepted forms for anything else.
absl::StatusOr<DeviceSpec> ParseDeviceSpec(absl::string_view text);
// The inverse of ParseDeviceSpec.
std::string DeviceSpecName(const DeviceSpec& spec);

// The GPU of the actor of node-local rank `rank` among `visible` GPUs: the
// rank modulo what the process sees. Under Slurm's GPU binding
// (--gpus-per-task) every task sees just its own GPU, which is then 0.
int GpuForRank(int32_t rank, int visible);

// True when actors `a` and `b` of one host, both on the device `spec`
// names and seeing `visible` GPUs, compute on the same device: fake-cuda/N
// puts actor x on emulated GPU GpuForRank(x, N), and a `cuda` spec without
// an index puts actor x on GpuForRank(x, visible). Such actors exchange
// device tensors over CUDA IPC; device-resident actors on different devices
// over NCCL (actor/nccl_transport.h).
bool ActorsShareDevice(const DeviceSpec& spec, int32_t a, int32_t b, int visible);

}  // namespace tandem::ir

#endif  // TANDEM_IR_DEVICE_SPEC_H_
