// The data plane's frame layout and its parser: a frame PlanFrame lays out
// parses back to the same tensors, and a descriptor a peer could forge to
// overflow a size is refused before anything is sized from it.
#include "actor/data_plane_frame.h"

#include <cstdint>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/host_tensor.h"

namespace tandem::actor {
namespace {

using ::testing::HasSubstr;

constexpr int32_t kSender = 1;
constexpr int32_t kReceiver = 0;
constexpr uint64_t kMaxFrameBytes = uint64_t{1} << 20;

// A frame of one f32 tensor whose descriptor says `dims`, `bytes` long,
// right after the head (where a well-formed one would lie).
struct OneTensorFrame {
  FrameHeader header;
  TensorDescriptor descriptor;
};

OneTensorFrame ForgedFrame(std::vector<int64_t> dims, uint64_t bytes) {
  OneTensorFrame frame;
  frame.header.magic = kFrameMagic;
  frame.header.num_tensors = 1;
  frame.header.sender = kSender;
  frame.header.receiver = kReceiver;
  frame.header.tag = 7;
  frame.header.frame_bytes = FrameHeadBytes(1) + AlignFrame(bytes);
  frame.descriptor.dtype = static_cast<uint8_t>(ir::DType::kF32);
  frame.descriptor.rank = static_cast<uint8_t>(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) frame.descriptor.dims[i] = dims[i];
  frame.descriptor.offset = FrameHeadBytes(1);
  frame.descriptor.bytes = bytes;
  return frame;
}

TEST(DataPlaneFrame, APlannedFrameParsesBackToItsTensors) {
  const std::vector<ir::HostTensor> tensors = {ir::HostTensor::FromFloats({2, 3}, {1, 2, 3, 4, 5, 6}),
                                               ir::HostTensor::FromInts({5}, {1, 2, 3, 4, 5}),
                                               ir::HostTensor::FromFloats({0, 4}, {})};
  absl::StatusOr<FrameLayout> layout = PlanFrame(kSender, kReceiver, 9, tensors);
  ASSERT_TRUE(layout.ok()) << layout.status();
  ASSERT_TRUE(ValidateFrameHeader(layout->header, kSender, kReceiver, kMaxFrameBytes).ok());
  absl::StatusOr<std::vector<FrameTensor>> parsed =
      ParseFrameTensors(layout->header, layout->descriptors.data(), kSender);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    EXPECT_EQ((*parsed)[i].type, tensors[i].type()) << i;
    EXPECT_EQ((*parsed)[i].bytes, static_cast<uint64_t>(tensors[i].num_bytes())) << i;
    EXPECT_EQ((*parsed)[i].offset % kFrameAlignment, 0u) << i;
  }
}

// 2^62 f32 elements are 2^64 bytes: the byte count wraps to 0 in 64 bits, so
// a descriptor saying 0 bytes agreed with it, and the receiver went on to
// size the tensor as a signed product that overflows.
TEST(DataPlaneFrame, AnExtentWhoseByteSizeWrapsIsRefused) {
  const OneTensorFrame frame = ForgedFrame({int64_t{1} << 62}, 0);
  ASSERT_TRUE(ValidateFrameHeader(frame.header, kSender, kReceiver, kMaxFrameBytes).ok());
  absl::StatusOr<std::vector<FrameTensor>> parsed = ParseFrameTensors(frame.header, &frame.descriptor, kSender);
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(parsed.status().message()), HasSubstr("malformed frame from actor 1"));
  EXPECT_THAT(std::string(parsed.status().message()), HasSubstr("elements a tensor may have"));
}

TEST(DataPlaneFrame, BytesThatDisagreeWithTheShapeAreRefused) {
  // Each extent is small; their product (2^33 f32 elements) is not 64 bytes.
  const OneTensorFrame frame = ForgedFrame({1 << 11, 1 << 11, 1 << 11}, 64);
  absl::StatusOr<std::vector<FrameTensor>> parsed = ParseFrameTensors(frame.header, &frame.descriptor, kSender);
  ASSERT_FALSE(parsed.ok());
  EXPECT_THAT(std::string(parsed.status().message()), HasSubstr("64 bytes for 34359738368 expected"));
}

TEST(DataPlaneFrame, ATensorPastTheFramesEndIsRefused) {
  OneTensorFrame frame = ForgedFrame({16}, 64);
  frame.header.frame_bytes -= kFrameAlignment;
  absl::StatusOr<std::vector<FrameTensor>> parsed = ParseFrameTensors(frame.header, &frame.descriptor, kSender);
  ASSERT_FALSE(parsed.ok());
  EXPECT_THAT(std::string(parsed.status().message()), HasSubstr("outside the frame of 192 bytes"));
}

TEST(DataPlaneFrame, AZeroExtentEmptiesATensorWhateverItsOtherExtents) {
  const OneTensorFrame frame = ForgedFrame({int64_t{1} << 40, 0}, 0);
  absl::StatusOr<std::vector<FrameTensor>> parsed = ParseFrameTensors(frame.header, &frame.descriptor, kSender);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->size(), 1u);
  EXPECT_EQ((*parsed)[0].bytes, 0u);
  EXPECT_EQ((*parsed)[0].type.num_bytes(), 0);
}

TEST(DataPlaneFrame, ANegativeExtentIsRefused) {
  const OneTensorFrame frame = ForgedFrame({-4}, 0);
  absl::StatusOr<std::vector<FrameTensor>> parsed = ParseFrameTensors(frame.header, &frame.descriptor, kSender);
  ASSERT_FALSE(parsed.ok());
  EXPECT_THAT(std::string(parsed.status().message()), HasSubstr("shape [-4] has a negative extent"));
}

}  // namespace
}  // namespace tandem::actor
