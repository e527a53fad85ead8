#include "actor/emit_staging.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "actor/host_staging.h"

namespace tandem::actor {
EmitStaging::~EmitStaging() {
  // A copy still queued writes into a block: free the blocks only after it.
  if (!pending_.empty()) memory_.SynchronizeStream(absl::Now() + kStagingTeardownWait).IgnoreError();
  for (const Block& block : blocks_) memory_.FreeHostStaging(block.data);
}

int64_t EmitStaging::staging_bytes() const {
  int64_t bytes = 0;
  for (const Block& block : blocks_) bytes += block.bytes;
  return bytes;
}

absl::Status EmitStaging::Stage(const std::string& result, int32_t microbatch, const backends::DeviceTensor& tensor) {
  for (const Pending& pending : pending_) {
    if (pending.result == result && pending.microbatch == microbatch) {
      return absl::InternalError(absl::StrCat("result '", result, "' of microbatch ", microbatch, " emitted twice"));
    }
  }
  const int64_t bytes = StagedBytes(tensor.num_bytes());
  Block* block = nullptr;
  for (Block& candidate : blocks_) {
    if (candidate.bytes - candidate.used >= bytes) {
      block = &candidate;
      break;
    }
  }
  if (block == nullptr) {
    const int64_t size = std::max(kBlockBytes, bytes);
    absl::StatusOr<void*> data = memory_.AllocateHostStaging(size);
    if (!data.ok()) return data.status();
    blocks_.push_back({static_cast<std::byte*>(*data), size, 0});
    block = &blocks_.back();
  }
  std::byte* at = block->data + block->used;
  if (absl::Status status = memory_.CopyToHostAsync(at, tensor.address(), tensor.num_bytes()); !status.ok()) {
    return status;
  }
  block->used += bytes;
  pending_.push_back({result, microbatch, tensor.type, at});
  return absl::OkStatus();
}

absl::StatusOr<std::vector<EmitStaging::Result>> EmitStaging::Collect(absl::Time deadline) {
  if (!pending_.empty()) {
    if (absl::Status status = memory_.SynchronizeStream(deadline); !status.ok()) return status;
  }
  std::vector<Result> results;
  results.reserve(pending_.size());
  for (Pending& pending : pending_) {
    absl::StatusOr<ir::HostTensor> tensor = ir::HostTensor::Allocate(pending.type);
    if (!tensor.ok()) return tensor.status();
    std::memcpy(tensor->data(), pending.data, static_cast<size_t>(tensor->num_bytes()));
    results.push_back({std::move(pending.result), pending.microbatch, *std::move(tensor)});
  }
  Discard();
  return results;
}

void EmitStaging::Discard() {
  pending_.clear();
  for (Block& block : blocks_) block.used = 0;
}

}  // namespace tandem::actor
