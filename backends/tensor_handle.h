// TensorHandle: what an executor buffer holds (actor/executor.h): a tensor in
// host memory (ir::HostTensor) or in a device's memory (DeviceTensor,
// device_memory.h). Which one follows from the actor's Device: a
// device-resident device (Device::memory() set) keeps every buffer on the
// device, any other device keeps host tensors. Copies share storage, as the
// tensors they hold do; an empty handle holds neither.
#ifndef TANDEM_BACKENDS_TENSOR_HANDLE_H_
#define TANDEM_BACKENDS_TENSOR_HANDLE_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "backends/device_memory.h"
#include "ir/dtype.h"
#include "ir/host_tensor.h"

namespace tandem::backends {

class TensorHandle {
 public:
  TensorHandle() = default;
  TensorHandle(ir::HostTensor host) : host_(std::move(host)) {}        // NOLINT: a host tensor is a handle
  TensorHandle(DeviceTensor device) : device_(std::move(device)) {}    // NOLINT: so is a device tensor

  bool defined() const { return host_.defined() || device_.defined(); }
  bool on_device() const { return device_.defined(); }
  // Requires defined().
  const ir::TensorType& type() const { return on_device() ? device_.type : host_.type(); }
  int64_t num_bytes() const { return defined() ? type().num_bytes() : 0; }

  // The tensor, when it is of that kind (an undefined one otherwise).
  const ir::HostTensor& host() const { return host_; }
  const DeviceTensor& device() const { return device_; }

 private:
  ir::HostTensor host_;
  DeviceTensor device_;
};

// Named handles: a function call's inputs or outputs.
using HandleMap = std::map<std::string, TensorHandle>;

}  // namespace tandem::backends

#endif  // TANDEM_BACKENDS_TENSOR_HANDLE_H_
