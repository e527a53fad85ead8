// EmitStaging: how a device-resident actor's emitted results (losses,
// metrics) leave the device without stopping it. Each emit enqueues an
// asynchronous copy of its tensor, on the device's stream, into pinned host
// staging (DeviceMemory::CopyToHostAsync, AllocateHostStaging); the tensor
// itself can go at once (freeing is ordered after the copy on the stream),
// so nothing outlives its planned lifetime. At the step's end Collect waits
// for the stream once and hands every result over as a host tensor.
//
// Staging grows in blocks (at least kBlockBytes, or one result's size),
// kept from step to step: a steady step allocates nothing.
//
// Ownership and threading: borrows the memory (which must outlive it), owns
// its blocks (the destructor waits, bounded, for copies still on the stream
// before freeing them). One thread.
#ifndef TANDEM_ACTOR_EMIT_STAGING_H_
#define TANDEM_ACTOR_EMIT_STAGING_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "backends/device_memory.h"
#include "ir/host_tensor.h"

namespace tandem::actor {

class EmitStaging {
 public:
  static constexpr int64_t kBlockBytes = int64_t{64} << 10;

  explicit EmitStaging(backends::DeviceMemory& memory) : memory_(memory) {}
  EmitStaging(const EmitStaging&) = delete;
  EmitStaging& operator=(const EmitStaging&) = delete;
  ~EmitStaging();

  // Enqueues the copy of `tensor` as result `result` of microbatch
  // `microbatch`. Internal when that result is already staged (a program
  // that emits it twice); the memory's errors.
  absl::Status Stage(const std::string& result, int32_t microbatch, const backends::DeviceTensor& tensor);

  struct Result {
    std::string result;
    int32_t microbatch = -1;
    ir::HostTensor tensor;
  };
  // Waits for the stream (at most until `deadline`) and returns what was
  // staged since the last Collect, in staging order; the staging is then
  // free for the next step.
  absl::StatusOr<std::vector<Result>> Collect(absl::Time deadline);
  // Drops what is staged (a failed step), keeping the blocks.
  void Discard();

  // Bytes of staging held, and results staged now.
  int64_t staging_bytes() const;
  int64_t staged() const { return static_cast<int64_t>(pending_.size()); }

 private:
  struct Block {
    std::byte* data = nullptr;
    int64_t bytes = 0;
    int64_t used = 0;
  };
  struct Pending {
    std::string result;
    int32_t microbatch = -1;
    ir::TensorType type;
    const std::byte* data = nullptr;
  };

  backends::DeviceMemory& memory_;
  std::vector<Block> blocks_;
  std::vector<Pending> pending_;
};

}  // namespace tandem::actor

#endif  // TANDEM_ACTOR_EMIT_STAGING_H_
