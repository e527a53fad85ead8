// Choosing a schedule the way users name one: a built-in generator's name
// or a schedule file.
#ifndef TANDEM_SCHEDULES_RESOLVE_H_
#define TANDEM_SCHEDULES_RESOLVE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "schedules/schedule.h"

namespace tandem::schedules {

// The contents of a schedule file. NotFound for one that cannot be read;
// InvalidArgument "<path>: error: ..." for a directory or a file larger than
// kMaxScheduleFileBytes (schedules/limits.h), before reading it.
absl::StatusOr<std::string> ReadScheduleFileText(const std::string& path);

// Reads and parses a schedule file: PyTorch's pipelining CSV for paths
// ending in ".csv", Tandem's .sched text format otherwise. Not validated.
// Errors of ReadScheduleFileText; InvalidArgument "path:line:col: error:
// ..." for a parse error.
absl::StatusOr<Schedule> ReadScheduleFile(const std::string& path);

// A built-in generator's name (gpipe, 1f1b, interleaved, looped-bfs, zb-h1,
// zb-v, dualpipev) generates the schedule for `actors` and `microbatches`
// (`virtual_stages`: stages per actor for the generators that take it, 0 for
// their default); anything else is read as a schedule file, which must then
// have that many actors and microbatches. The result is validated
// (InvalidArgument naming the file or generator and the problem).
//
// The graph generators (graph-gpipe, graph-1f1b) run over `stage_edges`,
// the model's stage graph (TrainStep::stage_edges), one stage per actor;
// the others ignore it: a chain schedule runs a branched model's stages one
// after another.
absl::StatusOr<Schedule> ResolveSchedule(const std::string& name_or_file, int32_t actors, int32_t microbatches,
                                         int32_t virtual_stages = 0,
                                         const std::vector<ir::StageEdge>& stage_edges = {});

}  // namespace tandem::schedules

#endif  // TANDEM_SCHEDULES_RESOLVE_H_
