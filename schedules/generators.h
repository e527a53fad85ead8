// The built-in schedule generators.
//
// Each generator returns the same plain Schedule a user could write by hand
// in the text format; nothing downstream knows which generator made it. A
// generator checks its constraints and explains a violation in an
// InvalidArgument status. Every returned schedule passes Validate().
// Pure functions; thread-safe.
#ifndef TANDEM_SCHEDULES_GENERATORS_H_
#define TANDEM_SCHEDULES_GENERATORS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "schedules/schedule.h"

namespace tandem::schedules {

struct GeneratorOptions {
  int32_t actors = 0;        // P, the number of pipeline actors.
  int32_t microbatches = 0;  // M, microbatches per step.
  // V, stages per actor. 0 picks the generator's default: 1 for GPipe, 1F1B
  // and ZB-H1; 2 for interleaved 1F1B, looped BFS, ZB-V and DualPipeV.
  int32_t virtual_stages = 0;
};

// GPipe: all forwards, then all backwards; one stage per actor.
absl::StatusOr<Schedule> GenerateGPipe(const GeneratorOptions& options);
// 1F1B (PipeDream-Flush): warm-up forwards, then alternate; one stage per actor.
absl::StatusOr<Schedule> GenerateOneFOneB(const GeneratorOptions& options);
// Interleaved 1F1B in Megatron-LM's order; loop placement, V stages per
// actor; M must be a multiple of P.
absl::StatusOr<Schedule> GenerateInterleaved(const GeneratorOptions& options);
// Looped BFS: loop placement, every microbatch through one local stage
// before the next (breadth-first).
absl::StatusOr<Schedule> GenerateLoopedBfs(const GeneratorOptions& options);
// ZB-H1: zero-bubble with the backward split into I and W, 1F1B's memory;
// one stage per actor.
absl::StatusOr<Schedule> GenerateZeroBubbleH1(const GeneratorOptions& options);
// ZB-V: two stages per actor in V placement, split backward; M >= 2P-1.
absl::StatusOr<Schedule> GenerateZeroBubbleV(const GeneratorOptions& options);
// DualPipeV: two stages per actor in V placement; in the steady state each
// slot overlaps a forward of one stage with a full backward of the other
// (a group of two tasks); M >= 2P.
absl::StatusOr<Schedule> GenerateDualPipeV(const GeneratorOptions& options);

// The names accepted by Generate(), in a stable order: "gpipe", "1f1b",
// "interleaved", "looped-bfs", "zb-h1", "zb-v", "dualpipev".
std::vector<std::string> GeneratorNames();

// Runs the generator called `name`; InvalidArgument listing the known names
// when there is none.
absl::StatusOr<Schedule> Generate(absl::string_view name, const GeneratorOptions& options);

}  // namespace tandem::schedules

#endif  // TANDEM_SCHEDULES_GENERATORS_H_
