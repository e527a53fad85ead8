#include "tools/cli/launcher_option.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "actor/device.h"
#include "controller/session.h"
#include "tools/cli/threads_launcher.h"

namespace tandem::cli {

void AddLauncherOptions(Arguments& arguments, const std::string& extra_launchers) {
  arguments.AddOption("launcher",
                      absl::StrCat("local (one process per actor), threads (one thread per actor, for debugging)",
                                   extra_launchers),
                      "local");
  arguments.AddOption("transport", "data plane of the local launcher: shm (shared memory) or tcp (loopback)", "shm");
  arguments.AddOption("actor-binary", "the actor executable (default: tandem-actor beside tandem)");
  arguments.AddOption("device",
                      "where the actors compute: cpu, cuda (actor a on GPU a mod the visible GPUs), cuda:N; "
                      "+bf16 for bf16 matmul operands with f32 accumulation",
                      "cpu");
}

absl::StatusOr<actor::DeviceSpec> DeviceFrom(const Arguments& arguments) {
  absl::StatusOr<actor::DeviceSpec> spec = actor::ParseDeviceSpec(arguments.Get("device").value_or("cpu"));
  if (!spec.ok()) return absl::InvalidArgumentError(absl::StrCat("--device: ", spec.status().message()));
  // Refuse here, before any actor starts, with the runtime's reason.
  if (absl::Status visible = actor::CheckDeviceVisible(*spec); !visible.ok()) {
    return absl::Status(visible.code(), absl::StrCat("--device ", actor::DeviceSpecName(*spec), ": ", visible.message()));
  }
  return spec;
}

absl::StatusOr<LauncherChoice> MakeLauncher(const Arguments& arguments) {
  const std::string name = arguments.Get("launcher").value_or("local");
  absl::StatusOr<controller::DataPlaneTransport> transport =
      controller::ParseDataPlaneTransport(arguments.Get("transport").value_or("shm"));
  if (!transport.ok()) return transport.status();
  absl::StatusOr<actor::DeviceSpec> device = DeviceFrom(arguments);
  if (!device.ok()) return device.status();
  const std::string device_name = actor::DeviceSpecName(*device);
  LauncherChoice choice;
  if (name == "threads") {
    choice.launcher = std::make_unique<ThreadsLauncher>(absl::Seconds(30), *device);
    choice.description = absl::StrCat("threads launcher (one thread per actor, in-memory data plane, ", device_name, ")");
    return choice;
  }
  if (name != "local") {
    return absl::InvalidArgumentError(absl::StrCat("unknown launcher '", name, "' (expected local or threads)"));
  }
  controller::LocalLauncherOptions options;
  options.actor_binary = arguments.Get("actor-binary").value_or(FindActorBinary());
  options.transport = *transport;
  options.device = device_name;
  auto local = std::make_unique<controller::LocalLauncher>(std::move(options));
  choice.local = local.get();
  choice.launcher = std::move(local);
  choice.description = absl::StrCat("local launcher (one process per actor, ",
                                    controller::DataPlaneTransportName(*transport), " data plane, ", device_name, ")");
  return choice;
}

}  // namespace tandem::cli
