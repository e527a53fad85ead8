#include "actor/input_staging.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace tandem::actor {
namespace {

// How long the destructor waits for copies still on the stream.
constexpr absl::Duration kTeardownWait = absl::Seconds(10);
// How often a wait for a block asks the device (GPU-NOTES: poll at most
// every ~20 us, never back off to a millisecond).
constexpr absl::Duration kPollInterval = absl::Microseconds(20);

int64_t Aligned(int64_t bytes) { return (bytes + 255) / 256 * 256; }

}  // namespace

InputStaging::~InputStaging() {
  const absl::Time deadline = absl::Now() + kTeardownWait;
  for (Block& block : blocks_) {
    // A copy still queued reads the block: free it only after that.
    if (!AwaitCopied(block, deadline).ok()) memory_.SynchronizeStream(deadline).IgnoreError();
    memory_.FreeHostStaging(block.data);
    if (block.copied.id != 0) memory_.DestroyEvent(block.copied).IgnoreError();
  }
}

absl::Status InputStaging::AwaitCopied(Block& block, absl::Time deadline) {
  if (!block.in_flight) return absl::OkStatus();
  while (true) {
    absl::StatusOr<bool> done = memory_.QueryEvent(block.copied);
    if (!done.ok()) return done.status();
    if (*done) break;
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          memory_.name(), ": the device is still copying the inputs of two steps ago (it is more than a step "
                          "behind the host)"));
    }
    absl::SleepFor(kPollInterval);
  }
  block.in_flight = false;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<backends::DeviceTensor>> InputStaging::Upload(
    absl::Span<const ir::HostTensor* const> tensors, absl::Time deadline) {
  std::vector<backends::DeviceTensor> uploaded;
  if (tensors.empty()) return uploaded;
  int64_t total = 0;
  for (const ir::HostTensor* tensor : tensors) total += Aligned(tensor->num_bytes());
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
    offset += Aligned(bytes);
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
