// Helpers shared by the CUDA IPC tests (the fake device's and the real
// GPU's): the tensors they send, moved to and from a DeviceMemory and
// checked bitwise.
#ifndef TANDEM_TESTS_ACTOR_IPC_TEST_UTIL_H_
#define TANDEM_TESTS_ACTOR_IPC_TEST_UTIL_H_

#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "backends/device_memory.h"
#include "ir/host_tensor.h"
#include "tests/actor/transport_test_util.h"

namespace tandem::actor::testing {

// MixedTensors and 3000 patterned i32 values: several ring alignments.
inline std::vector<ir::HostTensor> IpcTestTensors(int seed) {
  std::vector<ir::HostTensor> tensors = MixedTensors(seed);
  tensors.push_back(Pattern(seed, 3000));
  return tensors;
}

inline absl::StatusOr<std::vector<backends::DeviceTensor>> Upload(backends::DeviceMemory& memory,
                                                                  const std::vector<ir::HostTensor>& tensors) {
  std::vector<backends::DeviceTensor> device;
  for (const ir::HostTensor& t : tensors) {
    absl::StatusOr<backends::DeviceTensor> d = backends::CopyToDevice(memory, t, In(absl::Seconds(10)));
    if (!d.ok()) return d.status();
    device.push_back(*std::move(d));
  }
  return device;
}

// OK when the device tensors hold exactly `expected` (types and bits).
inline absl::Status CheckTensors(backends::DeviceMemory& memory, const std::vector<backends::DeviceTensor>& got,
                                 const std::vector<ir::HostTensor>& expected) {
  if (got.size() != expected.size()) {
    return absl::InternalError(absl::StrCat(got.size(), " tensors, expected ", expected.size()));
  }
  for (size_t i = 0; i < got.size(); ++i) {
    absl::StatusOr<ir::HostTensor> host = backends::CopyToHost(memory, got[i], In(absl::Seconds(10)));
    if (!host.ok()) return host.status();
    if (!host->BitwiseEquals(expected[i])) {
      return absl::InternalError(absl::StrCat("tensor ", i, " differs: ", ir::DescribeTensor(*host), " vs ",
                                              ir::DescribeTensor(expected[i])));
    }
  }
  return absl::OkStatus();
}

}  // namespace tandem::actor::testing

#endif  // TANDEM_TESTS_ACTOR_IPC_TEST_UTIL_H_
