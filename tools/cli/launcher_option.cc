#include "tools/cli/launcher_option.h"

#include <utility>

#include "absl/strings/str_cat.h"
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
}

absl::StatusOr<LauncherChoice> MakeLauncher(const Arguments& arguments) {
  const std::string name = arguments.Get("launcher").value_or("local");
  absl::StatusOr<controller::DataPlaneTransport> transport =
      controller::ParseDataPlaneTransport(arguments.Get("transport").value_or("shm"));
  if (!transport.ok()) return transport.status();
  LauncherChoice choice;
  if (name == "threads") {
    choice.launcher = std::make_unique<ThreadsLauncher>();
    choice.description = "threads launcher (one thread per actor, in-memory data plane)";
    return choice;
  }
  if (name != "local") {
    return absl::InvalidArgumentError(absl::StrCat("unknown launcher '", name, "' (expected local or threads)"));
  }
  controller::LocalLauncherOptions options;
  options.actor_binary = arguments.Get("actor-binary").value_or(FindActorBinary());
  options.transport = *transport;
  auto local = std::make_unique<controller::LocalLauncher>(std::move(options));
  choice.local = local.get();
  choice.launcher = std::move(local);
  choice.description = absl::StrCat("local launcher (one process per actor, ",
                                    controller::DataPlaneTransportName(*transport), " data plane)");
  return choice;
}

}  // namespace tandem::cli
