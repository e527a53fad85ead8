// The CPU backend's Device: the reference kernels (cpu::RunGraph) on host
// tensors, the default device and the one every pipelined run is compared
// with bitwise.
#ifndef TANDEM_BACKENDS_CPU_CPU_DEVICE_H_
#define TANDEM_BACKENDS_CPU_CPU_DEVICE_H_

#include <memory>

#include "backends/device.h"

namespace tandem::cpu {

// The reference-kernel device (stateless; shared by everyone). Its
// executables run cpu::RunGraph(graph, plan, inputs), the interpreter's own
// path, and it accumulates with cpu::AccumulateGradient.
std::shared_ptr<backends::Device> CpuDevice();

}  // namespace tandem::cpu

#endif  // TANDEM_BACKENDS_CPU_CPU_DEVICE_H_
