#include "actor/input_staging.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "actor/host_staging.h"

namespace tandem::actor {
InputStaging::~InputStaging() {
  // A copy still queued reads a block: free them only after the stream.
  if (blocks_[0].in_flight || blocks_[1].in_flight) {
    memory_.SynchronizeStream(absl::Now() + kStagingTeardownWait).IgnoreError();
  }
  for (Block& block : blocks_) {
    memory_.FreeHostStaging(block.data);
    if (block.copied.id != 0) memory_.DestroyEvent(block.copied).IgnoreError();
  }
}

absl::Status InputStaging::AwaitCopied(Block& block, absl::Time deadline) {
  if (!block.in_flight) return absl::OkStatus();
  absl::StatusOr<bool> done = memory_.QueryEvent(block.copied);
  if (!done.ok()) return done.status();
  if (!*done) {
    // The device is more than a step behind the host: wait for its stream
    // (which also ends the wait at once on a device that has failed).
    absl::Status status = memory_.SynchronizeStream(deadline);
    if (status.code() == absl::StatusCode::kDeadlineExceeded) {
      return absl::DeadlineExceededError(absl::StrCat(memory_.name(),
                                                      ": the device is still copying the inputs of two steps ago (it "
                                                      "is more than a step behind the host): ",
                                                      status.message()));
    }
    if (!status.ok()) return status;
  }
  block.in_flight = false;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<backends::DeviceTensor>> InputStaging::Upload(
    absl::Span<const ir::HostTensor* const> tensors, absl::Time deadline) {
  std::vector<backends::DeviceTensor> uploaded;
  if (tensors.empty()) return uploaded;
  int64_t total = 0;
  for (const ir::HostTensor* tensor : tensors) total += StagedBytes(tensor->num_bytes());
  Block& block = blocks_[next_];
  if (absl::Status status = AwaitCopied(block, deadline); !status.ok()) return status;
  if (block.bytes < total) {
    memory_.FreeHostStaging(block.data);
    block.data = nullptr;
    block.bytes = 0;
    absl::StatusOr<void*> data = memory_.AllocateHostStaging(total);
    if (!data.ok()) return data.status();
    block.data = static_cast<std::byte*>(*data);
    block.bytes = total;
  }
  if (block.copied.id == 0) {
    absl::StatusOr<backends::DeviceEvent> event = memory_.CreateIpcEvent();
    if (!event.ok()) return event.status();
    block.copied = *event;
  }
  uploaded.reserve(tensors.size());
  absl::Status status;
  int64_t offset = 0;
  for (const ir::HostTensor* tensor : tensors) {
    absl::StatusOr<backends::DeviceTensor> device = backends::AllocateDeviceTensor(memory_, tensor->type());
    if (!device.ok()) {
      status = device.status();
      break;
    }
    const int64_t bytes = tensor->num_bytes();
    std::byte* staged = block.data + offset;
    std::memcpy(staged, tensor->data(), static_cast<size_t>(bytes));
    status = memory_.CopyFromHostAsync(device->address(), staged, bytes);
    block.in_flight = true;
    if (!status.ok()) break;
    offset += StagedBytes(bytes);
    uploaded.push_back(*std::move(device));
  }
  if (block.in_flight) {
    // Marks the block busy until its copies have run, failed step or not.
    if (absl::Status recorded = memory_.RecordEvent(block.copied); !recorded.ok() && status.ok()) status = recorded;
  }
  next_ = 1 - next_;
  if (!status.ok()) return status;
  return uploaded;
}

}  // namespace tandem::actor
