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
#include <limits>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/time/time.h"
#include "actor/actor_process.h"

int main(int argc, char** argv) {
  CLI::App app("One actor process of a Tandem job; launchers start it. The job's token comes from TANDEM_JOB_TOKEN.",
               "tandem-actor");
  std::string socket;
  int32_t actor = 0;
  int32_t actors = 0;
  std::string transport = "shm";
  int64_t receive_timeout_ms = 30000;
  int64_t ring_mib = 256;
  std::string bind = "127.0.0.1";
  std::string device = "cpu";
  app.add_option("--controller", socket, "the controller's Unix socket")->required();
  app.add_option("--actor", actor, "this actor's id")
      ->required()
      ->check(CLI::Range(0, std::numeric_limits<int32_t>::max()));
  app.add_option("--actors", actors, "the number of actors in the job")
      ->required()
      ->check(CLI::Range(1, std::numeric_limits<int32_t>::max()));
  app.add_option("--transport", transport, "data plane: shm (one host) or tcp")
      ->check(CLI::IsMember({"shm", "tcp"}))
      ->capture_default_str();
  app.add_option("--receive-timeout-ms", receive_timeout_ms, "deadline of every data-plane receive")
      ->check(CLI::Range(int64_t{1}, int64_t{24} * 3600 * 1000))
      ->capture_default_str();
  app.add_option("--shm-ring-mib", ring_mib, "shared-memory ring per ordered pair of actors")
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  app.add_option("--bind", bind, "host the TCP data plane listens on")->capture_default_str();
  app.add_option("--device", device, "where the functions compute: cpu, cuda, cuda:N (+bf16)")->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& help) {
    return app.exit(help);
  } catch (const CLI::ParseError& error) {
    std::cerr << "tandem-actor: " << error.what() << "\nRun `tandem-actor --help` for usage.\n";
    return tandem::actor::kActorExitSetupFailed;
  }
  absl::StatusOr<tandem::ir::DataPlaneKind> kind = tandem::ir::ParseDataPlaneKind(transport);
  absl::StatusOr<tandem::actor::DeviceSpec> spec = tandem::actor::ParseDeviceSpec(device);
  for (const absl::Status& status : {kind.status(), spec.status()}) {
    if (!status.ok()) {
      std::cerr << "tandem-actor: " << status.message() << "\n";
      return tandem::actor::kActorExitSetupFailed;
    }
  }
  if (actor >= actors) {
    std::cerr << "tandem-actor: --actor " << actor << " is not below --actors " << actors << "\n";
    return tandem::actor::kActorExitSetupFailed;
  }
  tandem::actor::ActorProcessOptions options;
  options.controller_socket = socket;
  options.actor = actor;
  options.num_actors = actors;
  options.data_plane = *kind;
  options.device = *spec;
  options.data_plane_options.shm_ring_bytes = ring_mib << 20;
  options.data_plane_options.tcp_bind_host = bind;
  options.receive_timeout = absl::Milliseconds(receive_timeout_ms);
  if (const char* token = std::getenv("TANDEM_JOB_TOKEN"); token != nullptr) options.token = token;
  return tandem::actor::RunActorProcess(options);
}
