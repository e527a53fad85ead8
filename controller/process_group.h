// ProcessGroup: the local launcher's process layer. Starts one child process
// per actor (fork + execve), prefixes their output with the actor id, reports
// children that die, and leaves no orphans on any exit path.
//
// No-orphan guarantees, by exit path of the controller:
//  - Normal exit or an error path: Shutdown() (or the destructor) sends
//    SIGTERM to the whole process group, waits up to the grace period, sends
//    SIGKILL, and reaps every child. Every wait is bounded.
//  - Ctrl-C: the children live in their own process group, so the terminal's
//    SIGINT reaches only the controller. If the controller handles it and
//    unwinds, the destructor runs; if it dies of it, the next case applies.
//  - Controller crash (SIGKILL, abort, ...): each child asked the kernel for
//    SIGKILL when its parent dies (PR_SET_PDEATHSIG), and checked after fork
//    that the parent was still alive. Caveat of the kernel mechanism: the
//    "parent" is the thread that called Start(), so Start() must be called
//    from a thread that outlives the group (normally the main thread).
//
// Descendants of the children (a shell's background job, say) stay in the
// group and are reached by the group-wide SIGTERM/SIGKILL of Shutdown(); they
// are not covered by the crash path unless they set PDEATHSIG themselves.
//
// A child's end is reported (Poll, WaitAny) once every line it wrote has
// gone to the sink: its output pipe reached end of file, or, when a
// descendant still holds the pipe, a second after the end.
//
// Ownership: the controller owns the group through the unique_ptr returned by
// Start(). The group owns the children, their pipes and one reader thread.
// Thread-safe: every method may be called from any thread. Nothing else in
// the process may reap the children (e.g. waitpid(-1, ...)), or pids could be
// reused under the group.
#ifndef TANDEM_CONTROLLER_PROCESS_GROUP_H_
#define TANDEM_CONTROLLER_PROCESS_GROUP_H_

#include <poll.h>
#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "schedules/schedule.h"

namespace tandem::controller {

// Receives one output line of a child, already prefixed ("[actor 2] ..."),
// without its trailing newline. Called only on the group's reader thread,
// one line at a time.
using LineSink = std::function<void(absl::string_view line)>;

// What to run for one actor. The actor id is the spec's index.
struct ProcessSpec {
  // Path of the executable; not searched in PATH. Also argv[0].
  std::string program;
  // argv[1], argv[2], ...
  std::vector<std::string> args;
  // Added to the controller's environment (replacing variables of the same
  // name), e.g. the job's token. TANDEM_ACTOR_ID=<id> is always added.
  std::vector<std::pair<std::string, std::string>> environment;
};

struct ProcessGroupOptions {
  // Where prefixed output lines go; empty means the controller's stderr.
  LineSink sink;
  // Whether lines get the "[actor N] " prefix; without it the sink sees each
  // line as the child wrote it (SrunStep prefixes srun's lines itself).
  bool prefix_lines = true;
  // Grace between SIGTERM and SIGKILL when the group is destroyed without an
  // explicit Shutdown().
  absl::Duration destructor_grace = absl::Seconds(1);
  // How long Start() waits for one child to reach execve.
  absl::Duration exec_timeout = absl::Seconds(10);
};

// How a child ended.
struct ExitInfo {
  ActorId actor;
  pid_t pid = 0;
  std::string program;
  int exit_code = 0;  // meaningful when signal == 0
  int signal = 0;     // the signal that killed it; 0 if it exited
  bool core_dumped = false;
  // A task of a Slurm step (SrunStep): the node it ran on and how srun
  // reported its end ("Killed", "Exited with exit code 3"); pid is 0 there.
  std::string node;
  std::string report;

  // "actor 2 (/path/tandem-actor, pid 1234) was killed by signal 9 (Killed)"
  // or "... exited with status 3"; for a Slurm task, "srun: task 2 on node
  // n2: Killed"; for a launcher's helper (actor -1, such
  // as srun itself), "srun (pid 1234) exited with status 1: REPORT".
  std::string Describe() const;
  // Unavailable(Describe()): what the driver reports for a lost actor.
  absl::Status AsUnavailable() const;
};

// What a launcher needs of its actors' processes, wherever they run: each
// end reported once, and a shutdown that leaves none behind. ProcessGroup
// (one child per actor, on this host) and SrunStep (the tasks of one srun
// step across a Slurm allocation, controller/srun_step.h) provide it.
class ActorProcesses {
 public:
  virtual ~ActorProcesses() = default;
  // An actor's process that ended and was not reported yet, or nullopt.
  // Never blocks.
  virtual std::optional<ExitInfo> Poll() = 0;
  // The next end not reported yet. DeadlineExceeded after `timeout`;
  // FailedPrecondition when nothing is left to report.
  virtual absl::StatusOr<ExitInfo> WaitAny(absl::Duration timeout) = 0;
  // The actor's pid on this host; -1 if there is none (or it runs elsewhere).
  virtual pid_t pid(ActorId actor) const = 0;
  // Ends every process (politely, then not) and waits for them, bounded.
  virtual absl::Status Shutdown(absl::Duration grace) = 0;
};

class ProcessGroup final : public ActorProcesses {
 public:
  // Starts one child per spec, in order, each in the group's process group,
  // with stdin from /dev/null and stdout+stderr through one pipe to the
  // reader thread. Returns once every child has reached execve. If a child
  // cannot be started (e.g. "actor 2: cannot execute /path: No such file or
  // directory"), the children started so far are killed and reaped and the
  // error is returned.
  static absl::StatusOr<std::unique_ptr<ProcessGroup>> Start(std::vector<ProcessSpec> specs,
                                                             ProcessGroupOptions options = {});

  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  // Shutdown(options.destructor_grace) unless Shutdown() already ran.
  ~ProcessGroup() override;

  int32_t size() const { return static_cast<int32_t>(children_.size()); }
  // The actor's pid, or -1 if there is no such actor.
  pid_t pid(ActorId actor) const override;
  // The process group every child (and, by default, its descendants) is in.
  pid_t process_group_id() const { return process_group_id_; }

  // A child that ended and was not reported yet, or nullopt. Never blocks.
  std::optional<ExitInfo> Poll() override ABSL_LOCKS_EXCLUDED(mu_);
  // The next child that ends (or ended and was not reported yet), each child
  // reported once. DeadlineExceeded after `timeout`; FailedPrecondition when
  // every child has already been reported.
  absl::StatusOr<ExitInfo> WaitAny(absl::Duration timeout) override ABSL_LOCKS_EXCLUDED(mu_);

  // Sends `signal` to one child. FailedPrecondition if it has already ended.
  absl::Status Kill(ActorId actor, int signal) ABSL_LOCKS_EXCLUDED(mu_);

  // SIGTERM to the group, up to `grace` for the children to end, SIGKILL to
  // the group, reap every child, then drain and join the reader thread
  // (partial last lines are flushed to the sink). Idempotent: later calls
  // return the first call's status. DeadlineExceeded, naming the actors, if
  // a child survives SIGKILL for 5 s (uninterruptible sleep).
  absl::Status Shutdown(absl::Duration grace) override ABSL_LOCKS_EXCLUDED(shutdown_mu_, mu_);

 private:
  struct Child {
    ActorId actor;
    std::string program;
    pid_t pid = -1;
    int pidfd = -1;  // -1 where pidfd_open is unavailable; closed by ~ProcessGroup
    // Set once the child's end was seen with waitid(WNOWAIT); it stays a
    // zombie, holding its pid (and the leader's process group id), until
    // Shutdown() reaps it, so kill()/killpg() can never hit a reused pid.
    std::optional<ExitInfo> exit;
    absl::Time exit_seen;  // when `exit` was set, on the monotonic clock
    bool reaped = false;
    bool output_ended = false;  // its output pipe reached end of file, every line sent to the sink
  };
  // One child's output pipe, owned by the reader thread once it runs.
  struct OutputStream {
    ActorId actor;
    int fd = -1;
    std::string partial;  // bytes after the last newline
  };

  explicit ProcessGroup(ProcessGroupOptions options);

  // Forks and execs one child; on success appends it to children_.
  absl::Status StartChild(ActorId actor, const ProcessSpec& spec);
  void ReaderLoop(std::vector<OutputStream> streams);
  void EmitLines(OutputStream& stream, bool flush_partial);

  // Records the end of every child that ended, without reaping it.
  void ObserveExitsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The first ended child whose output was all delivered (or whose grace for
  // it is over), taken from unreported_.
  std::optional<ExitInfo> TakeUnreportedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The reader thread is done with `actor`'s output.
  void OutputEnded(ActorId actor) ABSL_LOCKS_EXCLUDED(mu_);
  // Sends `signal` to the group and to each child not seen to end.
  void SignalAllLocked(int signal) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The children not seen to end, and their pidfds to poll.
  struct Running {
    std::vector<pollfd> pidfds;
    int count = 0;
    // Else a poll wakes every few milliseconds to look: a child without a
    // pidfd, or an ended one whose output is still coming.
    bool every_one_has_a_pidfd = true;
    bool output_pending = false;
    // Waits (mu_ not held) until one of them may have ended, or `deadline`.
    void AwaitAnEnd(absl::Time deadline);
  };
  Running RunningLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Waits until every child was seen to end; false if `deadline` passed.
  bool AwaitAllEnded(absl::Time deadline) ABSL_LOCKS_EXCLUDED(mu_);

  const ProcessGroupOptions options_;
  const pid_t controller_pid_;
  // Set in Start() before any other thread exists, then read-only.
  pid_t process_group_id_ = 0;
  std::vector<std::unique_ptr<Child>> children_;  // the vector is fixed after Start()
  std::vector<OutputStream> pending_streams_;     // handed to the reader thread

  absl::Mutex mu_;  // guards the mutable fields of every Child (exit, reaped)
  std::deque<int32_t> unreported_ ABSL_GUARDED_BY(mu_);  // ended, in the order seen
  absl::Mutex shutdown_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  std::optional<absl::Status> shutdown_status_ ABSL_GUARDED_BY(shutdown_mu_);
  // A byte written to the wake pipe tells the reader to drain and stop.
  int reader_wake_read_fd_ = -1;
  int reader_wake_write_fd_ = -1;
  std::thread reader_ ABSL_GUARDED_BY(shutdown_mu_);
};

}  // namespace tandem::controller

#endif  // TANDEM_CONTROLLER_PROCESS_GROUP_H_
