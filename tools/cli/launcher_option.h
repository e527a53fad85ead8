// The launcher options shared by `tandem train` and the benchmarks that run
// pipelines: --launcher local|threads, --transport shm|tcp, --actor-binary,
// --device cpu|cuda[:N][+bf16].
#ifndef TANDEM_TOOLS_CLI_LAUNCHER_OPTION_H_
#define TANDEM_TOOLS_CLI_LAUNCHER_OPTION_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "actor/device.h"
#include "controller/launcher.h"
#include "controller/local_launcher.h"
#include "tools/cli/arguments.h"

namespace tandem::cli {

// Declares --launcher (with `extra_launchers`, e.g. "|reference", in its
// help), --transport and --actor-binary.
void AddLauncherOptions(Arguments& arguments, const std::string& extra_launchers = "");


struct LauncherChoice {
  std::unique_ptr<controller::Launcher> launcher;
  controller::LocalLauncher* local = nullptr;  // the same launcher, when it is a LocalLauncher
  std::string description;                     // e.g. "local launcher (processes, shm data plane)"
};

// Builds the launcher the options name ("local" or "threads"); InvalidArgument
// for another name or transport.
absl::StatusOr<LauncherChoice> MakeLauncher(const Arguments& arguments);

// The device --device names. InvalidArgument for a malformed name;
// FailedPrecondition for a GPU this build or machine does not have, with the
// CUDA runtime's reason.
absl::StatusOr<actor::DeviceSpec> DeviceFrom(const Arguments& arguments);

}  // namespace tandem::cli

#endif  // TANDEM_TOOLS_CLI_LAUNCHER_OPTION_H_
