// `tandem-actor`: one actor process of a Tandem job. Started by a launcher
// (the local launcher forks and execs it), never by hand in normal use:
//
//   TANDEM_JOB_TOKEN=... tandem-actor --controller SOCKET --actor A --actors P
//       [--transport shm|tcp] [--receive-timeout-ms N] [--shm-ring-mib N]
//       [--bind HOST] [--device cpu|cuda|cuda:N[+bf16]]
//
// The job's token comes from the environment, so that it never shows in
// process listings. See actor/actor_process.h for the lifetime and the exit
// codes.
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "actor/actor_process.h"
#include "tools/cli/arguments.h"

namespace {

constexpr char kUsage[] =
    "usage: TANDEM_JOB_TOKEN=... tandem-actor --controller SOCKET --actor A --actors P [options]\n\n"
    "One actor process of a Tandem job; launchers start it.\n\n";

int Run(const std::vector<std::string>& args) {
  tandem::cli::Arguments arguments;
  arguments.AddOption("controller", "the controller's Unix socket");
  arguments.AddOption("actor", "this actor's id");
  arguments.AddOption("actors", "the number of actors in the job");
  arguments.AddOption("transport", "data plane: shm (one host) or tcp", "shm");
  arguments.AddOption("receive-timeout-ms", "deadline of every data-plane receive", "30000");
  arguments.AddOption("shm-ring-mib", "shared-memory ring per ordered pair of actors", "256");
  arguments.AddOption("bind", "host the TCP data plane listens on", "127.0.0.1");
  arguments.AddOption("device", "where the functions compute: cpu, cuda, cuda:N (+bf16)", "cpu");
  arguments.AddFlag("help", "show this help");
  if (absl::Status status = arguments.Parse(args); !status.ok()) {
    std::cerr << "tandem-actor: " << status.message() << "\n\n" << kUsage << arguments.Usage();
    return tandem::actor::kActorExitSetupFailed;
  }
  if (arguments.Flag("help")) {
    std::cout << kUsage << arguments.Usage();
    return 0;
  }
  tandem::actor::ActorProcessOptions options;
  absl::StatusOr<std::string> socket = arguments.Require("controller");
  absl::StatusOr<int64_t> actor = arguments.GetInt("actor");
  absl::StatusOr<int64_t> actors = arguments.GetInt("actors");
  absl::StatusOr<int64_t> receive_ms = arguments.GetInt("receive-timeout-ms");
  absl::StatusOr<int64_t> ring_mib = arguments.GetInt("shm-ring-mib");
  absl::StatusOr<tandem::actor::DataPlaneKind> kind =
      tandem::actor::ParseDataPlaneKind(*arguments.Get("transport"));
  absl::StatusOr<tandem::actor::DeviceSpec> device = tandem::actor::ParseDeviceSpec(*arguments.Get("device"));
  for (const absl::Status& status : {socket.status(), actor.status(), actors.status(), receive_ms.status(),
                                     ring_mib.status(), kind.status(), device.status()}) {
    if (!status.ok()) {
      std::cerr << "tandem-actor: " << status.message() << "\n";
      return tandem::actor::kActorExitSetupFailed;
    }
  }
  options.controller_socket = *socket;
  options.actor = static_cast<int32_t>(*actor);
  options.num_actors = static_cast<int32_t>(*actors);
  options.data_plane = *kind;
  options.device = *device;
  options.data_plane_options.shm_ring_bytes = *ring_mib << 20;
  options.data_plane_options.tcp_bind_host = *arguments.Get("bind");
  options.receive_timeout = absl::Milliseconds(*receive_ms);
  if (const char* token = std::getenv("TANDEM_JOB_TOKEN"); token != nullptr) options.token = token;
  return tandem::actor::RunActorProcess(options);
}

}  // namespace

int main(int argc, char** argv) { return Run(std::vector<std::string>(argv + 1, argv + argc)); }
