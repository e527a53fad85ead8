// One trial of `tandem-soak`: start a `tandem train` run with the local
// launcher, inject one fault at a random moment, and measure how the run
// ends: how long until the failure was detected, what the controller said,
// and what it left behind.
//
// Faults:
//  - kActorKill: SIGKILL to a random actor process. Detected when the
//    controller exits (it should fail with Unavailable naming the actor).
//  - kActorStop: SIGSTOP to a random actor. Detected when the controller
//    exits (it should fail with DeadlineExceeded: no heartbeat).
//  - kActorDrop: SIGTERM to a random actor: it leaves the job, as a node
//    drained by its scheduler would. Detected as a kill is.
//  - kControllerKill: SIGKILL to the controller. Detected when every actor
//    process has exited (PR_SET_PDEATHSIG).
// Leftovers, checked after detection plus a grace period: actor processes
// of the run still alive (the recorded actors and anything else in their
// process group), and `tandem-*` run directories left in the run's private
// TMPDIR. The trial then kills and removes whatever is left, so the next
// trial starts clean.
//
// Every wait is bounded by the options' deadlines. RunTrial() must be called
// from one thread, in a process that has made itself a child subreaper
// (BecomeSubreaper()), so that actors orphaned by a controller kill are
// reparented to it and can be reaped. Not thread-safe.
#ifndef TANDEM_TOOLS_SOAK_TRIAL_H_
#define TANDEM_TOOLS_SOAK_TRIAL_H_

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace tandem::soak {

enum class Fault { kActorKill, kActorStop, kActorDrop, kControllerKill };

// "actor-kill", "actor-stop", "actor-drop", "controller-kill", and back.
absl::string_view FaultName(Fault fault);
absl::StatusOr<Fault> ParseFault(absl::string_view name);
// The signal a fault sends: SIGKILL, SIGSTOP, SIGTERM, SIGKILL.
int FaultSignal(Fault fault);

struct TrialOptions {
  // The `tandem` binary and the arguments after `tandem train`.
  std::string tandem;
  std::vector<std::string> train_args;
  // How many actor processes the run starts (must match train_args).
  int32_t actors = 4;
  // The fault comes uniformly in [0, max_delay] after the last actor
  // process appeared (so: during setup or during the steps).
  absl::Duration max_delay = absl::Seconds(3);
  // Bounds: until every actor process appears; from the fault until it is
  // detected; after detection until the leftovers are judged.
  absl::Duration start_timeout = absl::Seconds(60);
  absl::Duration detect_timeout = absl::Seconds(30);
  absl::Duration leftover_grace = absl::Seconds(5);
};

struct TrialResult {
  Fault fault = Fault::kActorKill;
  int32_t actor = -1;            // the victim for actor faults
  double delay_s = 0;            // fault time after the actors appeared
  std::optional<double> detect_s;  // nullopt: not detected within detect_timeout
  // The controller's exit: its code, or 128 + the signal that ended it;
  // -1 if it had not exited when the trial gave up.
  int exit_code = -1;
  std::string error;             // the controller's "tandem train: ..." line, or its last stderr line
  bool training_started = false;  // a step finished before the fault
  std::vector<pid_t> leftover_processes;
  std::vector<std::string> leftover_directories;
  std::string problem;           // why the trial itself could not run as planned, if it could not
};

// Makes this process the reaper of orphaned descendants (PR_SET_CHILD_SUBREAPER).
absl::Status BecomeSubreaper();

TrialResult RunTrial(const TrialOptions& options, Fault fault, std::mt19937_64& random);

}  // namespace tandem::soak

#endif  // TANDEM_TOOLS_SOAK_TRIAL_H_
