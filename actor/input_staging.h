// InputStaging: how a device-resident actor's step inputs (token ids,
// targets, a microbatch's features) reach the device without the host
// waiting for it. Upload copies all of a step's inputs into pinned host
// staging (DeviceMemory::AllocateHostStaging) and enqueues one asynchronous
// copy per input (CopyFromHostAsync) on the device's stream into a fresh
// device tensor: the step's runs, later on the same stream, see the bytes,
// and the host goes on at once, while the device may still be running the
// previous step. (Uploading one by one, each copy waited for the stream:
// the first for the whole previous step, the others for a round trip each.)
//
// The staging alternates between two blocks, each kept from step to step (a
// steady step allocates no staging) and grown when a step's inputs outgrow
// it. A block is rewritten only after the copies out of it have run, which
// an event recorded after them tells: two steps later that is so unless the
// device is more than a step behind the host, and then Upload waits for its
// stream (bounded by its deadline).
//
// Ownership and threading: borrows the memory (which must outlive it), owns
// its blocks and events (the destructor waits, bounded, for copies still on
// the stream before freeing them). One thread.
#ifndef TANDEM_ACTOR_INPUT_STAGING_H_
#define TANDEM_ACTOR_INPUT_STAGING_H_

#include <array>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "backends/device_memory.h"
#include "ir/host_tensor.h"

namespace tandem::actor {

class InputStaging {
 public:
  explicit InputStaging(backends::DeviceMemory& memory) : memory_(memory) {}
  InputStaging(const InputStaging&) = delete;
  InputStaging& operator=(const InputStaging&) = delete;
  ~InputStaging();

  // Device copies of `tensors`, in order, valid in stream order. Waits only
  // while the block it takes still feeds copies (until `deadline`:
  // DeadlineExceeded); the memory's errors (ResourceExhausted for staging
  // or device memory).
  absl::StatusOr<std::vector<backends::DeviceTensor>> Upload(absl::Span<const ir::HostTensor* const> tensors,
                                                             absl::Time deadline);

  // Bytes of staging held.
  int64_t staging_bytes() const { return blocks_[0].bytes + blocks_[1].bytes; }

 private:
  struct Block {
    std::byte* data = nullptr;
    int64_t bytes = 0;
    backends::DeviceEvent copied;  // recorded after the copies out of it
    bool in_flight = false;        // copies were enqueued since the last wait
  };
  // Waits until the copies out of `block` have run.
  absl::Status AwaitCopied(Block& block, absl::Time deadline);

  backends::DeviceMemory& memory_;
  std::array<Block, 2> blocks_;
  int next_ = 0;  // the block the next Upload takes
};

}  // namespace tandem::actor

#endif  // TANDEM_ACTOR_INPUT_STAGING_H_
