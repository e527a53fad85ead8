// A job on the local launcher for its tests (local_launcher_test.cc,
// local_launcher_security_test.cc): launcher options on loopback with
// bounded timeouts, an MLP pipeline started on it, its actors' pids.
#ifndef TANDEM_TESTS_CONTROLLER_LOCAL_LAUNCHER_JOB_H_
#define TANDEM_TESTS_CONTROLLER_LOCAL_LAUNCHER_JOB_H_

#include <signal.h>

#include <cerrno>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "backends/cpu/kernels.h"
#include "controller/local_launcher.h"
#include "controller/pipeline.h"
#include "examples/models/mlp.h"
#include "gtest/gtest.h"
#include "schedules/generators.h"
#include "tests/controller/parity_harness.h"

namespace tandem::controller {

inline LocalLauncherOptions TestOptions(ir::DataPlaneKind transport = ir::DataPlaneKind::kShm,
                                        const std::string& device = "cpu") {
  LocalLauncherOptions options;
  options.device = device;
  options.actor_binary = TANDEM_ACTOR_BINARY;
  options.data_plane = transport;
  options.shm_ring_bytes = int64_t{16} << 20;
  options.start_timeout = absl::Seconds(30);
  options.step_timeout = absl::Seconds(60);
  options.receive_timeout = absl::Seconds(20);
  return options;
}

inline bool Gone(pid_t pid) { return kill(pid, 0) != 0 && errno == ESRCH; }

// A pipeline on a LocalLauncher the test can reach into.
struct Job {
  ir::TrainStep step;
  std::unique_ptr<Pipeline> pipeline;
  LocalLauncher* launcher = nullptr;  // owned by `pipeline`
};

// An MLP over `actors` stages with 1F1B; `width` and `batch` set how long a
// step computes.
inline void StartJob(Job& job, int32_t actors, int32_t microbatches, int64_t width = 12, int64_t batch = 4,
                     LocalLauncherOptions options = TestOptions()) {
  cpu::SetBlasThreads(1);
  examples::MlpConfig config;
  config.input_dim = width;
  config.hidden_dim = width;
  config.num_layers = actors;
  config.batch_size = batch;
  config.num_stages = actors;
  absl::StatusOr<ir::TrainStep> step =
      TraceTrainStep("mlp", examples::MlpModel(config), Sgd({.learning_rate = 0.1}),
                     {.num_microbatches = microbatches, .seed = 3});
  ASSERT_TRUE(step.ok()) << step.status();
  job.step = *std::move(step);
  absl::StatusOr<schedules::Schedule> schedule =
      schedules::Generate("1f1b", {.actors = actors, .microbatches = microbatches});
  ASSERT_TRUE(schedule.ok()) << schedule.status();
  auto launcher = std::make_unique<LocalLauncher>(std::move(options));
  job.launcher = launcher.get();
  absl::StatusOr<std::unique_ptr<Pipeline>> pipeline =
      Pipeline::Create(job.step, *schedule, ir::SeedSources(job.step), std::move(launcher));
  ASSERT_TRUE(pipeline.ok()) << pipeline.status();
  job.pipeline = *std::move(pipeline);
}

inline std::vector<pid_t> ActorPids(const Job& job, int32_t actors) {
  std::vector<pid_t> pids;
  for (int32_t actor = 0; actor < actors; ++actor) pids.push_back(job.launcher->processes()->pid(ActorId{actor}));
  return pids;
}

}  // namespace tandem::controller

#endif  // TANDEM_TESTS_CONTROLLER_LOCAL_LAUNCHER_JOB_H_
