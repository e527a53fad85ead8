// The `--schedule NAME|FILE` option of `tandem compile` and `tandem train`.
#ifndef TANDEM_TOOLS_CLI_SCHEDULE_OPTION_H_
#define TANDEM_TOOLS_CLI_SCHEDULE_OPTION_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "schedules/schedule.h"

namespace tandem::cli {

// A built-in generator's name (gpipe, 1f1b, interleaved, ...) generates the
// schedule for `actors` and `microbatches` (and `virtual_stages`, 0 for the
// generator's default); anything else is a schedule file (.sched, or .csv
// from PyTorch), which must then have that many actors and microbatches.
// The result is validated.
absl::StatusOr<schedules::Schedule> ResolveSchedule(const std::string& name_or_file, int32_t actors,
                                                    int32_t microbatches, int32_t virtual_stages);

}  // namespace tandem::cli

#endif  // TANDEM_TOOLS_CLI_SCHEDULE_OPTION_H_
