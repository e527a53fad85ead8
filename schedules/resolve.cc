#include "schedules/resolve.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "schedules/generators.h"
#include "schedules/pytorch_csv.h"
#include "schedules/text_format.h"
#include "schedules/validator.h"

namespace tandem::schedules {

absl::StatusOr<Schedule> ReadScheduleFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return absl::NotFoundError(absl::StrCat(path, ": error: cannot open file"));
  std::ostringstream text;
  text << file.rdbuf();
  if (file.bad()) return absl::NotFoundError(absl::StrCat(path, ": error: cannot read file"));
  return absl::EndsWith(path, ".csv") ? ParsePytorchCsv(text.str(), path) : ParseScheduleText(text.str(), path);
}

absl::StatusOr<Schedule> ResolveSchedule(const std::string& name_or_file, int32_t actors, int32_t microbatches,
                                         int32_t virtual_stages) {
  const std::vector<std::string> names = GeneratorNames();
  absl::StatusOr<Schedule> schedule;
  if (std::find(names.begin(), names.end(), name_or_file) != names.end()) {
    schedule = Generate(name_or_file, {.actors = actors, .microbatches = microbatches, .virtual_stages = virtual_stages});
  } else {
    schedule = ReadScheduleFile(name_or_file);
    if (schedule.ok() && (schedule->num_actors != actors || schedule->num_microbatches != microbatches)) {
      return absl::InvalidArgumentError(absl::StrCat(name_or_file, ": the schedule has ", schedule->num_actors,
                                                     " actors and ", schedule->num_microbatches,
                                                     " microbatches, but ", actors, " actors and ", microbatches,
                                                     " microbatches were asked for"));
    }
  }
  if (!schedule.ok()) return schedule.status();
  if (absl::Status status = Validate(*schedule); !status.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(name_or_file, ": ", status.message()));
  }
  return schedule;
}

}  // namespace tandem::schedules
