// ProbeDevices and CheckDevice over the CUDA runtime API.
#include "backends/cuda/cuda_status.h"
#include "backends/cuda/cuda_runtime.h"

#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tandem::cuda {

DeviceProbe ProbeDevices() {
  DeviceProbe probe;
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    // Not sticky (no context exists yet), but clear it so that a later
    // cudaGetLastError of the same thread does not report it again.
    cudaGetLastError();
    probe.why = absl::StrCat("cudaGetDeviceCount: ", cudaGetErrorString(error));
    return probe;
  }
  probe.count = count;
  if (count == 0) probe.why = "cudaGetDeviceCount: 0 devices visible";
  return probe;
}

absl::Status CheckDevice(int device) {
  const DeviceProbe probe = ProbeDevices();
  if (probe.count == 0) {
    return absl::FailedPreconditionError(absl::StrCat("no CUDA device ", device, ": ", probe.why));
  }
  if (device < 0 || device >= probe.count) {
    return absl::FailedPreconditionError(
        absl::StrCat("CUDA device ", device, " asked for, ", probe.count, " visible"));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> FreeBytes(int device) {
  if (absl::Status status = CudaStatus(cudaSetDevice(device), absl::StrCat("cudaSetDevice(", device, ")"));
      !status.ok()) {
    return status;
  }
  size_t free = 0, total = 0;
  if (absl::Status status = CudaStatus(cudaMemGetInfo(&free, &total), absl::StrCat("cudaMemGetInfo on device ", device));
      !status.ok()) {
    return status;
  }
  return static_cast<int64_t>(free);
}

absl::StatusOr<DeviceFacts> DescribeDevice(int device) {
  if (absl::Status status = CheckDevice(device); !status.ok()) return status;
  cudaDeviceProp properties{};
  if (absl::Status status =
          CudaStatus(cudaGetDeviceProperties(&properties, device), absl::StrCat("cudaGetDeviceProperties(", device, ")"));
      !status.ok()) {
    return status;
  }
  DeviceFacts facts;
  facts.name = properties.name;
  facts.major = properties.major;
  facts.minor = properties.minor;
  // An attribute the runtime refuses reads as 0 (its peak is then unknown).
  auto attribute = [device](cudaDeviceAttr which) {
    int value = 0;
    if (cudaDeviceGetAttribute(&value, which, device) != cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    return value;
  };
  facts.multiprocessors = attribute(cudaDevAttrMultiProcessorCount);
  facts.clock_hz = 1e3 * attribute(cudaDevAttrClockRate);  // kHz
  facts.memory_clock_hz = 1e3 * attribute(cudaDevAttrMemoryClockRate);
  facts.memory_bus_bits = attribute(cudaDevAttrGlobalMemoryBusWidth);
  return facts;
}

backends::PeakRates PeakRatesOf(const DeviceFacts& facts, ir::DeviceSpec::Precision precision) {
  // Dense flops per SM per clock (an FMA is 2): f32 on the SIMT cores,
  // TF32 and bf16 on the tensor cores.
  struct PerSm {
    int major, minor;
    double f32, tf32, bf16;
  };
  static constexpr PerSm kKnown[] = {
      {8, 0, 128, 1024, 2048},  // A100: 64 FP32 lanes; 156 / 312 TFLOP/s at 1410 MHz on 108 SMs
      {9, 0, 256, 2048, 4096},  // H100, H200: 128 FP32 lanes; 495 / 989 TFLOP/s at 1830 MHz on 132 SMs
  };
  backends::PeakRates peak;
  peak.memory_bytes_per_second = 2.0 * facts.memory_clock_hz * facts.memory_bus_bits / 8.0;
  double per_sm = 0;
  for (const PerSm& known : kKnown) {
    if (known.major != facts.major || known.minor != facts.minor) continue;
    switch (precision) {
      case ir::DeviceSpec::Precision::kF32:
        per_sm = known.f32;
        break;
      case ir::DeviceSpec::Precision::kTf32:
        per_sm = known.tf32;
        break;
      case ir::DeviceSpec::Precision::kBf16:
        per_sm = known.bf16;
        break;
    }
  }
  peak.matmul_flops_per_second = per_sm * facts.multiprocessors * facts.clock_hz;
  peak.basis = absl::StrFormat("%s: %d SMs of sm_%d%d at %.0f MHz (%s), memory %d-bit at %.0f MHz", facts.name, facts.multiprocessors,
                               facts.major, facts.minor, facts.clock_hz / 1e6,
                               per_sm > 0 ? "matmul rate per SM known" : "matmul rate per SM not known here",
                               facts.memory_bus_bits, facts.memory_clock_hz / 1e6);
  return peak;
}

}  // namespace tandem::cuda
