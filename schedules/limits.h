// The largest schedule Tandem accepts, wherever it comes from: a .sched or
// CSV file, a generator's arguments, a flag. Every reader checks these
// before it allocates anything sized by them, and names the bound it hit.
//
// The bounds are far above any real pipeline (the largest we plan for is
// 1,024 actors x 256 microbatches with split backwards, 1.6 M tasks) and
// keep the memory a schedule can make Tandem use to a few GiB.
// Constants and pure functions; thread-safe.
#ifndef TANDEM_SCHEDULES_LIMITS_H_
#define TANDEM_SCHEDULES_LIMITS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "ir/excerpt.h"

namespace tandem::schedules {

// Actors of one schedule. A program costs 24 B before its tasks.
inline constexpr int64_t kMaxActors = 4096;
// Stages of one schedule (its placement costs 4 B each: 256 KiB).
inline constexpr int64_t kMaxStages = 65536;
// Edges of a schedule's stage graph (`stage-graph` in a .sched file).
inline constexpr int64_t kMaxStageEdges = 65536;
// Microbatches per step.
inline constexpr int64_t kMaxMicrobatches = 65536;
// Stages per actor for the generators that take it (interleaved, looped
// BFS).
inline constexpr int64_t kMaxVirtualStages = 64;
// Tasks of one schedule, over all actors. Validating and simulating one
// costs about 250 B per task at the peak (measured: `tandem sched sim` of
// GPipe on 1024 actors x 1024 microbatches, 2 M tasks, peaks at 530 MB),
// so 2^24 tasks are about 4 GiB.
inline constexpr int64_t kMaxTasks = int64_t{1} << 24;
// Stages x microbatches: every pair needs at least a forward and a
// backward task, so at most kMaxTasks / 2. The validator's dense
// (kind, stage, microbatch) table costs 32 B per pair: 256 MiB at the bound.
inline constexpr int64_t kMaxStageMicrobatches = kMaxTasks / 2;
// Bytes of a schedule file read whole (.sched or CSV): 16 M tasks of at
// least 5 characters each fit.
inline constexpr int64_t kMaxScheduleFileBytes = int64_t{256} << 20;
// The partitioner's table of every (stage, first segment, end, remat)
// candidate (schedules/partition.h): 64 MiB, e.g. 128 segments over 16
// stages.
inline constexpr int64_t kMaxPlanTableBytes = int64_t{64} << 20;

// InvalidArgument naming the first size over its bound, e.g. "actors
// 999999999 is more than the 4096 a schedule may have"; OK when all fit.
// Takes 64-bit counts so that a caller can pass a value before narrowing
// it. Does not check lower bounds (the callers' messages say more there).
absl::Status CheckScheduleSizes(int64_t actors, int64_t stages, int64_t microbatches);

// InvalidArgument "<what> has more than the 16777216 tasks a schedule may
// have" when `tasks` is over kMaxTasks.
absl::Status CheckTaskCount(int64_t tasks, absl::string_view what);

// `digits` as a count or an index: a non-negative decimal of at most 9
// digits (so below 10^9: no overflow, no sign, no spaces), or nullopt.
std::optional<int32_t> ParseDecimal(absl::string_view digits);

// What an error message quotes of the input (ir/excerpt.h).
using ir::Excerpt;

}  // namespace tandem::schedules

#endif  // TANDEM_SCHEDULES_LIMITS_H_
