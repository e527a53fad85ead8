// SrunStep: the Slurm launcher's process layer. Runs every actor of a job
// as a task of ONE `srun` step inside the caller's allocation (an sbatch
// script or salloc), across the allocation's nodes, and learns from srun's
// own output which task ended, where and how.
//
//   srun --ntasks=P --kill-on-bad-exit=1 --label --unbuffered --export=ALL
//        --job-name=tandem-actors [extra] tandem-actor --slurm ARGS...
//
// Each task takes its actor id from SLURM_PROCID (tools/actor_main.cc); the
// job's token reaches it in the environment (srun exports the controller's,
// to which SrunStep adds the spec's variables), never in argv.
//
// srun's output, line by line (on ProcessGroup's reader thread):
//  - "K: text" (a task's line, labelled by --label) goes to the sink as
//    "[actor K on NODE] text" once the actor's node is known (SetNode, from
//    its registration), "[actor K] text" before;
//  - "srun: error: NODE: task K: REASON" (or "tasks 0-2,5: REASON") records
//    that those tasks ended on NODE, which Poll/WaitAny then report, each
//    task once and in the order srun reported them, as ExitInfo with `node`
//    and `report` set;
//  - slurmstepd's "*** STEP ... CANCELLED ... ***" (scancel, a time limit,
//    or srun --kill-on-bad-exit after a task failed) is added to the
//    reports: as the cause, "(*** ... ***)", to those of tasks that end
//    after it; as what followed, "; then Slurm: *** ... ***", to those that
//    ended before it. srun's output and its tasks' reach us through
//    different streams, so a task's end is held `settle` after it was
//    parsed (or until srun ends) before it is reported, for the
//    cancellation to arrive;
//  - every other line goes to the sink as "[srun] line".
// When srun itself ends and no task's end explains it (it could not start
// the step, say), the end is reported once as ExitInfo for actor -1 with
// srun's last error line.
//
// Shutdown: SIGTERM to srun (which signals every task and waits for them),
// at least `min_grace` for it to end, then SIGKILL (srun would wait for the
// step daemon of a node that is gone). With --kill-on-bad-exit,
// one task that fails ends the whole step, so no task outlives a failure.
//
// Thread-safety: every method from any thread.
#ifndef TANDEM_CONTROLLER_SRUN_STEP_H_
#define TANDEM_CONTROLLER_SRUN_STEP_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "controller/process_group.h"

namespace tandem::controller {

struct SrunStepOptions {
  int32_t num_actors = 0;
  // The actor: its program (an absolute path valid on every node), its
  // arguments without an identity (SrunStep adds none: the program takes it
  // from Slurm) and the variables added to its environment.
  ProcessSpec actor;
  // srun's path; empty: found in PATH.
  std::string srun;
  // More srun options, before the program (e.g. "--overlap", "--gpus-per-task=1").
  std::vector<std::string> srun_args;
  // Where prefixed lines go; empty means the controller's stderr.
  LineSink sink;
  // Shutdown waits at least this long between SIGTERM and SIGKILL. srun
  // answers SIGTERM within a moment while every node's step daemon does;
  // with a node lost it would wait for that daemon, so it is killed: the
  // allocation's end then ends the step's other tasks.
  absl::Duration min_grace = absl::Seconds(1);
  // How long a task's end is held for a cancellation reported after it.
  absl::Duration settle = absl::Milliseconds(500);
};

// The task ids of srun's "0-2,5" (bounded by `num_tasks`); InvalidArgument
// for anything else.
absl::StatusOr<std::vector<int32_t>> ParseSrunTaskList(absl::string_view list, int32_t num_tasks);

class SrunStep final : public ActorProcesses {
 public:
  // Starts srun. FailedPrecondition outside a Slurm allocation (no
  // SLURM_JOB_ID) or without srun; ProcessGroup's errors.
  static absl::StatusOr<std::unique_ptr<SrunStep>> Start(SrunStepOptions options);
  ~SrunStep() override;

  std::optional<ExitInfo> Poll() override ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<ExitInfo> WaitAny(absl::Duration timeout) override ABSL_LOCKS_EXCLUDED(mu_);
  pid_t pid(ActorId) const override { return -1; }  // the tasks run under slurmstepd, maybe elsewhere
  absl::Status Shutdown(absl::Duration grace) override;

  // `actor` runs on `node` (its registration says so).
  void SetNode(int32_t actor, const std::string& node) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  explicit SrunStep(SrunStepOptions options);
  void OnLine(absl::string_view line) ABSL_LOCKS_EXCLUDED(mu_);
  // The next task's end, once it settled (or srun ended), if any.
  std::optional<ExitInfo> TakeLocked(bool srun_ended) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether srun has ended; drains its output first, so that its last
  // lines were parsed when this says yes.
  bool SrunEnded() ABSL_LOCKS_EXCLUDED(mu_);

  const SrunStepOptions options_;
  std::unique_ptr<ProcessGroup> srun_;

  absl::Mutex mu_;
  struct Ended {
    ExitInfo exit;
    absl::Time parsed;
  };
  std::deque<Ended> ended_ ABSL_GUARDED_BY(mu_);  // parsed, not reported yet
  std::vector<bool> seen_ ABSL_GUARDED_BY(mu_);      // by actor: its end was parsed
  std::vector<std::string> nodes_ ABSL_GUARDED_BY(mu_);
  std::string cancelled_ ABSL_GUARDED_BY(mu_);   // slurmstepd's "*** ... CANCELLED ... ***"
  std::string last_error_ ABSL_GUARDED_BY(mu_);  // srun's last "srun: error:" line
  std::optional<ExitInfo> srun_exit_ ABSL_GUARDED_BY(mu_);
  bool srun_reported_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace tandem::controller

#endif  // TANDEM_CONTROLLER_SRUN_STEP_H_
