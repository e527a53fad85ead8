#include "controller/process_group.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <csignal>
#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/errno_status.h"

extern char** environ;  // NOLINT: POSIX; read before fork to build each child's environment

namespace tandem::controller {
namespace {

// How long Shutdown() waits for children after SIGKILL, and how long the
// reader keeps draining pipes after it is told to stop.
constexpr absl::Duration kKillTimeout = absl::Seconds(5);
constexpr absl::Duration kDrainTimeout = absl::Seconds(1);
// How long an ended child's report waits for the rest of its output, should
// a descendant keep its pipe open.
constexpr absl::Duration kOutputGrace = absl::Seconds(1);
// Slice of a wait where a child has no pidfd to poll.
constexpr absl::Duration kPollSlice = absl::Milliseconds(10);
// A line longer than this is emitted in pieces.
constexpr size_t kMaxLineBytes = 64 * 1024;
constexpr int kChildFailureExitCode = 127;

// Every grace and timeout here is kept on the monotonic clock: a step of the
// wall clock (NTP, a VM resumed) must neither cut a child's SIGTERM grace
// short nor stretch it. The absl::Time it returns is only ever compared with
// others from this function.
absl::Time MonotonicNow() {
  return absl::UnixEpoch() + absl::FromChrono(std::chrono::steady_clock::now().time_since_epoch());
}

// What a child reports on its error pipe when it cannot reach execve.
enum class ChildStage : int32_t { kSetProcessGroup, kRedirect, kExec };
struct ChildFailure {
  ChildStage stage;
  int32_t error;
};

std::string ActorLabel(ActorId actor) { return absl::StrCat("actor ", actor.value); }

void WriteAll(int fd, absl::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t written = write(fd, bytes.data(), bytes.size());
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) return;
    bytes.remove_prefix(static_cast<size_t>(written));
  }
}

void WriteLineToStderr(absl::string_view line) { WriteAll(STDERR_FILENO, absl::StrCat(line, "\n")); }

int PollTimeoutMs(absl::Duration remaining) {
  if (remaining <= absl::ZeroDuration()) return 0;
  if (remaining == absl::InfiniteDuration()) return -1;
  return static_cast<int>(std::min<int64_t>(absl::ToInt64Milliseconds(remaining) + 1, INT_MAX));
}

int OpenPidfd(pid_t pid) {
#ifdef SYS_pidfd_open
  const long fd = syscall(SYS_pidfd_open, pid, 0);  // NOLINT(runtime/int): syscall's type
  if (fd >= 0) {
    fcntl(static_cast<int>(fd), F_SETFD, FD_CLOEXEC);
    return static_cast<int>(fd);
  }
#endif
  return -1;
}

// Moves `fd` above the standard descriptors so dup2 onto 0..2 cannot clobber it.
int MoveAboveStandardFds(int fd) {
  if (fd > STDERR_FILENO) return fd;
  return fcntl(fd, F_DUPFD_CLOEXEC, STDERR_FILENO + 1);
}

[[noreturn]] void ReportChildFailure(int error_fd, ChildStage stage, int error) {
  const ChildFailure failure{stage, error};
  (void)!write(error_fd, &failure, sizeof(failure));
  _exit(kChildFailureExitCode);
}

// Runs in the child between fork and execve: only async-signal-safe calls,
// everything else was prepared by the parent.
[[noreturn]] void RunChild(pid_t parent, pid_t process_group, int output_fd, int error_fd,
                           char* const* argv, char* const* envp) {
  // Die with the controller, and make sure it has not died already.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(kChildFailureExitCode);
  if (setpgid(0, process_group) != 0) ReportChildFailure(error_fd, ChildStage::kSetProcessGroup, errno);

  // The controller's signal mask and handlers are not the actor's business.
  sigset_t empty;
  sigemptyset(&empty);
  sigprocmask(SIG_SETMASK, &empty, nullptr);
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  for (int signal = 1; signal < NSIG; ++signal) sigaction(signal, &default_action, nullptr);

  error_fd = MoveAboveStandardFds(error_fd);
  output_fd = MoveAboveStandardFds(output_fd);
  const int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null_fd < 0 || output_fd < 0 || dup2(null_fd, STDIN_FILENO) < 0 || dup2(output_fd, STDOUT_FILENO) < 0 ||
      dup2(output_fd, STDERR_FILENO) < 0) {
    ReportChildFailure(error_fd, ChildStage::kRedirect, errno);
  }
  // Descriptors the controller leaked without O_CLOEXEC (sockets to other
  // actors, say) must not keep connections alive in this child.
#ifdef SYS_close_range
  syscall(SYS_close_range, STDERR_FILENO + 1, ~0U, 4 /* CLOSE_RANGE_CLOEXEC */);
#endif
  execve(argv[0], argv, envp);
  ReportChildFailure(error_fd, ChildStage::kExec, errno);
}

// "NAME=value" for the parent's environment with `overrides` replacing or
// adding variables.
std::vector<std::string> ChildEnvironment(const std::vector<std::pair<std::string, std::string>>& overrides) {
  std::set<std::string, std::less<>> names;
  for (const auto& [name, value] : overrides) names.insert(name);
  std::vector<std::string> result;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const absl::string_view text(*entry);
    const absl::string_view name = text.substr(0, text.find('='));
    if (!names.contains(name)) result.emplace_back(text);
  }
  for (const auto& [name, value] : overrides) result.push_back(absl::StrCat(name, "=", value));
  return result;
}

std::vector<char*> NullTerminated(std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  pointers.reserve(strings.size() + 1);
  for (std::string& s : strings) pointers.push_back(s.data());
  pointers.push_back(nullptr);
  return pointers;
}

void CloseIfOpen(int& fd) {
  if (fd >= 0) close(fd);
  fd = -1;
}

}  // namespace

std::string ExitInfo::Describe() const {
  if (!node.empty()) return absl::StrCat("srun: task ", actor.value, " on node ", node, ": ", report);
  std::string what;
  if (signal != 0) {
    const char* name = strsignal(signal);
    what = absl::StrCat("was killed by signal ", signal, " (", name != nullptr ? name : "unknown", ")",
                        core_dumped ? ", core dumped" : "");
  } else {
    what = absl::StrCat("exited with status ", exit_code);
  }
  if (actor.value < 0) {  // a launcher's own helper process, such as srun
    return absl::StrCat(program, " (pid ", pid, ") ", what, report.empty() ? "" : ": ", report);
  }
  return absl::StrCat(ActorLabel(actor), " (", program, ", pid ", pid, ") ", what);
}

absl::Status ExitInfo::AsUnavailable() const { return absl::UnavailableError(Describe()); }

ProcessGroup::ProcessGroup(ProcessGroupOptions options) : options_(std::move(options)), controller_pid_(getpid()) {}

absl::StatusOr<std::unique_ptr<ProcessGroup>> ProcessGroup::Start(std::vector<ProcessSpec> specs,
                                                                  ProcessGroupOptions options) {
  if (specs.empty()) return absl::InvalidArgumentError("a process group needs at least one process");
  for (size_t i = 0; i < specs.size(); ++i) {
    const std::string actor = ActorLabel(ActorId(static_cast<int32_t>(i)));
    if (specs[i].program.empty()) return absl::InvalidArgumentError(absl::StrCat(actor, ": no program given"));
    for (const auto& [name, value] : specs[i].environment) {
      if (name.empty() || name.find('=') != std::string::npos || name.find('\0') != std::string::npos) {
        return absl::InvalidArgumentError(absl::StrCat(actor, ": bad environment variable name '", name, "'"));
      }
    }
  }
  if (!options.sink) options.sink = WriteLineToStderr;
  std::unique_ptr<ProcessGroup> group(new ProcessGroup(std::move(options)));

  int wake[2];
  if (pipe2(wake, O_CLOEXEC) != 0) {
    return absl::ErrnoToStatus(errno, "cannot create the process group's wake pipe");
  }
  group->reader_wake_read_fd_ = wake[0];
  group->reader_wake_write_fd_ = wake[1];

  absl::Status status;
  for (size_t i = 0; i < specs.size() && status.ok(); ++i) {
    status = group->StartChild(ActorId(static_cast<int32_t>(i)), specs[i]);
  }
  {
    // Even after a failure, so that what the started children wrote is seen.
    absl::MutexLock lock(&group->shutdown_mu_);
    group->reader_ = std::thread(&ProcessGroup::ReaderLoop, group.get(), std::move(group->pending_streams_));
  }
  if (!status.ok()) {
    group->Shutdown(absl::ZeroDuration()).IgnoreError();
    return status;
  }
  return group;
}

absl::Status ProcessGroup::StartChild(ActorId actor, const ProcessSpec& spec) {
  const std::string actor_label = ActorLabel(actor);
  // Everything the child needs is built here: after fork it may only make
  // async-signal-safe calls (the controller has other threads).
  std::vector<std::string> argv_storage = {spec.program};
  argv_storage.insert(argv_storage.end(), spec.args.begin(), spec.args.end());
  std::vector<std::pair<std::string, std::string>> overrides = spec.environment;
  overrides.emplace_back("TANDEM_ACTOR_ID", absl::StrCat(actor.value));
  std::vector<std::string> env_storage = ChildEnvironment(overrides);
  const std::vector<char*> argv = NullTerminated(argv_storage);
  const std::vector<char*> envp = NullTerminated(env_storage);

  int output[2];
  if (pipe2(output, O_CLOEXEC) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat(actor_label, ": cannot start ", spec.program, ": pipe"));
  }
  int exec_report[2];
  if (pipe2(exec_report, O_CLOEXEC) != 0) {
    const int error = errno;
    close(output[0]);
    close(output[1]);
    return absl::ErrnoToStatus(error, absl::StrCat(actor_label, ": cannot start ", spec.program, ": pipe"));
  }

  const pid_t process_group = process_group_id_;  // 0 for the first child: it leads the group
  const pid_t pid = fork();
  if (pid == 0) RunChild(controller_pid_, process_group, output[1], exec_report[1], argv.data(), envp.data());
  const int fork_error = errno;
  close(output[1]);
  close(exec_report[1]);
  if (pid < 0) {
    close(output[0]);
    close(exec_report[0]);
    return absl::ErrnoToStatus(fork_error, absl::StrCat(actor_label, ": cannot start ", spec.program, ": fork"));
  }
  // Also here, so the group exists before the next fork whichever runs
  // first; EACCES once the child has exec'd (it set its group itself).
  setpgid(pid, process_group == 0 ? pid : process_group);
  if (process_group_id_ == 0) process_group_id_ = pid;

  auto child = std::make_unique<Child>();
  child->actor = actor;
  child->program = spec.program;
  child->pid = pid;
  child->pidfd = OpenPidfd(pid);
  children_.push_back(std::move(child));
  pending_streams_.push_back(OutputStream{.actor = actor, .fd = output[0]});

  // The report pipe closes on a successful execve, or carries the failure.
  ChildFailure failure{};
  size_t received = 0;
  const absl::Time deadline = MonotonicNow() + options_.exec_timeout;
  while (received < sizeof(failure)) {
    pollfd poll_fd{.fd = exec_report[0], .events = POLLIN, .revents = 0};
    const int ready = ::poll(&poll_fd, 1, PollTimeoutMs(deadline - MonotonicNow()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) {
      close(exec_report[0]);
      return absl::DeadlineExceededError(absl::StrCat(actor_label, ": ", spec.program, " did not reach execve within ",
                                                      absl::FormatDuration(options_.exec_timeout)));
    }
    const ssize_t n = read(exec_report[0], reinterpret_cast<char*>(&failure) + received, sizeof(failure) - received);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    received += static_cast<size_t>(n);
  }
  close(exec_report[0]);
  if (received == 0) return absl::OkStatus();
  if (received < sizeof(failure)) {
    return absl::InternalError(absl::StrCat(actor_label, ": cannot start ", spec.program, ": truncated failure report"));
  }
  switch (failure.stage) {
    case ChildStage::kExec:
      return absl::Status(absl::ErrnoToStatusCode(failure.error),
                          absl::StrCat(actor_label, ": cannot execute ", spec.program, ": ", ir::ErrnoText(failure.error)));
    case ChildStage::kSetProcessGroup:
      return absl::Status(absl::ErrnoToStatusCode(failure.error),
                          absl::StrCat(actor_label, ": cannot start ", spec.program,
                                       ": setpgid: ", ir::ErrnoText(failure.error)));
    case ChildStage::kRedirect:
      break;
  }
  return absl::Status(absl::ErrnoToStatusCode(failure.error),
                      absl::StrCat(actor_label, ": cannot start ", spec.program,
                                   ": redirecting stdio: ", ir::ErrnoText(failure.error)));
}

ProcessGroup::~ProcessGroup() {
  Shutdown(options_.destructor_grace).IgnoreError();
  for (auto& child : children_) CloseIfOpen(child->pidfd);
  CloseIfOpen(reader_wake_read_fd_);
  CloseIfOpen(reader_wake_write_fd_);
}

pid_t ProcessGroup::pid(ActorId actor) const {
  if (actor.value < 0 || actor.value >= size()) return -1;
  return children_[static_cast<size_t>(actor.value)]->pid;
}

void ProcessGroup::ObserveExitsLocked() {
  for (size_t i = 0; i < children_.size(); ++i) {
    Child& child = *children_[i];
    if (child.exit.has_value() || child.reaped) continue;
    siginfo_t info{};
    info.si_pid = 0;
    // WNOWAIT: the child stays a zombie, holding its pid, until Shutdown().
    int result;
    do {
      result = waitid(P_PID, static_cast<id_t>(child.pid), &info, WEXITED | WNOHANG | WNOWAIT);
    } while (result != 0 && errno == EINTR);
    ExitInfo exit{.actor = child.actor, .pid = child.pid, .program = child.program};
    if (result != 0) {
      // ECHILD: someone else in this process reaped it; it has ended.
      exit.exit_code = -1;
      child.reaped = true;
    } else if (info.si_pid == 0) {
      continue;  // still running
    } else if (info.si_code == CLD_EXITED) {
      exit.exit_code = info.si_status;
    } else {
      exit.signal = info.si_status;
      exit.core_dumped = info.si_code == CLD_DUMPED;
    }
    child.exit = std::move(exit);
    child.exit_seen = MonotonicNow();
    unreported_.push_back(static_cast<int32_t>(i));
  }
}

std::optional<ExitInfo> ProcessGroup::TakeUnreportedLocked() {
  const absl::Time now = MonotonicNow();
  for (auto it = unreported_.begin(); it != unreported_.end(); ++it) {
    const Child& child = *children_[static_cast<size_t>(*it)];
    if (!child.output_ended && now < child.exit_seen + kOutputGrace) continue;
    unreported_.erase(it);
    return child.exit;
  }
  return std::nullopt;
}

void ProcessGroup::OutputEnded(ActorId actor) {
  absl::MutexLock lock(&mu_);
  if (actor.value >= 0 && actor.value < size()) children_[static_cast<size_t>(actor.value)]->output_ended = true;
}

std::optional<ExitInfo> ProcessGroup::Poll() {
  absl::MutexLock lock(&mu_);
  ObserveExitsLocked();
  return TakeUnreportedLocked();
}

ProcessGroup::Running ProcessGroup::RunningLocked() const {
  Running running;
  for (const auto& child : children_) {
    if (child->exit.has_value() || child->reaped) continue;
    ++running.count;
    if (child->pidfd >= 0) {
      running.pidfds.push_back(pollfd{.fd = child->pidfd, .events = POLLIN, .revents = 0});
    } else {
      running.every_one_has_a_pidfd = false;
    }
  }
  return running;
}

void ProcessGroup::Running::AwaitAnEnd(absl::Time deadline) {
  absl::Duration remaining = deadline - MonotonicNow();
  if (!every_one_has_a_pidfd || output_pending) remaining = std::min(remaining, kPollSlice);
  // pidfds stay open until the destructor, so polling them unlocked is safe.
  ::poll(pidfds.data(), pidfds.size(), PollTimeoutMs(remaining));
}

absl::StatusOr<ExitInfo> ProcessGroup::WaitAny(absl::Duration timeout) {
  const absl::Time deadline = MonotonicNow() + timeout;
  while (true) {
    Running running;
    {
      absl::MutexLock lock(&mu_);
      ObserveExitsLocked();
      if (std::optional<ExitInfo> exit = TakeUnreportedLocked()) return *std::move(exit);
      running = RunningLocked();
      running.output_pending = !unreported_.empty();
      if (running.count == 0 && !running.output_pending) {
        return absl::FailedPreconditionError("every actor's end has already been reported");
      }
    }
    if (MonotonicNow() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("no actor ended within ", absl::FormatDuration(timeout)));
    }
    running.AwaitAnEnd(deadline);
  }
}

absl::Status ProcessGroup::Kill(ActorId actor, int signal) {
  if (actor.value < 0 || actor.value >= size()) {
    return absl::InvalidArgumentError(absl::StrCat("no ", ActorLabel(actor), " in a group of ", size()));
  }
  absl::MutexLock lock(&mu_);
  ObserveExitsLocked();
  const Child& child = *children_[static_cast<size_t>(actor.value)];
  if (child.exit.has_value()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot send signal ", signal, ": ", child.exit->Describe()));
  }
  // Not yet reaped, so the pid is still this child's.
  if (kill(child.pid, signal) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat(ActorLabel(actor), " (", child.program, ", pid ", child.pid,
                                                   "): cannot send signal ", signal));
  }
  return absl::OkStatus();
}

void ProcessGroup::SignalAllLocked(int signal) {
  // The leader is reaped last, so until then the group id cannot be reused.
  if (process_group_id_ > 0 && !children_.front()->reaped) killpg(process_group_id_, signal);
  for (const auto& child : children_) {
    if (!child->exit.has_value() && !child->reaped) kill(child->pid, signal);
  }
}

bool ProcessGroup::AwaitAllEnded(absl::Time deadline) {
  while (true) {
    Running running;
    {
      absl::MutexLock lock(&mu_);
      ObserveExitsLocked();
      running = RunningLocked();
      if (running.count == 0) return true;
    }
    if (MonotonicNow() >= deadline) return false;
    running.AwaitAnEnd(deadline);
  }
}

absl::Status ProcessGroup::Shutdown(absl::Duration grace) {
  absl::MutexLock shutdown_lock(&shutdown_mu_);
  if (shutdown_status_.has_value()) return *shutdown_status_;

  {
    absl::MutexLock lock(&mu_);
    ObserveExitsLocked();
    SignalAllLocked(SIGTERM);
  }
  AwaitAllEnded(MonotonicNow() + grace);
  {
    // Also when every child has ended: their descendants may not have.
    absl::MutexLock lock(&mu_);
    ObserveExitsLocked();
    SignalAllLocked(SIGKILL);
  }
  AwaitAllEnded(MonotonicNow() + kKillTimeout);

  absl::Status status;
  {
    absl::MutexLock lock(&mu_);
    ObserveExitsLocked();
    std::vector<std::string> survivors;
    // Leader last: it holds the process group id until the others are gone.
    for (auto it = children_.rbegin(); it != children_.rend(); ++it) {
      Child& child = **it;
      if (child.reaped) continue;
      if (!child.exit.has_value()) {
        survivors.push_back(absl::StrCat(ActorLabel(child.actor), " (pid ", child.pid, ")"));
        continue;
      }
      while (waitpid(child.pid, nullptr, 0) < 0 && errno == EINTR) {
      }
      child.reaped = true;
    }
    if (!survivors.empty()) {
      status = absl::DeadlineExceededError(absl::StrCat(absl::StrJoin(survivors, ", "), " still running ",
                                                        absl::FormatDuration(kKillTimeout), " after SIGKILL"));
    }
  }

  if (reader_.joinable()) {
    WriteAll(reader_wake_write_fd_, "x");
    reader_.join();
  }
  shutdown_status_ = status;
  return status;
}

void ProcessGroup::EmitLines(OutputStream& stream, bool flush_partial) {
  const std::string prefix = options_.prefix_lines ? absl::StrCat("[", ActorLabel(stream.actor), "] ") : "";
  size_t start = 0;
  while (true) {
    const size_t newline = stream.partial.find('\n', start);
    if (newline == std::string::npos) break;
    options_.sink(absl::StrCat(prefix, absl::string_view(stream.partial).substr(start, newline - start)));
    start = newline + 1;
  }
  stream.partial.erase(0, start);
  while (stream.partial.size() >= kMaxLineBytes) {
    options_.sink(absl::StrCat(prefix, absl::string_view(stream.partial).substr(0, kMaxLineBytes)));
    stream.partial.erase(0, kMaxLineBytes);
  }
  if (flush_partial && !stream.partial.empty()) {
    options_.sink(absl::StrCat(prefix, stream.partial));
    stream.partial.clear();
  }
}

void ProcessGroup::ReaderLoop(std::vector<OutputStream> streams) {
  bool draining = false;
  absl::Time drain_deadline = absl::InfiniteFuture();
  std::string buffer(64 * 1024, '\0');
  while (!streams.empty()) {
    std::vector<pollfd> fds;
    for (const OutputStream& stream : streams) fds.push_back(pollfd{.fd = stream.fd, .events = POLLIN, .revents = 0});
    if (!draining) fds.push_back(pollfd{.fd = reader_wake_read_fd_, .events = POLLIN, .revents = 0});
    const int ready = ::poll(fds.data(), fds.size(), draining ? PollTimeoutMs(drain_deadline - MonotonicNow()) : -1);
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) break;  // drain time is up (or poll failed)
    if (!draining && fds.back().revents != 0) {
      // Shutdown: the children are gone; read what is left, bounded.
      draining = true;
      drain_deadline = MonotonicNow() + kDrainTimeout;
    }
    for (size_t i = streams.size(); i-- > 0;) {
      if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR | POLLNVAL)) == 0) continue;
      const ssize_t n = read(streams[i].fd, buffer.data(), buffer.size());
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n > 0) {
        streams[i].partial.append(buffer.data(), static_cast<size_t>(n));
        EmitLines(streams[i], /*flush_partial=*/false);
        continue;
      }
      EmitLines(streams[i], /*flush_partial=*/true);  // end of file
      close(streams[i].fd);
      OutputEnded(streams[i].actor);
      streams.erase(streams.begin() + static_cast<std::ptrdiff_t>(i));
    }
    if (draining && MonotonicNow() >= drain_deadline) break;
  }
  for (OutputStream& stream : streams) {
    EmitLines(stream, /*flush_partial=*/true);
    close(stream.fd);
    OutputEnded(stream.actor);
  }
}

}  // namespace tandem::controller
