// `tandem train` as a user runs it: a controller process with its actor
// processes. A killed actor ends the job with a clear error and no process
// left behind; a killed controller takes its actors with it. Every wait is
// bounded; every process started here is killed and reaped on every path.
#include <fcntl.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <dirent.h>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::cli {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The state letter of /proc/<pid>/stat, or nullopt once the pid is gone.
std::optional<char> ProcessState(pid_t pid) {
  std::string stat = ReadFile(absl::StrCat("/proc/", pid, "/stat"));
  size_t paren = stat.rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat.size()) return std::nullopt;
  return stat[paren + 2];
}

// Gone: no such process, or a zombie waiting for a reaper that is not us.
bool Gone(pid_t pid) {
  std::optional<char> state = ProcessState(pid);
  return !state.has_value() || *state == 'Z' || *state == 'X';
}

// The processes whose parent is `parent`.
std::vector<pid_t> ChildrenOf(pid_t parent) {
  std::vector<pid_t> children;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return children;
  while (dirent* entry = readdir(proc)) {
    int pid = 0;
    if (!absl::SimpleAtoi(entry->d_name, &pid)) continue;
    std::string stat = ReadFile(absl::StrCat("/proc/", pid, "/stat"));
    size_t paren = stat.rfind(')');
    if (paren == std::string::npos) continue;
    std::vector<std::string> fields = absl::StrSplit(stat.substr(paren + 2), ' ');
    int ppid = 0;
    if (fields.size() > 1 && absl::SimpleAtoi(fields[1], &ppid) && ppid == parent && !Gone(pid)) {
      children.push_back(pid);
    }
  }
  closedir(proc);
  return children;
}

// `tandem train ...` as a child process, stdout and stderr to files in a
// fresh directory. The destructor kills and reaps it (and, through the
// launcher's guarantees, its actors).
class TrainProcess {
 public:
  explicit TrainProcess(const std::vector<std::string>& args) {
    char dir_template[] = "/tmp/tandem-train-test-XXXXXX";
    dir_ = mkdtemp(dir_template);
    std::vector<std::string> argv = {TANDEM_BINARY, "train"};
    argv.insert(argv.end(), args.begin(), args.end());
    pid_ = fork();
    if (pid_ == 0) {
      int out = open((dir_ + "/out").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      int err = open((dir_ + "/err").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      dup2(out, STDOUT_FILENO);
      dup2(err, STDERR_FILENO);
      std::vector<char*> raw;
      for (std::string& arg : argv) raw.push_back(arg.data());
      raw.push_back(nullptr);
      execv(raw[0], raw.data());
      _exit(127);
    }
  }
  ~TrainProcess() {
    if (pid_ > 0 && !exit_status_.has_value()) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    unlink((dir_ + "/out").c_str());
    unlink((dir_ + "/err").c_str());
    rmdir(dir_.c_str());
  }

  pid_t pid() const { return pid_; }
  std::string out() const { return ReadFile(dir_ + "/out"); }
  std::string err() const { return ReadFile(dir_ + "/err"); }

  // Polls until `done()` or `timeout`; false on timeout.
  template <typename Done>
  static bool Within(absl::Duration timeout, Done done) {
    const absl::Time deadline = absl::Now() + timeout;
    while (!done()) {
      if (absl::Now() > deadline) return false;
      absl::SleepFor(absl::Milliseconds(20));
    }
    return true;
  }

  // The wait status once the process ended within `timeout`, else nullopt.
  std::optional<int> Wait(absl::Duration timeout) {
    Within(timeout, [&] {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) exit_status_ = status;
      return exit_status_.has_value();
    });
    return exit_status_;
  }

  // The actor processes, once `count` of them run and a step of kLongRun is
  // logged (within 60 s); empty otherwise.
  std::vector<pid_t> AwaitTraining(size_t count) {
    std::vector<pid_t> actors;
    Within(absl::Seconds(60), [&] {
      actors = ChildrenOf(pid_);
      return actors.size() == count && out().find("/100000  loss") != std::string::npos;
    });
    if (actors.size() != count) actors.clear();
    return actors;
  }

 private:
  std::string dir_;
  pid_t pid_ = -1;
  std::optional<int> exit_status_;
};

// Long enough that the kill lands mid-run: a GPT step takes tens of ms.
const std::vector<std::string> kLongRun = {"--model", "gpt", "--actors", "2", "--schedule", "1f1b",
                                           "--microbatches", "4", "--steps", "100000", "--eval-batches", "0"};

TEST(TrainProcess, KilledActorEndsTheJobWithUnavailableAndNoProcessLeft) {
  TrainProcess train(kLongRun);
  std::vector<pid_t> actors = train.AwaitTraining(2);
  ASSERT_EQ(actors.size(), 2u) << train.err();
  // Which pid is actor 1: its command line says --actor 1.
  pid_t victim = -1;
  for (pid_t pid : actors) {
    std::string cmdline = ReadFile(absl::StrCat("/proc/", pid, "/cmdline"));
    if (cmdline.find(std::string("--actor\0001\0", 10)) != std::string::npos) victim = pid;
  }
  ASSERT_GT(victim, 0);
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  const absl::Time killed_at = absl::Now();
  std::optional<int> status = train.Wait(absl::Seconds(5));
  ASSERT_TRUE(status.has_value()) << "the controller did not exit within 5 s of the kill";
  EXPECT_LT(absl::Now() - killed_at, absl::Seconds(5));
  ASSERT_TRUE(WIFEXITED(*status));
  EXPECT_NE(WEXITSTATUS(*status), 0);
  EXPECT_THAT(train.err(), AllOf(HasSubstr("UNAVAILABLE"), HasSubstr("actor 1 (stage 1) died during step "),
                                 HasSubstr("killed by signal 9")));
  for (pid_t pid : actors) EXPECT_TRUE(Gone(pid)) << "actor pid " << pid << " survived";
}

TEST(TrainProcess, KilledControllerTakesEveryActorWithinFiveSeconds) {
  TrainProcess train(kLongRun);
  std::vector<pid_t> actors = train.AwaitTraining(2);
  ASSERT_EQ(actors.size(), 2u) << train.err();
  ASSERT_EQ(kill(train.pid(), SIGKILL), 0);
  ASSERT_TRUE(train.Wait(absl::Seconds(5)).has_value());
  const bool all_gone = TrainProcess::Within(absl::Seconds(5), [&] {
    for (pid_t pid : actors) {
      if (!Gone(pid)) return false;
    }
    return true;
  });
  EXPECT_TRUE(all_gone) << "an actor outlived its controller by 5 s";
  for (pid_t pid : actors) {
    if (!Gone(pid)) kill(pid, SIGKILL);  // leave nothing behind, whatever happened
  }
}

TEST(TrainProcess, CtrlCShutsTheActorsDownAndExits130) {
  TrainProcess train(kLongRun);
  std::vector<pid_t> actors = train.AwaitTraining(2);
  ASSERT_EQ(actors.size(), 2u) << train.err();
  ASSERT_EQ(kill(train.pid(), SIGINT), 0);
  std::optional<int> status = train.Wait(absl::Seconds(5));
  ASSERT_TRUE(status.has_value()) << "no exit within 5 s of SIGINT";
  ASSERT_TRUE(WIFEXITED(*status)) << "died of a signal instead of unwinding";
  EXPECT_EQ(WEXITSTATUS(*status), 130);
  EXPECT_THAT(train.err(), HasSubstr("interrupted by Interrupt"));
  for (pid_t pid : actors) EXPECT_TRUE(Gone(pid)) << "actor pid " << pid << " survived";
}

TEST(TrainProcess, BadTransportIsAUsageError) {
  TrainProcess train({"--transport", "carrier-pigeon", "--steps", "1"});
  std::optional<int> status = train.Wait(absl::Seconds(30));
  ASSERT_TRUE(status.has_value());
  ASSERT_TRUE(WIFEXITED(*status));
  EXPECT_EQ(WEXITSTATUS(*status), 2);
  EXPECT_THAT(train.err(), HasSubstr("unknown transport 'carrier-pigeon' (expected shm or tcp)"));
}

}  // namespace
}  // namespace tandem::cli
