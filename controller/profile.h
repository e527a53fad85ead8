// Measuring a model's segments for the planner (schedules/partition.h):
// every stage of the traced step is one segment. All of them run on one
// actor, with a split backward, for a few steps; each segment's F, I and W
// time is the median of its measured runs (after a warm-up step), and its
// bytes come from the compiled program: the activation it hands the next
// segment, what its backward keeps from its forward (with and without
// rematerialisation), its parameters, optimizer state and gradient
// accumulators, and the largest rise of live bytes within one of its tasks.
// A step whose stages form a DAG gives the cost file its segment graph.
#ifndef TANDEM_CONTROLLER_PROFILE_H_
#define TANDEM_CONTROLLER_PROFILE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "controller/launcher.h"
#include "ir/host_tensor.h"
#include "ir/train_step.h"
#include "schedules/cost_file.h"
#include "schedules/schedule.h"

namespace tandem::controller {

struct ProfileOptions {
  int32_t steps = 3;  // measured, after one warm-up step
  std::string model;   // the cost file's names
  std::string device;
  int64_t microbatch_size = 1;  // sequences (examples) per microbatch, as the cost file records it
};

// The schedule a profile runs: one actor holding `stages` stages, every
// forward, then every I (last stage first), then every W.
schedules::Schedule ProfileSchedule(int32_t stages, int32_t microbatches);

// Profiles `step` on `launcher`'s one actor, feeding step `index` (0-based)
// the microbatches `batches(index)` gives. The launcher's and the
// compiler's errors; InvalidArgument for a forward-only step.
absl::StatusOr<schedules::CostFile> ProfileSegments(
    const ir::TrainStep& step, std::unique_ptr<Launcher> launcher,
    const std::function<absl::StatusOr<std::vector<ir::TensorMap>>(int64_t index)>& batches,
    const ProfileOptions& options);

}  // namespace tandem::controller

#endif  // TANDEM_CONTROLLER_PROFILE_H_
