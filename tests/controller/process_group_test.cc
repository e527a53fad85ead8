#include "controller/process_group.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::controller {
namespace {

using ::testing::HasSubstr;
using ::testing::IsSupersetOf;

// Collects the group's output lines; safe to read from the test thread.
class LineCollector {
 public:
  LineSink Sink() {
    return [this](absl::string_view line) {
      absl::MutexLock lock(&mu_);
      lines_.emplace_back(line);
    };
  }
  std::vector<std::string> Lines() {
    absl::MutexLock lock(&mu_);
    return lines_;
  }
  // Waits up to `timeout` for a line equal to `line`.
  bool AwaitLine(const std::string& line, absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto seen = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      for (const std::string& l : lines_) {
        if (l == line) return true;
      }
      return false;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&seen), timeout);
  }

 private:
  absl::Mutex mu_;
  std::vector<std::string> lines_ ABSL_GUARDED_BY(mu_);
};

ProcessSpec Shell(const std::string& script) { return ProcessSpec{.program = "/bin/sh", .args = {"-c", script}}; }
ProcessSpec Sleep30() { return ProcessSpec{.program = "/bin/sleep", .args = {"30"}}; }

// Time taken, on the monotonic clock ProcessGroup keeps its graces on: a
// step of the wall clock during a test must not read as a slow shutdown.
class Stopwatch {
 public:
  absl::Duration Elapsed() const { return absl::FromChrono(std::chrono::steady_clock::now() - start_); }

 private:
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

bool Gone(pid_t pid) { return kill(pid, 0) != 0 && errno == ESRCH; }

TEST(ProcessGroup, PrefixesEveryLineWithTheActorId) {
  LineCollector output;
  std::vector<ProcessSpec> specs(3, Shell("echo hello from $TANDEM_ACTOR_ID; echo err >&2"));
  absl::StatusOr<std::unique_ptr<ProcessGroup>> group = ProcessGroup::Start(specs, {.sink = output.Sink()});
  ASSERT_TRUE(group.ok()) << group.status();
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<ExitInfo> exit = (*group)->WaitAny(absl::Seconds(5));
    ASSERT_TRUE(exit.ok()) << exit.status();
    EXPECT_EQ(exit->exit_code, 0);
    EXPECT_EQ(exit->signal, 0);
  }
  ASSERT_TRUE((*group)->Shutdown(absl::Seconds(1)).ok());
  EXPECT_THAT(output.Lines(), IsSupersetOf({"[actor 0] hello from 0", "[actor 1] hello from 1", "[actor 2] hello from 2",
                                            "[actor 0] err", "[actor 1] err", "[actor 2] err"}));
  EXPECT_EQ(output.Lines().size(), 6u);
}

TEST(ProcessGroup, FlushesAPartialLastLine) {
  LineCollector output;
  absl::StatusOr<std::unique_ptr<ProcessGroup>> group =
      ProcessGroup::Start({Shell("printf 'one\\ntwo'")}, {.sink = output.Sink()});
  ASSERT_TRUE(group.ok()) << group.status();
  ASSERT_TRUE((*group)->WaitAny(absl::Seconds(5)).ok());
  ASSERT_TRUE((*group)->Shutdown(absl::Seconds(1)).ok());
  EXPECT_THAT(output.Lines(), ::testing::ElementsAre("[actor 0] one", "[actor 0] two"));
}

TEST(ProcessGroup, PassesArgumentsAndEnvironment) {
  LineCollector output;
  ProcessSpec spec = Shell("echo \"$0 $1 token=$TANDEM_JOB_TOKEN\"");
  spec.args.push_back("first");
  spec.args.push_back("second");
  spec.environment.emplace_back("TANDEM_JOB_TOKEN", "c0ffee");
  absl::StatusOr<std::unique_ptr<ProcessGroup>> group = ProcessGroup::Start({spec}, {.sink = output.Sink()});
  ASSERT_TRUE(group.ok()) << group.status();
  ASSERT_TRUE((*group)->WaitAny(absl::Seconds(5)).ok());
  ASSERT_TRUE((*group)->Shutdown(absl::Seconds(1)).ok());
  EXPECT_THAT(output.Lines(), ::testing::ElementsAre("[actor 0] first second token=c0ffee"));
}

TEST(ProcessGroup, ExecFailureNamesTheActorAndProgram) {
  LineCollector output;
  std::vector<ProcessSpec> specs = {Sleep30(), Sleep30(), ProcessSpec{.program = "/nonexistent/tandem-actor"}};
  const Stopwatch watch;
  absl::StatusOr<std::unique_ptr<ProcessGroup>> group = ProcessGroup::Start(specs, {.sink = output.Sink()});
  ASSERT_FALSE(group.ok());
  EXPECT_EQ(group.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(group.status().message()),
              HasSubstr("actor 2: cannot execute /nonexistent/tandem-actor: No such file or directory"));
  // The two started children were killed and reaped on the way out.
  EXPECT_LT(watch.Elapsed(), absl::Seconds(2));
}

TEST(ProcessGroup, ChildrenShareTheGroupsProcessGroup) {
  absl::StatusOr<std::unique_ptr<ProcessGroup>> group =
      ProcessGroup::Start({Sleep30(), Sleep30(), Sleep30()}, {.sink = [](absl::string_view) {}});
  ASSERT_TRUE(group.ok()) << group.status();
  EXPECT_NE((*group)->process_group_id(), getpgrp());
  for (int i = 0; i < 3; ++i) EXPECT_EQ(getpgid((*group)->pid(ActorId(i))), (*group)->process_group_id());
  EXPECT_EQ((*group)->pid(ActorId(3)), -1);
}

// An end is reported once everything the child wrote reached the sink: its
// last words (here after 300 KB, more than a pipe holds) come first.
TEST(ProcessGroup, AnEndIsReportedAfterTheChildsLastLines) {
  for (int round = 0; round < 5; ++round) {
    LineCollector output;
    absl::StatusOr<std::unique_ptr<ProcessGroup>> group = ProcessGroup::Start(
        {Shell("seq 1 50000; echo last words; exit 3")}, {.sink = output.Sink(), .prefix_lines = false});
    ASSERT_TRUE(group.ok()) << group.status();
    absl::StatusOr<ExitInfo> exit = (*group)->WaitAny(absl::Seconds(20));
    ASSERT_TRUE(exit.ok()) << exit.status();
    EXPECT_EQ(exit->exit_code, 3);
    const std::vector<std::string> lines = output.Lines();
    ASSERT_EQ(lines.size(), 50001u) << "round " << round;
    EXPECT_EQ(lines.back(), "last words");
  }
}

// A descendant that keeps the child's output open delays its report by the
// grace of a second, not for as long as the descendant lives.
TEST(ProcessGroup, AnEndIsReportedEvenWhileADescendantHoldsItsOutput) {
  LineCollector output;
  absl::StatusOr<std::unique_ptr<ProcessGroup>> group =
      ProcessGroup::Start({Shell("sleep 30 & echo started; exit 0")}, {.sink = output.Sink(), .prefix_lines = false});
  ASSERT_TRUE(group.ok()) << group.status();
  const Stopwatch watch;
  absl::StatusOr<ExitInfo> exit = (*group)->WaitAny(absl::Seconds(20));
  ASSERT_TRUE(exit.ok()) << exit.status();
  EXPECT_EQ(exit->exit_code, 0);
  EXPECT_LT(watch.Elapsed(), absl::Seconds(10));  // not the descendant's 30 s
  EXPECT_THAT(output.Lines(), ::testing::Contains("started"));
}

TEST(ProcessGroup, WaitAnyReportsAKilledChildWithinOneSecond) {
  absl::StatusOr<std::unique_ptr<ProcessGroup>> group =
      ProcessGroup::Start({Sleep30(), Sleep30(), Sleep30()}, {.sink = [](absl::string_view) {}});
  ASSERT_TRUE(group.ok()) << group.status();
  EXPECT_FALSE((*group)->Poll().has_value());
  EXPECT_EQ((*group)->WaitAny(absl::Milliseconds(50)).status().code(), absl::StatusCode::kDeadlineExceeded);

  const pid_t victim = (*group)->pid(ActorId(1));
  const Stopwatch watch;
  ASSERT_TRUE((*group)->Kill(ActorId(1), SIGKILL).ok());
  absl::StatusOr<ExitInfo> exit = (*group)->WaitAny(absl::Seconds(1));
  ASSERT_TRUE(exit.ok()) << exit.status();
  EXPECT_LT(watch.Elapsed(), absl::Seconds(1));
  EXPECT_EQ(exit->actor, ActorId(1));
  EXPECT_EQ(exit->pid, victim);
  EXPECT_EQ(exit->signal, SIGKILL);
  EXPECT_EQ(exit->AsUnavailable().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(exit->Describe(), HasSubstr("actor 1 (/bin/sleep, pid "));
  EXPECT_THAT(exit->Describe(), HasSubstr("killed by signal 9"));
  // Reported once; a second signal to it is refused.
  EXPECT_FALSE((*group)->Poll().has_value());
  EXPECT_EQ((*group)->Kill(ActorId(1), SIGTERM).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*group)->Kill(ActorId(7), SIGTERM).code(), absl::StatusCode::kInvalidArgument);
}

TEST(ProcessGroup, ShutdownTerminatesWithinGraceAndReapsAll) {
  absl::StatusOr<std::unique_ptr<ProcessGroup>> group =
      ProcessGroup::Start({Sleep30(), Sleep30(), Sleep30()}, {.sink = [](absl::string_view) {}});
  ASSERT_TRUE(group.ok()) << group.status();
  std::vector<pid_t> pids;
  for (int i = 0; i < 3; ++i) pids.push_back((*group)->pid(ActorId(i)));
  const absl::Duration grace = absl::Milliseconds(500);
  const Stopwatch watch;
  EXPECT_TRUE((*group)->Shutdown(grace).ok());
  EXPECT_LT(watch.Elapsed(), grace + absl::Seconds(1));
  for (pid_t pid : pids) EXPECT_TRUE(Gone(pid)) << pid;
  // Each end is still reported once, then there is nothing left to wait for.
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<ExitInfo> exit = (*group)->WaitAny(absl::Seconds(1));
    ASSERT_TRUE(exit.ok()) << exit.status();
    EXPECT_EQ(exit->signal, SIGTERM);
  }
  EXPECT_EQ((*group)->WaitAny(absl::Seconds(1)).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE((*group)->Shutdown(grace).ok());  // idempotent
}

TEST(ProcessGroup, ShutdownEscalatesToSigkillAfterGrace) {
  LineCollector output;
  absl::StatusOr<std::unique_ptr<ProcessGroup>> group =
      ProcessGroup::Start({Shell("trap '' TERM; echo ready; sleep 30")}, {.sink = output.Sink()});
  ASSERT_TRUE(group.ok()) << group.status();
  ASSERT_TRUE(output.AwaitLine("[actor 0] ready", absl::Seconds(5)));
  const pid_t pid = (*group)->pid(ActorId(0));
  const absl::Duration grace = absl::Milliseconds(300);
  const Stopwatch watch;
  EXPECT_TRUE((*group)->Shutdown(grace).ok());
  const absl::Duration took = watch.Elapsed();
  EXPECT_GE(took, grace);
  EXPECT_LT(took, grace + absl::Seconds(1));
  EXPECT_TRUE(Gone(pid));
  absl::StatusOr<ExitInfo> exit = (*group)->WaitAny(absl::Seconds(1));
  ASSERT_TRUE(exit.ok()) << exit.status();
  EXPECT_EQ(exit->signal, SIGKILL);
}

TEST(ProcessGroup, DestructorWithoutShutdownKillsAndReaps) {
  std::vector<pid_t> pids;
  {
    absl::StatusOr<std::unique_ptr<ProcessGroup>> group = ProcessGroup::Start(
        {Sleep30(), Sleep30()}, {.sink = [](absl::string_view) {}, .destructor_grace = absl::Milliseconds(200)});
    ASSERT_TRUE(group.ok()) << group.status();
    for (int i = 0; i < 2; ++i) pids.push_back((*group)->pid(ActorId(i)));
  }
  for (pid_t pid : pids) EXPECT_TRUE(Gone(pid)) << pid;
}

// Reads up to `count` pids from `fd`, waiting at most `timeout` in all.
std::vector<pid_t> ReadPids(int fd, size_t count, absl::Duration timeout) {
  std::vector<pid_t> pids(count);
  size_t received = 0;
  const absl::Time deadline = absl::Now() + timeout;
  char* bytes = reinterpret_cast<char*>(pids.data());
  while (received < count * sizeof(pid_t) && absl::Now() < deadline) {
    pollfd poll_fd{.fd = fd, .events = POLLIN, .revents = 0};
    if (poll(&poll_fd, 1, static_cast<int>(absl::ToInt64Milliseconds(deadline - absl::Now())) + 1) <= 0) continue;
    const ssize_t n = read(fd, bytes + received, count * sizeof(pid_t) - received);
    if (n <= 0) break;
    received += static_cast<size_t>(n);
  }
  pids.resize(received / sizeof(pid_t));
  return pids;
}

// The controller dies without any cleanup: its actors die by PDEATHSIG. This
// test process becomes their subreaper, so it can reap them and bound the wait.
TEST(ProcessGroup, ControllerCrashLeavesNoOrphans) {
  ASSERT_EQ(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  int report[2];
  ASSERT_EQ(pipe2(report, O_CLOEXEC), 0);
  constexpr size_t kChildren = 3;
  const pid_t controller = fork();
  ASSERT_GE(controller, 0);
  if (controller == 0) {
    close(report[0]);
    absl::StatusOr<std::unique_ptr<ProcessGroup>> group =
        ProcessGroup::Start({Sleep30(), Sleep30(), Sleep30()}, {.sink = [](absl::string_view) {}});
    if (!group.ok()) _exit(1);
    for (size_t i = 0; i < kChildren; ++i) {
      const pid_t pid = (*group)->pid(ActorId(static_cast<int32_t>(i)));
      if (write(report[1], &pid, sizeof(pid)) != sizeof(pid)) _exit(1);
    }
    kill(getpid(), SIGKILL);  // no destructor, no Shutdown
    _exit(1);
  }
  close(report[1]);
  const std::vector<pid_t> actors = ReadPids(report[0], kChildren, absl::Seconds(5));
  close(report[0]);

  int status = 0;
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  pid_t reaped = 0;
  while (reaped != controller && absl::Now() < deadline) {
    reaped = waitpid(controller, &status, WNOHANG);
    if (reaped == 0) absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_EQ(reaped, controller);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
  ASSERT_EQ(actors.size(), kChildren);

  std::vector<bool> gone(kChildren, false);
  size_t remaining = kChildren;
  while (remaining > 0 && absl::Now() < deadline) {
    for (size_t i = 0; i < kChildren; ++i) {
      if (gone[i]) continue;
      // Reparented to this process (the subreaper) once the controller died.
      if (waitpid(actors[i], nullptr, WNOHANG) == actors[i] || Gone(actors[i])) {
        gone[i] = true;
        --remaining;
      }
    }
    if (remaining > 0) absl::SleepFor(absl::Milliseconds(5));
  }
  for (size_t i = 0; i < kChildren; ++i) {
    EXPECT_TRUE(gone[i]) << "actor " << i << " (pid " << actors[i] << ") survived its controller";
    if (!gone[i]) {  // leave nothing behind, even on failure
      kill(actors[i], SIGKILL);
      waitpid(actors[i], nullptr, 0);
    }
  }
  prctl(PR_SET_CHILD_SUBREAPER, 0);
}

}  // namespace
}  // namespace tandem::controller
