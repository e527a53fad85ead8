#include "actor/device_all_reduce.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "actor/collective.h"
#include "ir/all_reduce.h"

namespace tandem::actor {

absl::StatusOr<backends::DeviceTensor> DeviceAllReduce::Slice(const std::vector<backends::DeviceTensor>& pieces,
                                                              int64_t begin, int64_t length) {
  absl::StatusOr<backends::DeviceTensor> slice =
      backends::AllocateDeviceTensor(memory_, {ir::DType::kF32, {length}});
  if (!slice.ok()) return slice.status();
  const int64_t end = begin + length;
  int64_t at = 0;  // where the piece starts in the concatenation
  for (const backends::DeviceTensor& piece : pieces) {
    const int64_t piece_end = at + piece.type.num_elements();
    const int64_t from = std::max(begin, at), to = std::min(end, piece_end);
    if (from < to) {
      const backends::DeviceAddress destination = slice->address() + static_cast<uint64_t>((from - begin) * 4);
      const backends::DeviceAddress source = piece.address() + static_cast<uint64_t>((from - at) * 4);
      if (absl::Status status = memory_.CopyAsync(destination, source, (to - from) * 4); !status.ok()) return status;
    }
    at = piece_end;
  }
  return slice;
}

absl::Status DeviceAllReduce::Start(Transport& transport, uint64_t tag, const std::vector<int32_t>& group,
                                    int32_t self, const std::vector<backends::DeviceTensor>& tensors) {
  if (tag > kMaxTag) return absl::InvalidArgumentError(absl::StrCat("all-reduce tag ", tag, " is too large"));
  if (started_.contains(tag)) return absl::InvalidArgumentError(absl::StrCat("all-reduce ", tag, " started twice"));
  auto me = std::find(group.begin(), group.end(), self);
  if (me == group.end()) {
    return absl::InvalidArgumentError(absl::StrCat("actor ", self, " is not in ", DescribeGroup(group)));
  }
  Started started{.group = group, .rank = static_cast<int32_t>(me - group.begin())};
  for (const backends::DeviceTensor& tensor : tensors) {
    if (!tensor.defined() || tensor.type.dtype != ir::DType::kF32 || &tensor.storage->memory() != &memory_) {
      return absl::InvalidArgumentError(absl::StrCat("all-reduce ", tag, ": a bucket tensor that is not f32 in ",
                                                     memory_.name()));
    }
    started.types.push_back(tensor.type);
    started.elements += tensor.type.num_elements();
  }
  const auto size = static_cast<int32_t>(group.size());
  for (int32_t rank = 0; rank < size; ++rank) {
    const ir::Shard shard = ir::ShardOf(started.elements, size, rank);
    absl::StatusOr<backends::DeviceTensor> piece = Slice(tensors, shard.begin, shard.length);
    if (!piece.ok()) return piece.status();
    if (rank == started.rank) {
      started.own_shard = *std::move(piece);
    } else if (absl::Status status = transport.SendDevice(group[rank], ReduceTag(tag, 0), {*std::move(piece)});
               !status.ok()) {
      return status;
    }
  }
  started_.emplace(tag, std::move(started));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<backends::DeviceTensor>> DeviceAllReduce::Finish(Transport& transport, uint64_t tag,
                                                                            absl::Time deadline) {
  auto it = started_.find(tag);
  if (it == started_.end()) return absl::FailedPreconditionError(absl::StrCat("all-reduce ", tag, " never started"));
  Started started = std::move(it->second);
  started_.erase(it);
  const auto size = static_cast<int32_t>(started.group.size());
  const ir::Shard own = ir::ShardOf(started.elements, size, started.rank);
  // Received: one f32 vector of this member's shard length.
  auto receive = [&](int32_t rank, int phase, int64_t length) -> absl::StatusOr<backends::DeviceTensor> {
    absl::StatusOr<std::vector<backends::DeviceTensor>> got =
        transport.ReceiveDevice(started.group[rank], ReduceTag(tag, phase), deadline);
    if (!got.ok()) return got.status();
    if (got->size() != 1 || (*got)[0].type != ir::TensorType{ir::DType::kF32, {length}}) {
      return absl::DataLossError(absl::StrCat("all-reduce ", tag, ": actor ", started.group[rank], " sent ",
                                              got->size(), " tensors, not one f32[", length, "]"));
    }
    return (*got)[0];
  };
  // Phase 1's sum, in replica order: ((s_0 + s_1) + s_2) + ...
  backends::TensorHandle sum;
  for (int32_t rank = 0; rank < size; ++rank) {
    backends::DeviceTensor copy;
    if (rank == started.rank) {
      copy = started.own_shard;
    } else {
      absl::StatusOr<backends::DeviceTensor> received = receive(rank, 0, own.length);
      if (!received.ok()) return received.status();
      copy = *std::move(received);
    }
    if (rank == 0) {
      sum = backends::TensorHandle(std::move(copy));
      continue;
    }
    absl::StatusOr<backends::TensorHandle> added = device_.Accumulate(sum, backends::TensorHandle(std::move(copy)));
    if (!added.ok()) return added.status();
    sum = *std::move(added);
  }
  // Phase 2: every owner's sum to every member.
  std::vector<backends::DeviceTensor> sums(static_cast<size_t>(size));
  sums[started.rank] = sum.device();
  for (int32_t rank = 0; rank < size; ++rank) {
    if (rank == started.rank) continue;
    if (absl::Status status = transport.SendDevice(started.group[rank], ReduceTag(tag, 1), {sum.device()});
        !status.ok()) {
      return status;
    }
  }
  for (int32_t rank = 0; rank < size; ++rank) {
    if (rank == started.rank) continue;
    absl::StatusOr<backends::DeviceTensor> received =
        receive(rank, 1, ir::ShardOf(started.elements, size, rank).length);
    if (!received.ok()) return received.status();
    sums[rank] = *std::move(received);
  }
  // The reduced bucket, cut back into its tensors.
  std::vector<backends::DeviceTensor> reduced;
  int64_t offset = 0;
  for (const ir::TensorType& type : started.types) {
    absl::StatusOr<backends::DeviceTensor> tensor = Slice(sums, offset, type.num_elements());
    if (!tensor.ok()) return tensor.status();
    tensor->type = type;
    offset += type.num_elements();
    reduced.push_back(*std::move(tensor));
  }
  return reduced;
}

}  // namespace tandem::actor
