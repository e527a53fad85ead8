#include "schedules/placement.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tandem::schedules {

std::vector<ActorId> LoopPlacement(int32_t num_actors, int32_t num_stages) {
  std::vector<ActorId> placement;
  if (num_actors <= 0 || num_stages <= 0) return placement;
  placement.reserve(num_stages);
  for (int32_t s = 0; s < num_stages; ++s) placement.push_back(ActorId(s % num_actors));
  return placement;
}

std::vector<ActorId> VPlacement(int32_t num_actors, int32_t num_stages) {
  std::vector<ActorId> placement;
  if (num_actors <= 0 || num_stages <= 0) return placement;
  placement.reserve(num_stages);
  for (int32_t s = 0; s < num_stages; ++s) {
    const int32_t chunk = s / num_actors;
    const int32_t offset = s % num_actors;
    placement.push_back(ActorId(chunk % 2 == 0 ? offset : num_actors - 1 - offset));
  }
  return placement;
}

std::string PlacementName(const std::vector<ActorId>& placement, int32_t num_actors) {
  const int32_t stages = static_cast<int32_t>(placement.size());
  if (placement == LoopPlacement(num_actors, stages)) return "loop";
  if (placement == VPlacement(num_actors, stages)) return "v";
  return absl::StrJoin(placement, " ",
                       [](std::string* out, ActorId actor) { absl::StrAppend(out, actor.value); });
}

}  // namespace tandem::schedules
