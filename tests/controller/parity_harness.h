// Shared by the controller tests: tiny models and the parity check of a
// pipelined run against the reference interpreter.
#ifndef TANDEM_TESTS_CONTROLLER_PARITY_HARNESS_H_
#define TANDEM_TESTS_CONTROLLER_PARITY_HARNESS_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "controller/compiler.h"
#include "controller/launcher.h"
#include "examples/models/mlp.h"
#include "ir/trace.h"
#include "ir/train_step.h"
#include "schedules/schedule.h"

namespace tandem::controller::testing_harness {

// `updates`: how the loop updates (asynchronous pipelines; ir/trace.h).
absl::StatusOr<ir::TrainStep> TinyGpt(int32_t stages, int32_t microbatches, bool tied = false,
                                      WeightUpdates updates = {});
absl::StatusOr<ir::TrainStep> TinyMlp(int32_t stages, int32_t microbatches, int32_t replicas = 1,
                                      WeightUpdates updates = {});
// Three stages; a value of stage 0 is also read by stage 2.
absl::StatusOr<ir::TrainStep> SkipModel(int32_t microbatches);

// A generated schedule; a test failure (and an empty schedule) if the
// generator refuses the arguments.
schedules::Schedule MustGenerate(const std::string& name, int32_t actors, int32_t microbatches,
                                 int32_t virtual_stages = 0);

// Deterministic data for every data and label input of `step`.
std::vector<ir::TensorMap> Batches(const ir::TrainStep& step, int64_t step_number);

using LauncherFactory = std::function<std::unique_ptr<Launcher>()>;
// The threads launcher (actor threads, in-memory data plane).
std::unique_ptr<Launcher> ThreadsLauncher();
// The local launcher: one `actor_binary` process per actor, shm data plane.
std::unique_ptr<Launcher> ProcessLauncher(const std::string& actor_binary);

// Runs `steps` steps on the launcher's actors and on the reference
// interpreter and expects bit-identical losses and state, and measured
// peak == static peak.
void ExpectParity(const ir::TrainStep& step, const schedules::Schedule& schedule, int steps,
                  const LauncherFactory& make_launcher = ThreadsLauncher, const CompileOptions& options = {});
void ExpectForwardParity(const ir::TrainStep& step, const schedules::Schedule& schedule,
                         const examples::MlpConfig& config);

}  // namespace tandem::controller::testing_harness

#endif  // TANDEM_TESTS_CONTROLLER_PARITY_HARNESS_H_
