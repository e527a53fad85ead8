#include "tools/cli/schedule_option.h"

#include <algorithm>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "schedules/generators.h"
#include "schedules/validator.h"
#include "tools/cli/sched_commands.h"

namespace tandem::cli {

absl::StatusOr<schedules::Schedule> ResolveSchedule(const std::string& name_or_file, int32_t actors,
                                                    int32_t microbatches, int32_t virtual_stages) {
  std::vector<std::string> names = schedules::GeneratorNames();
  absl::StatusOr<schedules::Schedule> schedule;
  if (std::find(names.begin(), names.end(), name_or_file) != names.end()) {
    schedule = schedules::Generate(name_or_file,
                                   {.actors = actors, .microbatches = microbatches, .virtual_stages = virtual_stages});
  } else {
    schedule = LoadSchedule(name_or_file, std::nullopt, std::cin);
    if (schedule.ok() && (schedule->num_actors != actors || schedule->num_microbatches != microbatches)) {
      return absl::InvalidArgumentError(absl::StrCat(
          name_or_file, ": the schedule has ", schedule->num_actors, " actors and ", schedule->num_microbatches,
          " microbatches, but --actors ", actors, " --microbatches ", microbatches, " were asked for"));
    }
  }
  if (!schedule.ok()) return schedule.status();
  if (absl::Status status = schedules::Validate(*schedule); !status.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(name_or_file, ": ", status.message()));
  }
  return schedule;
}

}  // namespace tandem::cli
