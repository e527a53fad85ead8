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
#include <filesystem>
#include <fstream>
#include <map>
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

// The exit code of a process that ended within `timeout`; -1 otherwise.
template <typename Process>
int ExitCode(Process& process, absl::Duration timeout = absl::Seconds(120)) {
  std::optional<int> status = process.Wait(timeout);
  if (!status.has_value() || !WIFEXITED(*status)) return -1;
  return WEXITSTATUS(*status);
}

// `tandem train ...` as a child process, stdout and stderr to files in a
// fresh directory. The destructor kills and reaps it (and, through the
// launcher's guarantees, its actors).
class TrainProcess {
 public:
  // `environment`: extra NAME=VALUE settings for the child.
  explicit TrainProcess(const std::vector<std::string>& args, const std::vector<std::string>& environment = {}) {
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
      for (const std::string& setting : environment) putenv(const_cast<char*>(setting.c_str()));
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

// Checkpoints. A small GPT on 2 actors; each run is a few seconds.
class TrainCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir_template[] = "/tmp/tandem-checkpoint-test-XXXXXX";
    ASSERT_NE(mkdtemp(dir_template), nullptr);
    dir_ = dir_template;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // `tandem train` of the small GPT for `steps` in all, plus `extra`.
  static std::vector<std::string> Args(int steps, std::vector<std::string> extra) {
    std::vector<std::string> args = {"--model", "gpt", "--actors", "2", "--microbatches", "4",
                                     "--steps", absl::StrCat(steps), "--eval-batches", "0"};
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  }
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }

  std::string dir_;
};

// The state files of a checkpoint, by name, with their bytes.
std::map<std::string, std::string> StateFiles(const std::string& checkpoint) {
  std::map<std::string, std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(checkpoint)) {
    const std::string name = entry.path().filename().string();
    if (name.ends_with(".state")) files[name] = ReadFile(entry.path().string());
  }
  return files;
}

TEST_F(TrainCheckpoint, ResumedRunIsBitIdenticalToAnUninterruptedOne) {
  TrainProcess straight(Args(6, {"--checkpoint-dir", Path("straight")}));
  ASSERT_EQ(ExitCode(straight), 0) << straight.err();
  TrainProcess first(Args(3, {"--checkpoint-dir", Path("split")}));
  ASSERT_EQ(ExitCode(first), 0) << first.err();
  // The second half runs under another schedule and on actor threads (whose
  // launcher writes the files from the controller): a checkpoint holds
  // tensors, not a schedule's or a launcher's layout.
  TrainProcess second(Args(6, {"--resume", Path("split"), "--schedule", "gpipe", "--launcher", "threads"}));
  ASSERT_EQ(ExitCode(second), 0) << second.err();
  EXPECT_THAT(second.out(), AllOf(HasSubstr("resuming from " + Path("split/step-00000003") + " (after step 3"),
                                  HasSubstr("done: 3 steps (4 to 6)")));

  std::map<std::string, std::string> expected = StateFiles(Path("straight/step-00000006"));
  std::map<std::string, std::string> resumed = StateFiles(Path("split/step-00000006"));
  ASSERT_EQ(expected.size(), 2u);
  ASSERT_EQ(resumed.size(), expected.size());
  for (const auto& [name, bytes] : expected) {
    EXPECT_TRUE(resumed[name] == bytes) << name << " differs from the uninterrupted run's";
  }
}

TEST_F(TrainCheckpoint, ControllerKilledDuringACheckpointWriteLeavesThePreviousOneLoadable) {
  TrainProcess first(Args(3, {"--checkpoint-dir", Path("ck")}));
  ASSERT_EQ(ExitCode(first), 0) << first.err();
  // Dies after the actors wrote their files for step 6, before the manifest.
  TrainProcess crashed(Args(6, {"--resume", Path("ck")}), {"TANDEM_FAULT=checkpoint-before-manifest"});
  std::optional<int> status = crashed.Wait(absl::Seconds(120));
  ASSERT_TRUE(status.has_value());
  ASSERT_TRUE(WIFSIGNALED(*status)) << crashed.err();
  EXPECT_EQ(WTERMSIG(*status), SIGKILL);
  EXPECT_TRUE(std::filesystem::exists(Path("ck/.step-00000006.partial/actor-0.state")));
  EXPECT_FALSE(std::filesystem::exists(Path("ck/step-00000006")));

  TrainProcess resumed(Args(6, {"--resume", Path("ck")}));
  ASSERT_EQ(ExitCode(resumed), 0) << resumed.err();
  EXPECT_THAT(resumed.out(), HasSubstr("resuming from " + Path("ck/step-00000003")));
  EXPECT_TRUE(std::filesystem::exists(Path("ck/step-00000006/MANIFEST")));
  EXPECT_FALSE(std::filesystem::exists(Path("ck/.step-00000006.partial")));
}

TEST_F(TrainCheckpoint, CorruptOrMismatchedCheckpointIsRefused) {
  TrainProcess first(Args(2, {"--checkpoint-dir", Path("ck")}));
  ASSERT_EQ(ExitCode(first), 0) << first.err();

  // Another model, other shapes.
  TrainProcess mlp({"--model", "mlp", "--actors", "2", "--steps", "4", "--resume", Path("ck")});
  EXPECT_EQ(ExitCode(mlp), 1);
  EXPECT_THAT(mlp.err(), AllOf(HasSubstr("FAILED_PRECONDITION"), HasSubstr("does not fit this job"),
                               HasSubstr("it is of model 'gpt', this job's model is 'mlp'")));
  TrainProcess wider(Args(4, {"--dim", "96", "--resume", Path("ck")}));
  EXPECT_EQ(ExitCode(wider), 1);
  EXPECT_THAT(wider.err(), AllOf(HasSubstr("does not fit this job: state '"), HasSubstr(" there and "),
                                 HasSubstr(" in this job")));

  // One flipped byte in an actor's file.
  const std::string victim = Path("ck/step-00000002/actor-1.state");
  std::string bytes = ReadFile(victim);
  ASSERT_GT(bytes.size(), 1000u);
  bytes[bytes.size() / 2] ^= 0x01;
  std::ofstream(victim, std::ios::binary | std::ios::trunc) << bytes;
  TrainProcess corrupt(Args(4, {"--resume", Path("ck")}));
  EXPECT_EQ(ExitCode(corrupt), 1);
  EXPECT_THAT(corrupt.err(), AllOf(HasSubstr("DATA_LOSS"), HasSubstr("actor-1.state has CRC-32 "),
                                   HasSubstr("(the checkpoint is corrupt)")));

  // Starting afresh over existing checkpoints would mix two runs.
  TrainProcess again(Args(2, {"--checkpoint-dir", Path("ck")}));
  EXPECT_EQ(ExitCode(again), 2);
  EXPECT_THAT(again.err(), HasSubstr("holds checkpoints already"));
}

}  // namespace
}  // namespace tandem::cli
