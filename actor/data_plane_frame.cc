#include "actor/data_plane_frame.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "ir/limits.h"

namespace tandem::actor {
namespace {

absl::Status Malformed(int32_t peer, absl::string_view what) {
  return absl::DataLossError(absl::StrCat("malformed frame from actor ", peer, ": ", what));
}

}  // namespace

uint64_t FrameHeadBytes(uint32_t num_tensors) {
  return AlignFrame(sizeof(FrameHeader) + uint64_t{num_tensors} * sizeof(TensorDescriptor));
}

absl::StatusOr<FrameLayout> PlanFrame(int32_t sender, int32_t receiver, uint64_t tag,
                                      const std::vector<ir::HostTensor>& tensors) {
  if (tensors.size() > kMaxFrameTensors) {
    return absl::InvalidArgumentError(
        absl::StrCat("actor ", sender, " -> actor ", receiver, " tag ", tag, ": ", tensors.size(),
                     " tensors in one message; at most ", kMaxFrameTensors));
  }
  FrameLayout layout;
  layout.header.magic = kFrameMagic;
  layout.header.num_tensors = static_cast<uint32_t>(tensors.size());
  layout.header.sender = sender;
  layout.header.receiver = receiver;
  layout.header.tag = tag;
  layout.head_bytes = FrameHeadBytes(layout.header.num_tensors);
  uint64_t offset = layout.head_bytes;
  for (const ir::HostTensor& tensor : tensors) {
    if (!tensor.defined() || tensor.shape().size() > static_cast<size_t>(kMaxFrameRank)) {
      return absl::InvalidArgumentError(absl::StrCat("actor ", sender, " -> actor ", receiver, " tag ", tag,
                                                     ": tensor is undefined or of rank above ", kMaxFrameRank));
    }
    TensorDescriptor descriptor;
    descriptor.dtype = static_cast<uint8_t>(tensor.dtype());
    descriptor.rank = static_cast<uint8_t>(tensor.shape().size());
    for (size_t i = 0; i < tensor.shape().size(); ++i) descriptor.dims[i] = tensor.shape()[i];
    descriptor.offset = offset;
    descriptor.bytes = static_cast<uint64_t>(tensor.num_bytes());
    offset += AlignFrame(descriptor.bytes);
    layout.descriptors.push_back(descriptor);
  }
  layout.header.frame_bytes = offset;
  return layout;
}

void WriteFrameHead(const FrameLayout& layout, std::byte* destination) {
  std::memset(destination, 0, layout.head_bytes);
  std::memcpy(destination, &layout.header, sizeof(FrameHeader));
  if (!layout.descriptors.empty()) {
    std::memcpy(destination + sizeof(FrameHeader), layout.descriptors.data(),
                layout.descriptors.size() * sizeof(TensorDescriptor));
  }
}

absl::Status ValidateFrameHeader(const FrameHeader& header, int32_t peer, int32_t self, uint64_t max_frame_bytes) {
  if (header.magic != kFrameMagic) return Malformed(peer, absl::StrCat("bad magic 0x", absl::Hex(header.magic)));
  if (header.sender != peer || header.receiver != self) {
    return Malformed(peer, absl::StrCat("addressed from actor ", header.sender, " to actor ", header.receiver,
                                        ", expected ", peer, " -> ", self));
  }
  if (header.num_tensors > kMaxFrameTensors) {
    return Malformed(peer, absl::StrCat(header.num_tensors, " tensors (at most ", kMaxFrameTensors, ")"));
  }
  if (header.frame_bytes % kFrameAlignment != 0 || header.frame_bytes < FrameHeadBytes(header.num_tensors) ||
      header.frame_bytes > max_frame_bytes) {
    return Malformed(peer, absl::StrCat("tag ", header.tag, ": frame size ", header.frame_bytes,
                                        " is unaligned, too small or above the limit of ", max_frame_bytes));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<FrameTensor>> ParseFrameTensors(const FrameHeader& header,
                                                           const TensorDescriptor* descriptors, int32_t peer) {
  std::vector<FrameTensor> tensors;
  tensors.reserve(header.num_tensors);
  uint64_t next = FrameHeadBytes(header.num_tensors);
  for (uint32_t i = 0; i < header.num_tensors; ++i) {
    TensorDescriptor d;
    std::memcpy(&d, descriptors + i, sizeof(d));
    const std::string where = absl::StrCat("tag ", header.tag, " tensor ", i, ": ");
    if (d.dtype > static_cast<uint8_t>(ir::DType::kF16)) {
      return Malformed(peer, absl::StrCat(where, "unknown dtype ", d.dtype));
    }
    if (d.rank > kMaxFrameRank) return Malformed(peer, absl::StrCat(where, "rank ", d.rank));
    FrameTensor tensor;
    tensor.type.dtype = static_cast<ir::DType>(d.dtype);
    tensor.type.shape.assign(d.dims, d.dims + d.rank);
    // The shape's bytes, bounded (ir/limits.h) before any product is taken:
    // a wrapped count could agree with a forged descriptor's.
    absl::StatusOr<int64_t> expected = ir::CheckedNumBytes(tensor.type);
    if (!expected.ok()) return Malformed(peer, absl::StrCat(where, expected.status().message()));
    if (d.bytes != static_cast<uint64_t>(*expected)) {
      return Malformed(peer, absl::StrCat(where, d.bytes, " bytes for ", *expected, " expected"));
    }
    if (d.offset != next || d.offset > header.frame_bytes || header.frame_bytes - d.offset < AlignFrame(d.bytes)) {
      return Malformed(peer, absl::StrCat(where, "bytes [", d.offset, ", +", d.bytes, ") outside the frame of ",
                                          header.frame_bytes, " bytes"));
    }
    next = d.offset + AlignFrame(d.bytes);
    tensor.offset = d.offset;
    tensor.bytes = d.bytes;
    tensors.push_back(std::move(tensor));
  }
  if (next != header.frame_bytes) {
    return Malformed(peer, absl::StrCat("tag ", header.tag, ": frame of ", header.frame_bytes, " bytes holds ",
                                        next));
  }
  return tensors;
}

}  // namespace tandem::actor
