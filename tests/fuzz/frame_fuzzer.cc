// Fuzz target: the data plane's frame parser (ValidateFrameHeader, then
// ParseFrameTensors), which reads what a peer wrote into a shared-memory
// ring or sent over TCP. The input is the frame's bytes from its header on.
// Beyond not crashing: a refusal says what is wrong; every tensor of a frame
// that parses lies inside the frame, aligned, in order and without overlap,
// with as many bytes as its type.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "actor/data_plane_frame.h"
#include "tests/fuzz/fuzz_support.h"

namespace tandem::actor {
namespace {

constexpr int32_t kPeer = 1;
constexpr int32_t kSelf = 0;
// The frames a receiver accepts at most: a 1 MiB ring here.
constexpr uint64_t kMaxFrameBytes = uint64_t{1} << 20;

void Run(const uint8_t* data, size_t size) {
  FrameHeader header;
  if (size < sizeof(header)) return;
  std::memcpy(&header, data, sizeof(header));
  if (!ValidateFrameHeader(header, kPeer, kSelf, kMaxFrameBytes).ok()) return;
  // The descriptors follow the header, as far as the input has them (the
  // rest zero, as a ring's unwritten bytes are).
  std::vector<TensorDescriptor> descriptors(header.num_tensors);
  const size_t available = size - sizeof(header);
  const size_t wanted = descriptors.size() * sizeof(TensorDescriptor);
  if (wanted > 0) std::memcpy(descriptors.data(), data + sizeof(header), std::min(available, wanted));
  absl::StatusOr<std::vector<FrameTensor>> tensors = ParseFrameTensors(header, descriptors.data(), kPeer);
  if (!tensors.ok()) {
    fuzz::FuzzCheck(!tensors.status().message().empty(), "a refusal without a reason");
    return;
  }
  fuzz::FuzzCheck(tensors->size() == header.num_tensors, "a tensor count other than the header's");
  uint64_t end = FrameHeadBytes(header.num_tensors);
  for (const FrameTensor& tensor : *tensors) {
    fuzz::FuzzCheck(tensor.offset % kFrameAlignment == 0, "a tensor not 64-byte aligned");
    fuzz::FuzzCheck(tensor.offset >= end, "tensors overlap or precede the descriptors");
    fuzz::FuzzCheck(tensor.bytes <= header.frame_bytes && tensor.offset <= header.frame_bytes - tensor.bytes,
                    "a tensor past the frame's end");
    fuzz::FuzzCheck(static_cast<uint64_t>(tensor.type.num_bytes()) == tensor.bytes,
                    "a tensor's bytes disagree with its type");
    end = tensor.offset + tensor.bytes;
  }
}

}  // namespace
}  // namespace tandem::actor

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tandem::actor::Run(data, size);
  return 0;
}
