// Strong ids for the things a pipeline is made of, so that an actor cannot
// be passed where a stage is meant. Plain values; header-only, so that every
// folder may use them (schedules/ included, which depends on nothing else of
// Tandem).
#ifndef TANDEM_IR_IDS_H_
#define TANDEM_IR_IDS_H_

#include <compare>
#include <cstdint>
#include <string>

namespace tandem {

template <typename Tag>
struct StrongId {
  int32_t value = 0;
  constexpr StrongId() = default;
  constexpr explicit StrongId(int32_t v) : value(v) {}
  friend constexpr auto operator<=>(StrongId, StrongId) = default;
};

// An actor of a job: one process (or thread) running its own program.
using ActorId = StrongId<struct ActorIdTag>;
// A pipeline stage: the part of the model between two pipeline_yields.
using StageId = StrongId<struct StageIdTag>;
// A microbatch of a step.
using Microbatch = StrongId<struct MicrobatchTag>;

}  // namespace tandem

#endif  // TANDEM_IR_IDS_H_
