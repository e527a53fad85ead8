// `tandem-actor`: one actor process of a Tandem job. Started by a launcher
// (the local launcher forks and execs it), never by hand in normal use:
//
//   TANDEM_JOB_TOKEN=... tandem-actor [--control unix|tcp] --controller SOCKET|HOST:PORT
//       --actor A --actors P [--transport shm|tcp|auto] [--receive-timeout-ms N] [--controller-timeout-ms N]
//       [--shm-ring-mib N] [--bind HOST] [--device cpu|cuda|cuda:N[+tf32|+bf16]] [--threads N]
//   TANDEM_JOB_TOKEN=... TANDEM_CONTROLLER_CERT=... srun ... tandem-actor --slurm --control tcp
//       --controller HOST:PORT --actors P ...
//
// With --slurm (a task of the Slurm launcher's one srun step), the actor
// takes its identity from Slurm instead of --actor: its id from
// SLURM_PROCID, its node from SLURMD_NODENAME (told to the controller at
// registration) and, with --device cuda, the GPU of its node-local id
// SLURM_LOCALID.
//
// The job's token comes from the environment, so that it never shows in
// process listings, and it never crosses a socket: the actor answers the
// controller's challenges with it (rpc/auth.h). Over TCP the control plane
// is TLS, and the actor trusts only the controller's certificate, from
// TANDEM_CONTROLLER_CERT (rpc/control_tls.h). See actor/actor_process.h
// for the lifetime and the exit codes.
#include <cstdlib>
#include <iostream>
#include <limits>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "actor/actor_process.h"
#include "backends/cpu/kernel_threads.h"
#include "ir/device_spec.h"
#include "rpc/connection.h"

namespace {

// A Slurm task's identity, from the environment srun gives it.
struct SlurmTask {
  int32_t procid = 0;
  int32_t localid = 0;
  std::string node;
};

absl::StatusOr<int32_t> SlurmNumber(const char* name, int32_t below) {
  const char* value = std::getenv(name);
  if (value == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("--slurm: ", name, " is not set (is this a task of an srun step?)"));
  }
  int32_t number = 0;
  if (!absl::SimpleAtoi(value, &number) || number < 0 || number >= below) {
    return absl::InvalidArgumentError(
        absl::StrCat("--slurm: ", name, "='", value, "' is not a number in [0, ", below, ")"));
  }
  return number;
}

absl::StatusOr<SlurmTask> SlurmTaskFromEnvironment(int32_t actors) {
  SlurmTask task;
  absl::StatusOr<int32_t> procid = SlurmNumber("SLURM_PROCID", actors);
  if (!procid.ok()) return procid.status();
  absl::StatusOr<int32_t> localid = SlurmNumber("SLURM_LOCALID", actors);
  if (!localid.ok()) return localid.status();
  task.procid = *procid;
  task.localid = *localid;
  const char* node = std::getenv("SLURMD_NODENAME");
  if (node == nullptr || *node == '\0') return absl::InvalidArgumentError("--slurm: SLURMD_NODENAME is not set");
  task.node = node;
  if (task.node.size() > 255) return absl::InvalidArgumentError("--slurm: SLURMD_NODENAME is longer than 255 bytes");
  return task;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("One actor process of a Tandem job; launchers start it. The job's token comes from TANDEM_JOB_TOKEN.",
               "tandem-actor");
  std::string control = "unix";
  std::string controller;
  int32_t actor = 0;
  int32_t actors = 0;
  std::string transport = "shm";
  int64_t receive_timeout_ms = 30000;
  int64_t controller_timeout_ms = 60000;
  int64_t ring_mib = 256;
  int threads = 1;
  std::string bind = "127.0.0.1";
  std::string device = "cpu";
  app.add_option("--control", control, "how to reach the controller: unix (a socket path) or tcp (host:port)")
      ->check(CLI::IsMember({"unix", "tcp"}))
      ->capture_default_str();
  app.add_option("--controller", controller, "the controller's Unix socket (--control unix) or host:port (tcp)")
      ->required();
  bool slurm = false;
  CLI::Option* actor_option = app.add_option("--actor", actor, "this actor's id");
  actor_option->check(CLI::Range(0, std::numeric_limits<int32_t>::max()));
  app.add_option("--actors", actors, "the number of actors in the job")
      ->required()
      ->check(CLI::Range(1, std::numeric_limits<int32_t>::max()));
  app.add_option("--transport", transport,
                 "data plane: shm (one host), tcp, or auto (both: the controller says which per peer)")
      ->check(CLI::IsMember({"shm", "tcp", "auto"}))
      ->capture_default_str();
  app.add_option("--receive-timeout-ms", receive_timeout_ms, "deadline of every data-plane receive")
      ->check(CLI::Range(int64_t{1}, int64_t{24} * 3600 * 1000))
      ->capture_default_str();
  app.add_option("--controller-timeout-ms", controller_timeout_ms,
                 "exit when the controller has sent nothing (no call, no heartbeat) for this long")
      ->check(CLI::Range(int64_t{100}, int64_t{24} * 3600 * 1000))
      ->capture_default_str();
  app.add_option("--shm-ring-mib", ring_mib, "shared-memory ring per ordered pair of actors")
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  app.add_option("--bind", bind,
                 "the IPv4 address the TCP data plane listens on (and peers dial); `node`: what this host's name "
                 "resolves to")
      ->capture_default_str();
  app.add_flag("--slurm", slurm,
               "a task of an srun step: the id from SLURM_PROCID, the node from SLURMD_NODENAME, the GPU of "
               "--device cuda from SLURM_LOCALID among the GPUs the task sees")
      ->excludes(actor_option);
  app.add_option("--device", device, "where the functions compute: cpu, cuda, cuda:N (+tf32 or +bf16)")->capture_default_str();
  app.add_option("--threads", threads, "threads of the CPU kernels (0: every core); the bits do not depend on it")
      ->check(CLI::Range(0, tandem::cpu::kMaxKernelThreads))
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& help) {
    return app.exit(help);
  } catch (const CLI::ParseError& error) {
    std::cerr << "tandem-actor: " << error.what() << "\nRun `tandem-actor --help` for usage.\n";
    return tandem::actor::kActorExitSetupFailed;
  }
  absl::StatusOr<tandem::ir::DataPlaneKind> kind = tandem::ir::ParseDataPlaneKind(transport);
  absl::StatusOr<tandem::ir::DeviceSpec> spec = tandem::ir::ParseDeviceSpec(device);
  absl::StatusOr<tandem::rpc::ControlPlaneKind> control_plane = tandem::rpc::ParseControlPlaneKind(control);
  absl::Status address = absl::OkStatus();
  if (control_plane.ok() && *control_plane == tandem::rpc::ControlPlaneKind::kTcp) {
    if (absl::StatusOr<tandem::rpc::HostPort> parsed = tandem::rpc::ParseHostPort(controller); !parsed.ok()) {
      address = absl::InvalidArgumentError(absl::StrCat("--controller with --control tcp: ", parsed.status().message()));
    }
  } else if (controller.empty()) {
    address = absl::InvalidArgumentError("--controller: the controller's socket path is empty");
  }
  for (const absl::Status& status : {kind.status(), spec.status(), control_plane.status(), address}) {
    if (!status.ok()) {
      std::cerr << "tandem-actor: " << status.message() << "\n";
      return tandem::actor::kActorExitSetupFailed;
    }
  }
  std::string node;
  int32_t local_rank = -1;
  if (slurm) {
    absl::StatusOr<SlurmTask> task = SlurmTaskFromEnvironment(actors);
    if (!task.ok()) {
      std::cerr << "tandem-actor: " << task.status().message() << "\n";
      return tandem::actor::kActorExitSetupFailed;
    }
    actor = task->procid;
    node = task->node;
    local_rank = task->localid;  // the GPU among those the task sees (GpuForRank)
  } else if (actor_option->count() == 0) {
    std::cerr << "tandem-actor: --actor is required (or --slurm, to take it from SLURM_PROCID)\n";
    return tandem::actor::kActorExitSetupFailed;
  }
  if (actor >= actors) {
    std::cerr << "tandem-actor: --actor " << actor << " is not below --actors " << actors << "\n";
    return tandem::actor::kActorExitSetupFailed;
  }
  if (bind == "node") {
    absl::StatusOr<std::string> resolved = tandem::rpc::ThisHostAddress();
    if (!resolved.ok()) {
      std::cerr << "tandem-actor: --bind node: " << resolved.status().message() << "\n";
      return tandem::actor::kActorExitSetupFailed;
    }
    bind = *resolved;
  }
  tandem::actor::ActorProcessOptions options;
  options.control_plane = *control_plane;
  options.controller_address = controller;
  options.actor = actor;
  options.node = node;
  options.num_actors = actors;
  options.data_plane = *kind;
  options.device = *spec;
  options.threads = threads;
  options.local_rank = local_rank;
  options.data_plane_options.shm_ring_bytes = ring_mib << 20;
  options.data_plane_options.tcp_bind_host = bind;
  options.receive_timeout = absl::Milliseconds(receive_timeout_ms);
  options.controller_timeout = absl::Milliseconds(controller_timeout_ms);
  if (const char* token = std::getenv("TANDEM_JOB_TOKEN"); token != nullptr) options.token = token;
  if (const char* certificate = std::getenv("TANDEM_CONTROLLER_CERT"); certificate != nullptr) {
    options.controller_certificate = certificate;
  }
  return tandem::actor::RunActorProcess(options);
}
