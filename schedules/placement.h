// Stage → actor placements shared by the generators and the file formats.
//
// Pure functions returning new vectors; thread-safe.
#ifndef TANDEM_SCHEDULES_PLACEMENT_H_
#define TANDEM_SCHEDULES_PLACEMENT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "schedules/schedule.h"

namespace tandem::schedules {

// "Loop" placement: stage s on actor s % num_actors (Megatron's interleaving).
std::vector<ActorId> LoopPlacement(int32_t num_actors, int32_t num_stages);

// "V" placement: stages zig-zag over the actors, down then back up, so with
// 2P stages actor r holds stages r and 2P-1-r (ZB-V, DualPipeV). In general
// stage s sits in chunk c = s / P at offset i = s % P, on actor i for even c
// and P-1-i for odd c.
std::vector<ActorId> VPlacement(int32_t num_actors, int32_t num_stages);

// "loop" or "v" when `placement` is that placement of its stages over
// `num_actors` actors (loop wins when both are), else the actors
// space-separated ("0 1 1 0"): the text format's `placement` value.
std::string PlacementName(const std::vector<ActorId>& placement, int32_t num_actors);

}  // namespace tandem::schedules

#endif  // TANDEM_SCHEDULES_PLACEMENT_H_
