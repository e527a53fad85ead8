#include "tools/cli/pipeline_options.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "actor/device.h"
#include "controller/local_launcher.h"
#include "controller/session.h"
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
}

absl::StatusOr<schedules::Schedule> ResolveSchedule(const ScheduleOptions& options, int32_t microbatches) {
  return schedules::ResolveSchedule(options.schedule, options.actors, microbatches, options.virtual_stages);
}

void AddLauncherOptions(CLI::App& command, LauncherOptions& options, const std::vector<std::string>& extra_launchers,
                        const std::string& extra_help) {
  std::vector<std::string> launchers = {"local", "threads"};
  launchers.insert(launchers.end(), extra_launchers.begin(), extra_launchers.end());
  command
      .add_option(
          "--launcher", options.launcher,
          absl::StrCat("local (one process per actor), threads (one thread per actor, for debugging)", extra_help))
      ->check(CLI::IsMember(launchers))
      ->capture_default_str();
  command
      .add_option("--transport", options.transport,
                  "data plane of the local launcher: shm (shared memory) or tcp (loopback)")
      ->check(CLI::IsMember({"shm", "tcp"}))
      ->capture_default_str();
  command.add_option("--actor-binary", options.actor_binary,
                     "the actor executable (default: tandem-actor beside tandem)");
  command
      .add_option("--device", options.device,
                  "where the actors compute: cpu, cuda (actor a on GPU a mod the visible GPUs), cuda:N; "
                  "+bf16 for bf16 matmul operands with f32 accumulation")
      ->capture_default_str();
}

absl::StatusOr<actor::DeviceSpec> DeviceFrom(const LauncherOptions& options) {
  absl::StatusOr<actor::DeviceSpec> spec = actor::ParseDeviceSpec(options.device);
  if (!spec.ok()) return absl::InvalidArgumentError(absl::StrCat("--device: ", spec.status().message()));
  // Refuse here, before any actor starts, with the runtime's reason.
  if (absl::Status visible = actor::CheckDeviceVisible(*spec); !visible.ok()) {
    return absl::Status(visible.code(),
                        absl::StrCat("--device ", actor::DeviceSpecName(*spec), ": ", visible.message()));
  }
  return spec;
}

absl::StatusOr<LauncherChoice> MakeLauncher(const LauncherOptions& options) {
  absl::StatusOr<ir::DataPlaneKind> transport = ir::ParseDataPlaneKind(options.transport);
  if (!transport.ok()) return transport.status();
  absl::StatusOr<actor::DeviceSpec> device = DeviceFrom(options);
  if (!device.ok()) return device.status();
  const std::string device_name = actor::DeviceSpecName(*device);
  LauncherChoice choice;
  if (options.launcher == "threads") {
    choice.launcher = std::make_unique<ThreadsLauncher>(absl::Seconds(30), *device);
    choice.description =
        absl::StrCat("threads launcher (one thread per actor, in-memory data plane, ", device_name, ")");
    return choice;
  }
  if (options.launcher != "local") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown launcher '", options.launcher, "' (expected local or threads)"));
  }
  controller::LocalLauncherOptions local;
  local.actor_binary = options.actor_binary.empty() ? FindActorBinary() : options.actor_binary;
  local.data_plane = *transport;
  local.device = device_name;
  choice.launcher = std::make_unique<controller::LocalLauncher>(std::move(local));
  choice.description = absl::StrCat("local launcher (one process per actor, ",
                                    ir::DataPlaneKindName(*transport), " data plane, ", device_name, ")");
  return choice;
}

}  // namespace tandem::cli
