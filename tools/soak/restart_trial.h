// One trial of `tandem-soak --restart`: a `tandem train --max-restarts`
// run with checkpoints, struck by several faults at random moments, which
// must finish by itself with the checkpoints of a run that never failed.
//
// The faults (tools/soak/trial.h's kinds): SIGKILL (actor-kill), SIGSTOP
// (actor-stop: the actor goes silent) or SIGTERM (actor-drop: it leaves
// the job, as a node drained by its scheduler) to a random actor process
// of the moment (the actors change at every restart). Each comes uniformly
// in [0, max_delay] after the run's actors are all up, or, for a share of
// them, as soon as a checkpoint is being written (a .step-*.partial
// directory in the checkpoint root: the actors are writing their files);
// the next fault waits for the actors that replace the victim.
//
// Judged: the controller's exit code (0), its restart summary line, the
// checkpoints (the same names as the uninterrupted run's, each file byte
// for byte), and what is left behind (processes, run directories).
// Bounded by the options' deadlines; one thread, in a process that made
// itself a child subreaper (BecomeSubreaper). Not thread-safe.
#ifndef TANDEM_TOOLS_SOAK_RESTART_TRIAL_H_
#define TANDEM_TOOLS_SOAK_RESTART_TRIAL_H_

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "tools/soak/trial.h"

namespace tandem::soak {

struct RestartTrialOptions {
  // The `tandem` binary and the arguments after `tandem train`, without
  // --checkpoint-dir and --max-restarts (the trial adds them); they must
  // ask for checkpoints (--checkpoint-every).
  std::string tandem;
  std::vector<std::string> train_args;
  int32_t actors = 4;
  std::vector<Fault> kinds = {Fault::kActorKill, Fault::kActorStop, Fault::kActorDrop};
  int32_t faults = 2;         // per trial
  int32_t max_restarts = 4;   // --max-restarts
  absl::Duration max_delay = absl::Seconds(3);
  double during_checkpoint = 0.3;  // the share of faults timed to land during a checkpoint's write
  // The uninterrupted run's checkpoint root, the yardstick.
  std::string expected_checkpoints;
  absl::Duration run_timeout = absl::Seconds(600);
  absl::Duration leftover_grace = absl::Seconds(5);
};

struct RestartFault {
  Fault kind = Fault::kActorKill;
  int32_t actor = -1;
  double at_s = 0;                 // after the run started
  bool during_checkpoint = false;  // a checkpoint was being written as it struck
};

struct RestartTrialResult {
  std::vector<RestartFault> faults;  // those that struck (a short run may end before all of them)
  int exit_code = -1;                // -1: still running at the run's timeout (then killed)
  double seconds = 0;                // the run's wall time
  std::string error;                 // the controller's "tandem train: ..." line, if it failed
  // From its "restarts: N of M (K steps redone, S s lost)" line; -1 if none.
  int32_t restarts = -1;
  int64_t steps_redone = 0;
  double seconds_lost = 0;
  int32_t checkpoints = 0;       // compared with the uninterrupted run's
  std::string difference;        // the first difference from them, "" when identical
  std::vector<pid_t> leftover_processes;
  std::vector<std::string> leftover_directories;
  std::string problem;           // why the trial itself could not run as planned

  bool passed() const {
    return problem.empty() && exit_code == 0 && difference.empty() && checkpoints > 0 &&
           leftover_processes.empty() && leftover_directories.empty();
  }
};

// Runs `tandem train ARGS --checkpoint-dir DIR` once without faults into
// `root` (the yardstick for the trials); its wall time in seconds, or the
// problem.
absl::StatusOr<double> RunUninterrupted(const RestartTrialOptions& options, const std::string& root);

RestartTrialResult RunRestartTrial(const RestartTrialOptions& options, std::mt19937_64& random);

// The first difference between two checkpoint roots: their step-*
// directories' names, then every file's bytes; "" when identical.
// `compared` counts the checkpoints compared.
std::string CompareCheckpointRoots(const std::string& expected, const std::string& got, int32_t& compared);

}  // namespace tandem::soak

#endif  // TANDEM_TOOLS_SOAK_RESTART_TRIAL_H_
