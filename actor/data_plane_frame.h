// The wire format shared by the process data planes (shm_transport.h,
// tcp_transport.h): one self-describing frame per message.
//
//   [FrameHeader 64 B][TensorDescriptor 96 B x n][zero pad to 64 B]
//   [tensor 0 bytes][pad to 64 B][tensor 1 bytes][pad] ...
//
// Every offset is relative to the frame start and 64-byte aligned, so a
// receiver that finds the frame at a 64-byte aligned address (shared memory)
// can hand out tensors that point into it. The frame is validated before any
// byte of it is trusted: a bad magic, a sender or receiver other than the
// expected ones, an unknown dtype, a size that disagrees with the shape, or
// anything reaching past the frame is a DataLoss error naming the peer.
//
// Pure functions and plain structs; thread-compatible.
#ifndef TANDEM_ACTOR_DATA_PLANE_FRAME_H_
#define TANDEM_ACTOR_DATA_PLANE_FRAME_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ir/host_tensor.h"

namespace tandem::actor {

inline constexpr uint32_t kFrameMagic = 0x54444d46;    // "TDMF"
inline constexpr uint32_t kPaddingMagic = 0x54444d50;  // "TDMP": ring filler, no message
inline constexpr uint32_t kMaxFrameTensors = 4096;
inline constexpr int kMaxFrameRank = 8;
inline constexpr uint64_t kFrameAlignment = 64;

struct FrameHeader {
  uint32_t magic = 0;
  uint32_t num_tensors = 0;
  int32_t sender = 0;
  int32_t receiver = 0;
  uint64_t tag = 0;
  uint64_t frame_bytes = 0;  // the whole frame, header to last pad
  uint64_t reserved[4] = {};
};
static_assert(sizeof(FrameHeader) == 64);

struct TensorDescriptor {
  uint8_t dtype = 0;
  uint8_t rank = 0;
  uint8_t reserved0[6] = {};
  int64_t dims[kMaxFrameRank] = {};
  uint64_t offset = 0;  // from the frame start
  uint64_t bytes = 0;
  uint64_t reserved1 = 0;
};
static_assert(sizeof(TensorDescriptor) == 96);

inline constexpr uint64_t AlignFrame(uint64_t bytes) {
  return (bytes + kFrameAlignment - 1) / kFrameAlignment * kFrameAlignment;
}

// The header and descriptors of a frame about to be written.
struct FrameLayout {
  FrameHeader header;
  std::vector<TensorDescriptor> descriptors;
  uint64_t head_bytes = 0;  // header + descriptors, padded to 64 B
};

// Lays out a frame for `tensors`. InvalidArgument for a rank above 8, more
// than 4096 tensors or an undefined tensor.
absl::StatusOr<FrameLayout> PlanFrame(int32_t sender, int32_t receiver, uint64_t tag,
                                      const std::vector<ir::HostTensor>& tensors);

// Writes the header, the descriptors and the zero pad (layout.head_bytes).
void WriteFrameHead(const FrameLayout& layout, std::byte* destination);

// Bytes of header + descriptors for `num_tensors`, padded to 64 B.
uint64_t FrameHeadBytes(uint32_t num_tensors);

// Checks a header read from `peer`: magic, sender == peer, receiver == self,
// tensor count, 64-byte aligned frame_bytes within [head, max_frame_bytes].
absl::Status ValidateFrameHeader(const FrameHeader& header, int32_t peer, int32_t self,
                                 uint64_t max_frame_bytes);

// One tensor of a validated frame.
struct FrameTensor {
  ir::TensorType type;
  uint64_t offset = 0;
  uint64_t bytes = 0;
};

// Checks the descriptors of a frame whose header passed ValidateFrameHeader:
// known dtype, rank <= 8, non-negative dims, bytes == elements * size,
// aligned ascending non-overlapping ranges inside the frame.
absl::StatusOr<std::vector<FrameTensor>> ParseFrameTensors(const FrameHeader& header,
                                                           const TensorDescriptor* descriptors,
                                                           int32_t peer);

}  // namespace tandem::actor

#endif  // TANDEM_ACTOR_DATA_PLANE_FRAME_H_
