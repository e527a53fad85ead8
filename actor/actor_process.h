// The actor process (binary `tandem-actor`, tools/actor_main.cc): dials the
// controller (a Unix socket, or host:port over TCP), proves it holds the
// job's token by answering the controller's challenge (rpc/auth.h; the
// token itself never leaves the process), serves the Actor interface over
// its data plane until told to shut down, and exits by itself when the
// controller's connection drops.
//
// Lifetime, from the process's point of view:
//  0. opens its device (backends/device.h: the CPU, or a GPU);
//  1. creates its DataPlane (shared-memory rings, or a TCP listener whose
//     peers prove the same token);
//  2. connects to `controller_address` and registers (Controller.challenge,
//     then Controller.register with its answer); both must be done within
//     `register_timeout` (an address that does not parse or answer is exit
//     code 1, a refused answer exit code 2);
//  3. runs its event loop: the ActorService answers the controller's calls
//     and computes on its own thread;
//  4. leaves the loop on Actor.shutdown (exit code 0), or when the control
//     connection drops or the controller has been silent (no call, not even
//     a heartbeat) for `controller_timeout` (exit code 3, within
//     `exit_grace` even if a step is computing: the data plane is aborted,
//     and a watchdog ends the process if unwinding takes longer).
// Diagnostics go to stderr, one line each; the local launcher prefixes them
// with the actor id.
#ifndef TANDEM_ACTOR_ACTOR_PROCESS_H_
#define TANDEM_ACTOR_ACTOR_PROCESS_H_

#include <cstdint>
#include <string>

#include "absl/time/time.h"
#include "actor/data_plane.h"
#include "backends/device.h"
#include "ir/device_spec.h"
#include "rpc/connection.h"

namespace tandem::actor {

struct ActorProcessOptions {
  rpc::ControlPlaneKind control_plane = rpc::ControlPlaneKind::kUnix;
  std::string controller_address;  // the socket's path, or host:port
  std::string token;  // the job's token (from the environment, never argv)
  // Over TCP: the controller's TLS certificate, the only one this actor
  // trusts (rpc/control_tls.h; from the environment too).
  std::string controller_certificate;
  // The node this actor runs on, as its launcher names it (Slurm's
  // SLURMD_NODENAME); told to the controller at registration. Empty on one
  // host.
  std::string node;
  int32_t actor = 0;
  int32_t num_actors = 0;
  ir::DataPlaneKind data_plane = ir::DataPlaneKind::kShm;
  DataPlaneOptions data_plane_options;
  ir::DeviceSpec device;  // opened before registering; a device that cannot open is exit code 1
  int threads = 1;    // the kernels' threads (ActorServiceOptions::threads)
  // Among the actors of its node (Slurm's SLURM_LOCALID): picks the GPU of a
  // `cuda` device without an index (GpuForRank); -1: the actor id.
  int32_t local_rank = -1;
  absl::Duration receive_timeout = absl::Seconds(30);
  absl::Duration register_timeout = absl::Seconds(30);
  // Once registered: exits (code kActorExitControllerLost) when the
  // controller has made no call, heartbeats included, for this long.
  absl::Duration controller_timeout = absl::Seconds(60);
  absl::Duration exit_grace = absl::Seconds(2);
};

// Exit codes of the actor process.
inline constexpr int kActorExitOk = 0;
inline constexpr int kActorExitSetupFailed = 1;  // bad options, no data plane, no controller
// Registration refused, either way: a wrong token, or a controller that
// cannot prove the job's (its token, or over TCP its TLS certificate).
inline constexpr int kActorExitRefused = 2;
inline constexpr int kActorExitControllerLost = 3;

// Runs the actor until shutdown or a lost controller; returns the exit code.
// Call from main(), once per process.
int RunActorProcess(const ActorProcessOptions& options);

}  // namespace tandem::actor

#endif  // TANDEM_ACTOR_ACTOR_PROCESS_H_
