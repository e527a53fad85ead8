#include "schedules/resolve.h"

#include <algorithm>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "ir/read_file.h"
#include "schedules/generators.h"
#include "schedules/limits.h"
#include "schedules/pytorch_csv.h"
#include "schedules/text_format.h"
#include "schedules/validator.h"

namespace tandem::schedules {

absl::StatusOr<std::string> ReadScheduleFileText(const std::string& path) {
  absl::StatusOr<std::string> text = ir::ReadFileUpTo(path, kMaxScheduleFileBytes, "the file");
  if (!text.ok()) return absl::Status(text.status().code(), absl::StrCat(path, ": error: ", text.status().message()));
  return text;
}

absl::StatusOr<Schedule> ReadScheduleFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadScheduleFileText(path);
  if (!text.ok()) return text.status();
  return absl::EndsWith(path, ".csv") ? ParsePytorchCsv(*text, path) : ParseScheduleText(*text, path);
}

absl::StatusOr<Schedule> ResolveSchedule(const std::string& name_or_file, int32_t actors, int32_t microbatches,
                                         int32_t virtual_stages, const std::vector<ir::StageEdge>& stage_edges) {
  const std::vector<std::string> names = GeneratorNames();
  absl::StatusOr<Schedule> schedule;
  if (std::find(names.begin(), names.end(), name_or_file) != names.end()) {
    GeneratorOptions options{.actors = actors, .microbatches = microbatches, .virtual_stages = virtual_stages};
    if (TakesStageGraph(name_or_file)) options.stage_edges = stage_edges;
    schedule = Generate(name_or_file, options);
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
