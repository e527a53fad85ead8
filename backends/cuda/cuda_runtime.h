// The CUDA runtime as the rest of Tandem sees it: is there a device, and how
// much memory is free. Plain C++: no CUDA header is included here (CUDA
// errors as absl::Status, inside backends/cuda/: cuda_status.h).
//
// Without a GPU (or without a driver) cudaGetDeviceCount fails ("CUDA driver
// version is insufficient for CUDA runtime version"); ProbeDevices turns
// that into zero devices and keeps the runtime's words in `why`, so callers
// (tests, `tandem train --device cuda`) can skip or refuse with a clear
// message instead of crashing.
#ifndef TANDEM_BACKENDS_CUDA_CUDA_RUNTIME_H_
#define TANDEM_BACKENDS_CUDA_CUDA_RUNTIME_H_

#include <string>

#include <cstdint>

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backends/device.h"
#include "ir/device_spec.h"

namespace tandem::cuda {

struct DeviceProbe {
  int count = 0;    // visible CUDA devices
  std::string why;  // when count is 0: the runtime's reason
};

// Thread-safe; asks the runtime every time (cheap after the first call).
DeviceProbe ProbeDevices();

// OK when `device` is a visible device; FailedPrecondition otherwise, e.g.
// "no CUDA device 0: cudaGetDeviceCount: CUDA driver version is
// insufficient for CUDA runtime version", or "CUDA device 3 asked for, 1
// visible".
absl::Status CheckDevice(int device);

// The bytes free on `device` for new allocations (cudaMemGetInfo, on the
// calling thread's current device set to `device`); Internal with the
// runtime's words when it cannot be asked.
absl::StatusOr<int64_t> FreeBytes(int device);

// What the runtime says about a device: its name and the attributes its
// peak rates follow from.
struct DeviceFacts {
  std::string name;
  int major = 0, minor = 0;  // compute capability
  int multiprocessors = 0;
  double clock_hz = 0;         // the SMs' peak clock
  double memory_clock_hz = 0;  // the memory's peak clock
  int memory_bus_bits = 0;
};

// `device`'s facts (cudaGetDeviceProperties, cudaDeviceGetAttribute);
// Internal with the runtime's words when it cannot be asked. An attribute
// the runtime does not report reads as 0.
absl::StatusOr<DeviceFacts> DescribeDevice(int device);

// The peaks that follow from `facts`: memory bandwidth as two transfers per
// memory clock over the bus, and the dense matmul rate of `precision`'s math
// (f32 on the SIMT cores, TF32 and bf16 on the tensor cores) from the
// per-SM rates of the compute capabilities known here, 8.0 (A100) and 9.0
// (H100, H200), at the SMs' peak clock; 0 for the others. The vendor's
// data sheets quote tensor-core rates at a lower boost clock (H100 SXM:
// 989 TFLOP/s bf16 at 1830 MHz), so these are upper bounds.
backends::PeakRates PeakRatesOf(const DeviceFacts& facts, ir::DeviceSpec::Precision precision);

}  // namespace tandem::cuda

#endif  // TANDEM_BACKENDS_CUDA_CUDA_RUNTIME_H_
