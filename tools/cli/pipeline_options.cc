#include "tools/cli/pipeline_options.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "backends/cpu/kernel_threads.h"
#include "backends/device.h"
#include "backends/open_device.h"
#include "controller/compiler.h"
#include "controller/local_launcher.h"
#include "controller/session.h"
#include "ir/device_spec.h"
#include "rpc/connection.h"
#include "schedules/generators.h"
#include "schedules/resolve.h"
#include "tools/cli/command_line.h"
#include "tools/cli/threads_launcher.h"

namespace tandem::cli {

void AddScheduleOptions(CLI::App& command, ScheduleOptions& options) {
  command.add_option("--schedule", options.schedule, "a built-in schedule name or a .sched/.csv file")
      ->capture_default_str();
  AddIntegerOption(command, "--actors", options.actors, "pipeline actors");
  command
      .add_option("--virtual", options.virtual_stages,
                  "stages per actor for interleaved, looped-bfs, zb-v (0: the schedule's default)")
      ->check(AtLeast(options.virtual_stages, 0))
      ->capture_default_str();
  command
      .add_option("--remat", options.remat,
                  "none, or stage: each stage keeps only its inputs between forward and backward and recomputes "
                  "the rest in its backward (less memory, more compute, the same bits)")
      ->check(CLI::IsMember({"none", "stage"}))
      ->capture_default_str();
}

std::vector<bool> ScheduleOptions::RematByStage(int32_t stages) const {
  if (!remat_stages.empty()) return remat_stages;
  return controller::RematEveryStage(stages, remat == "stage");
}

absl::StatusOr<schedules::Schedule> ResolveSchedule(const ScheduleOptions& options, int32_t microbatches,
                                                    const std::vector<ir::StageEdge>& stage_edges) {
  return schedules::ResolveSchedule(options.schedule, options.actors, microbatches, options.virtual_stages,
                                    stage_edges);
}

bool FollowsModelGraph(const ScheduleOptions& options) { return schedules::TakesStageGraph(options.schedule); }

void AddLauncherOptions(CLI::App& command, LauncherOptions& options, const std::vector<std::string>& extra_launchers,
                        const std::string& extra_help) {
  std::vector<std::string> launchers = {"local", "threads", "slurm"};
  launchers.insert(launchers.end(), extra_launchers.begin(), extra_launchers.end());
  command
      .add_option("--launcher", options.launcher,
                  absl::StrCat("local (one process per actor), threads (one thread per actor, for debugging), slurm "
                               "(inside an sbatch script or salloc: every actor a task of one srun step across "
                               "the allocation's nodes)",
                               extra_help))
      ->check(CLI::IsMember(launchers))
      ->capture_default_str();
  command
      .add_option("--control", options.control,
                  "control plane: unix (a Unix socket; the local launcher's default) or tcp (actors prove the "
                  "job's token by challenge-response, it never crosses a socket; slurm's only one)")
      ->check(CLI::IsMember({"unix", "tcp"}));
  command
      .add_option("--transport", options.transport,
                  "data plane: shm (shared memory; the local launcher's default), tcp, or auto (shared memory "
                  "between actors on one node, TCP between nodes; slurm's default)")
      ->check(CLI::IsMember({"shm", "tcp", "auto"}));
  command
      .add_option("--bind", options.bind,
                  "the address the TCP control plane listens on and actors dial: 127.0.0.1 by default; with slurm, "
                  "what this host's name resolves to (every node must reach it)");
  command.add_option("--actor-binary", options.actor_binary,
                     "the actor executable (default: tandem-actor beside tandem)");
  command
      .add_option("--device", options.device,
                  "where the actors compute: cpu, cuda (actor a on GPU a mod the visible GPUs), cuda:N; "
                  "+tf32 for f32 matmuls on TF32 tensor cores, +bf16 for bf16 matmul (and attention) operands with f32 accumulation; "
                  "fake-cuda: an emulated GPU (device-resident "
                  "buffers, CUDA IPC between actors) computing with the CPU reference kernels; fake-cuda/N: N "
                  "emulated GPUs per host (actor a on GPU a mod N; NCCL, faked, between actors on different ones)")
      ->capture_default_str();
  AddIntegerOption(command, "--threads", options.threads,
                   "CPU kernel threads of each actor process and of the reference (default 0: the actors of this "
                   "host share its cores evenly, the reference uses them all; actors as threads share them all); "
                   "the bits do not depend on it",
                   0)
      ->check(CLI::Range(0, cpu::kMaxKernelThreads));
  command
      .add_option("--controller-timeout", options.controller_timeout_seconds,
                  "seconds after which actor processes that have heard nothing from the controller, not even a "
                  "heartbeat, exit by themselves (the controller was stopped or its host lost)")
      ->check(CLI::Range(1, 24 * 3600))
      ->capture_default_str();
  command
      .add_option("--actor-timeout", options.actor_timeout_seconds,
                  "seconds an actor process may go without answering a heartbeat during a call before the job ends "
                  "naming it (stopped, hung or lost); raise it on a machine so loaded that a busy actor's heartbeat "
                  "can wait")
      ->check(CLI::Range(0.5, 3600.0))
      ->capture_default_str();
}

absl::StatusOr<ir::DeviceSpec> DeviceFrom(const LauncherOptions& options) {
  absl::StatusOr<ir::DeviceSpec> spec = ir::ParseDeviceSpec(options.device);
  if (!spec.ok()) return absl::InvalidArgumentError(absl::StrCat("--device: ", spec.status().message()));
  // Refuse here, before any actor starts, with the runtime's reason.
  if (absl::Status visible = backends::CheckDeviceVisible(*spec); !visible.ok()) {
    return absl::Status(visible.code(),
                        absl::StrCat("--device ", ir::DeviceSpecName(*spec), ": ", visible.message()));
  }
  return spec;
}

absl::StatusOr<LauncherChoice> MakeLauncher(const LauncherOptions& options) {
  const bool slurm = options.launcher == "slurm";
  if (slurm && (options.control == "unix" || options.transport == "shm")) {
    return absl::InvalidArgumentError(
        "--launcher slurm runs actors on other nodes: it needs --control tcp and --transport auto or tcp (its "
        "defaults are tcp and auto)");
  }
  absl::StatusOr<ir::DataPlaneKind> transport =
      ir::ParseDataPlaneKind(!options.transport.empty() ? options.transport : slurm ? "auto" : "shm");
  if (!transport.ok()) return transport.status();
  absl::StatusOr<rpc::ControlPlaneKind> control =
      rpc::ParseControlPlaneKind(!options.control.empty() ? options.control : slurm ? "tcp" : "unix");
  if (!control.ok()) return control.status();
  absl::StatusOr<ir::DeviceSpec> device = DeviceFrom(options);
  if (!device.ok()) return device.status();
  const std::string device_name = ir::DeviceSpecName(*device);
  LauncherChoice choice;
  if (options.launcher == "threads") {
    if (device->kind == ir::DeviceSpec::Kind::kFakeCuda) {
      return absl::InvalidArgumentError(
          "--device fake-cuda needs actor processes (--launcher local or slurm): its data plane is CUDA IPC and NCCL "
          "between processes, which the threads launcher's in-memory data plane is not");
    }
    choice.launcher = std::make_unique<ThreadsLauncher>(absl::Seconds(30), *device);
    choice.description =
        absl::StrCat("threads launcher (one thread per actor, in-memory data plane, ", device_name, ")");
    return choice;
  }
  if (options.launcher != "local" && !slurm) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown launcher '", options.launcher, "' (expected local, threads or slurm)"));
  }
  controller::LocalLauncherOptions local;
  local.actor_binary = options.actor_binary.empty() ? FindActorBinary() : options.actor_binary;
  local.control_plane = *control;
  local.data_plane = *transport;
  if (!options.bind.empty()) {
    local.bind_host = options.bind;
  } else if (slurm) {
    absl::StatusOr<std::string> here = rpc::ThisHostAddress();
    if (!here.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--launcher slurm: ", here.status().message(),
                                                     "; give the address the nodes reach this host by with --bind"));
    }
    local.bind_host = *here;
  }
  local.device = device_name;
  local.actor_threads = options.threads;
  local.controller_timeout = absl::Seconds(options.controller_timeout_seconds);
  local.unresponsive_after = absl::Seconds(options.actor_timeout_seconds);
  if (slurm) local.start = controller::ActorStart::kSrun;
  choice.launcher = std::make_unique<controller::LocalLauncher>(std::move(local));
  if (slurm) {
    choice.description =
        absl::StrCat("slurm launcher (one srun step across the allocation, tcp control plane, ",
                     ir::DataPlaneKindName(*transport), " data plane, ", device_name, ")");
    return choice;
  }
  choice.description = absl::StrCat(
      "local launcher (one process per actor, ",
      *control == rpc::ControlPlaneKind::kTcp ? "tcp control plane, " : "", ir::DataPlaneKindName(*transport),
      " data plane, ", device_name, ")");
  return choice;
}

}  // namespace tandem::cli
