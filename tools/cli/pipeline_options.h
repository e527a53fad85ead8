// The options of the commands that run or compile pipelines (`tandem
// train`, `repl`, `compile` and the pipeline benchmarks): which schedule on
// how many actors (--schedule, --actors, --virtual), and which launcher and
// device run them (--launcher, --control, --transport, --actor-binary,
// --device).
#ifndef TANDEM_TOOLS_CLI_PIPELINE_OPTIONS_H_
#define TANDEM_TOOLS_CLI_PIPELINE_OPTIONS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "backends/device.h"
#include "controller/launcher.h"
#include "ir/device_spec.h"
#include "schedules/schedule.h"

namespace tandem::cli {

struct ScheduleOptions {
  std::string schedule = "1f1b";  // a built-in generator's name, or a .sched/.csv file
  int32_t actors = 4;
  int32_t virtual_stages = 0;  // stages per actor for interleaved, looped-bfs, zb-v; 0: the generator's default
  std::string remat = "none";  // none, or stage: every stage recomputes its forward in its backward
  std::vector<bool> remat_stages;  // by stage, from a plan (--plan): in place of --remat
  // Which of `stages` stages rematerialise.
  std::vector<bool> RematByStage(int32_t stages) const;
};

// Declares --schedule, --actors (defaulting to `options.actors`), --virtual
// and --remat.
void AddScheduleOptions(CLI::App& command, ScheduleOptions& options);

// The validated schedule the options name, for `microbatches`; a graph
// generator (graph-1f1b, graph-gpipe) runs over `stage_edges`, the model's
// stage graph.
absl::StatusOr<schedules::Schedule> ResolveSchedule(const ScheduleOptions& options, int32_t microbatches,
                                                    const std::vector<ir::StageEdge>& stage_edges = {});
// Whether the schedule follows the model's stage graph (graph-1f1b,
// graph-gpipe): the model is then traced first, one stage per actor, and
// the schedule generated over its stage graph.
bool FollowsModelGraph(const ScheduleOptions& options);

struct LauncherOptions {
  std::string launcher = "local";  // local, threads, slurm (or what extra_launchers adds)
  std::string control;             // unix or tcp; empty: the launcher's default (unix; slurm: tcp)
  std::string transport;           // shm or tcp; empty: the launcher's default (shm; slurm: tcp)
  std::string bind;                // where the TCP control plane listens; empty: 127.0.0.1 (slurm: this host's address)
  std::string actor_binary;        // empty: FindActorBinary()
  std::string device = "cpu";      // cpu, cuda, cuda:N, with +bf16
  // Kernel threads per actor process and of the reference
  // (backends/cpu/kernel_threads.h); 0: the actors of this host share its
  // cores, the reference takes them all.
  int threads = 0;
  // Actors of the local and slurm launchers exit once the controller has
  // been silent this long (LocalLauncherOptions::controller_timeout).
  int64_t controller_timeout_seconds = 60;
  // An actor process silent this long (no heartbeat) during a call is taken
  // for stopped or lost (LocalLauncherOptions::unresponsive_after).
  double actor_timeout_seconds = 3;
};

// Declares --launcher (accepting local, threads and `extra_launchers`, each
// described in `extra_help`), --control, --transport, --actor-binary,
// --device, --threads, --controller-timeout and --actor-timeout.
void AddLauncherOptions(CLI::App& command, LauncherOptions& options,
                        const std::vector<std::string>& extra_launchers = {}, const std::string& extra_help = "");

// A launcher and how to describe it to people, e.g. "local launcher (one
// process per actor, shm data plane, cpu)".
struct LauncherChoice {
  std::unique_ptr<controller::Launcher> launcher;
  std::string description;
};

// Builds the launcher the options name ("local" or "threads");
// InvalidArgument for another name, or for --control tcp with --transport
// shm (the rings travel as descriptors, which only a Unix socket carries).
absl::StatusOr<LauncherChoice> MakeLauncher(const LauncherOptions& options);

// The device --device names. InvalidArgument for a malformed name;
// FailedPrecondition for a GPU this build or machine does not have, with the
// CUDA runtime's reason.
absl::StatusOr<ir::DeviceSpec> DeviceFrom(const LauncherOptions& options);

}  // namespace tandem::cli

#endif  // TANDEM_TOOLS_CLI_PIPELINE_OPTIONS_H_
