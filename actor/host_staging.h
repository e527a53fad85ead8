// What the actor's two pinned staging areas share (emit_staging.h for
// results leaving the device, input_staging.h for inputs entering it): how
// a tensor's place in a block is rounded, and how long teardown waits for
// copies still on the stream.
#ifndef TANDEM_ACTOR_HOST_STAGING_H_
#define TANDEM_ACTOR_HOST_STAGING_H_

#include <cstdint>

#include "absl/time/time.h"

namespace tandem::actor {

// A staged tensor's bytes rounded up to 256, so every tensor in a block
// starts as aligned as the block (DeviceMemory::AllocateHostStaging).
inline int64_t StagedBytes(int64_t bytes) { return (bytes + 255) / 256 * 256; }

// How long a staging area's destructor waits for copies still on the stream.
inline constexpr absl::Duration kStagingTeardownWait = absl::Seconds(10);

}  // namespace tandem::actor

#endif  // TANDEM_ACTOR_HOST_STAGING_H_
