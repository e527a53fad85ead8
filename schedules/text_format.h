// Tandem's `.sched` text format: a few header lines and one line of tasks
// per actor. The grammar and rules are in schedules/FORMAT.md.
//
//   # 1F1B on 2 actors, 4 microbatches
//   actors 2
//   microbatches 4
//   actor 0: F0.0 F0.1 B0.0 F0.2 B0.1 F0.3 B0.2 B0.3
//   actor 1: F1.0 B1.0 F1.1 B1.1 F1.2 B1.2 F1.3 B1.3
//
// Pure functions; thread-safe.
#ifndef TANDEM_SCHEDULES_TEXT_FORMAT_H_
#define TANDEM_SCHEDULES_TEXT_FORMAT_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "schedules/schedule.h"

namespace tandem::schedules {

// Parses a schedule. Syntax errors, unknown tokens and out-of-range actors,
// stages and microbatches are InvalidArgument with the message
// "<filename>:<line>:<col>: error: <what>" (1-based, pointing at the
// offending token). The result is NOT validated: call Validate() for
// completeness, placement and deadlock checks.
absl::StatusOr<Schedule> ParseScheduleText(absl::string_view text,
                                           absl::string_view filename = "<input>");

// Prints `schedule` in canonical form: the header (name if any, actors,
// stages, microbatches, placement as `loop`, `v` or an explicit list), then
// one `actor N:` line per actor. Parsing the output gives back an equal
// schedule, and printing that gives the same text.
std::string PrintScheduleText(const Schedule& schedule);

}  // namespace tandem::schedules

#endif  // TANDEM_SCHEDULES_TEXT_FORMAT_H_
