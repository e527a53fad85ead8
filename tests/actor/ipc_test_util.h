// Helpers shared by the CUDA IPC tests (the fake device's and the real
// GPU's): children reporting failures, a byte exchange over a socketpair,
// and test tensors moved to and from a DeviceMemory and checked bitwise.
#ifndef TANDEM_TESTS_ACTOR_IPC_TEST_UTIL_H_
#define TANDEM_TESTS_ACTOR_IPC_TEST_UTIL_H_

#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "actor/device_memory.h"
#include "ir/host_tensor.h"

namespace tandem::actor::testing {

inline absl::Time In(absl::Duration timeout) { return absl::Now() + timeout; }

// Reports why a child fails and returns its exit code.
inline int ChildFailure(int code, absl::string_view why) {
  std::fprintf(stderr, "child failure %d: %s\n", code, std::string(why).c_str());
  return code;
}

// Blocking byte exchange over the socketpair, for handles and go-aheads.
inline bool WriteAll(int socket, const void* data, size_t bytes) {
  return write(socket, data, bytes) == static_cast<ssize_t>(bytes);
}
inline bool ReadAll(int socket, void* data, size_t bytes) {
  size_t done = 0;
  while (done < bytes) {
    const ssize_t n = read(socket, static_cast<char*>(data) + done, bytes - done);
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// `elements` i32 values that depend on `seed` and the position.
inline ir::HostTensor Pattern(uint64_t seed, int64_t elements) {
  ir::HostTensor t(ir::TensorType{ir::DType::kI32, {elements}});
  for (int64_t i = 0; i < elements; ++i) t.i32()[i] = static_cast<int32_t>((seed * 1000003 + i) * 2654435761u);
  return t;
}

// Tensors of several dtypes and shapes, one of them empty.
inline std::vector<ir::HostTensor> MixedTensors(int seed) {
  std::vector<ir::HostTensor> tensors;
  tensors.push_back(ir::HostTensor::FromFloats({2, 3}, {0.5f * seed, -1, 2, 3.25f, 1e-20f, 7}));
  tensors.push_back(ir::HostTensor::FromInts({5}, {seed, -2, 3, 1 << 30, 0}));
  ir::HostTensor half(ir::TensorType{ir::DType::kBF16, {4, 1, 3}});
  for (int64_t i = 0; i < half.num_bytes(); ++i) half.data()[i] = std::byte(static_cast<uint8_t>(i * 37 + seed));
  tensors.push_back(half);
  tensors.push_back(ir::HostTensor::Scalar(static_cast<float>(seed)));
  tensors.push_back(ir::HostTensor(ir::TensorType{ir::DType::kF16, {0, 4}}));
  tensors.push_back(Pattern(seed, 3000));
  return tensors;
}

inline absl::StatusOr<std::vector<DeviceTensor>> Upload(DeviceMemory& memory, const std::vector<ir::HostTensor>& tensors) {
  std::vector<DeviceTensor> device;
  for (const ir::HostTensor& t : tensors) {
    absl::StatusOr<DeviceTensor> d = CopyToDevice(memory, t, In(absl::Seconds(10)));
    if (!d.ok()) return d.status();
    device.push_back(*std::move(d));
  }
  return device;
}

// OK when the device tensors hold exactly `expected` (types and bits).
inline absl::Status CheckTensors(DeviceMemory& memory, const std::vector<DeviceTensor>& got,
                          const std::vector<ir::HostTensor>& expected) {
  if (got.size() != expected.size()) {
    return absl::InternalError(absl::StrCat(got.size(), " tensors, expected ", expected.size()));
  }
  for (size_t i = 0; i < got.size(); ++i) {
    absl::StatusOr<ir::HostTensor> host = CopyToHost(memory, got[i], In(absl::Seconds(10)));
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
