// `tandem` run as a user runs it, for the CLI's process tests: a child
// process with its output in files, killed and reaped on every path, and
// /proc helpers to find its actor processes. Every wait is bounded.
#ifndef TANDEM_TESTS_TOOLS_CLI_PROCESS_H_
#define TANDEM_TESTS_TOOLS_CLI_PROCESS_H_

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "tests/testing/memory_limit.h"

namespace tandem::cli {

// The file's bytes ("" when it cannot be read), copied by the stream buffer
// in bulk: a character at a time (istreambuf_iterator) took minutes over a
// GPT-2 small checkpoint with the tests built at -O0.
inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return std::move(bytes).str();
}

// The state letter of /proc/<pid>/stat, or nullopt once the pid is gone.
inline std::optional<char> ProcessState(pid_t pid) {
  std::string stat = ReadFile(absl::StrCat("/proc/", pid, "/stat"));
  size_t paren = stat.rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat.size()) return std::nullopt;
  return stat[paren + 2];
}

// Gone: no such process, or a zombie waiting for a reaper that is not us.
inline bool Gone(pid_t pid) {
  std::optional<char> state = ProcessState(pid);
  return !state.has_value() || *state == 'Z' || *state == 'X';
}

// The processes whose parent is `parent`.
inline std::vector<pid_t> ChildrenOf(pid_t parent) {
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

// The state files of the checkpoint directory `checkpoint`, by file name.
inline std::map<std::string, std::string> StateFiles(const std::string& checkpoint) {
  std::map<std::string, std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(checkpoint)) {
    const std::string name = entry.path().filename().string();
    if (name.ends_with(".state")) files[name] = ReadFile(entry.path().string());
  }
  return files;
}

// The exit code of a process that ended within `timeout`; -1 otherwise.
template <typename Process>
int ExitCode(Process& process, absl::Duration timeout = absl::Seconds(120)) {
  std::optional<int> status = process.Wait(timeout);
  if (!status.has_value() || !WIFEXITED(*status)) return -1;
  return WEXITSTATUS(*status);
}

// The `tandem` under test: $TANDEM_BINARY where it is set (a bundle made by
// tools/bundle.sh runs its own), else the build's (the TANDEM_BINARY macro).
inline std::string TandemBinary() {
  const char* path = std::getenv("TANDEM_BINARY");
  return path != nullptr && path[0] != '\0' ? std::string(path) : std::string(TANDEM_BINARY);
}

// `tandem ...` (TandemBinary(); `args` begin with the subcommand) as a child
// process: stdin from /dev/null, stdout and stderr to files in a fresh
// directory. The destructor kills and reaps it (and, through the launcher's
// guarantees, its actors).
class CliProcess {
 public:
  // `environment`: extra NAME=VALUE settings for the child. A
  // `memory_cap_bytes` above 0 holds the child to that much memory
  // (tests/testing/memory_limit.h): an allocation past it fails there.
  explicit CliProcess(const std::vector<std::string>& args, std::vector<std::string> environment = {},
                      int64_t memory_cap_bytes = 0) {
    char dir_template[] = "/tmp/tandem-cli-test-XXXXXX";
    dir_ = mkdtemp(dir_template);
    std::vector<std::string> argv = {TandemBinary()};
    argv.insert(argv.end(), args.begin(), args.end());
    if (memory_cap_bytes > 0) {
      for (std::string& setting : test::MemoryCapEnvironment(memory_cap_bytes)) {
        environment.push_back(std::move(setting));
      }
    }
    pid_ = fork();
    if (pid_ == 0) {
      if (memory_cap_bytes > 0) test::CapBeforeExec(memory_cap_bytes);
      int out = open((dir_ + "/out").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      int err = open((dir_ + "/err").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      int in = open("/dev/null", O_RDONLY);
      dup2(in, STDIN_FILENO);
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
  ~CliProcess() {
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

 private:
  std::string dir_;
  pid_t pid_ = -1;
  std::optional<int> exit_status_;
};

// What a finished `tandem` run left: its exit code (-1 when it did not
// exit within the timeout, or died of a signal) and its output.
struct CliRun {
  int code = -1;
  std::string out;
  std::string err;
};

// Runs `tandem args...` (`args` begin with the subcommand) to completion,
// at most `timeout`.
inline CliRun RunCli(const std::vector<std::string>& args, absl::Duration timeout = absl::Seconds(120)) {
  CliProcess process(args);
  CliRun run;
  run.code = ExitCode(process, timeout);
  run.out = process.out();
  run.err = process.err();
  return run;
}

// Runs `tandem train args...` to completion (at most 120 s): its exit code,
// or -1, with its output in `out` and `err`.
inline int RunTrain(const std::vector<std::string>& args, std::string& out, std::string& err) {
  std::vector<std::string> command = {"train"};
  command.insert(command.end(), args.begin(), args.end());
  CliProcess train(command);
  const int code = ExitCode(train, absl::Seconds(120));
  out = train.out();
  err = train.err();
  return code;
}

}  // namespace tandem::cli

#endif  // TANDEM_TESTS_TOOLS_CLI_PROCESS_H_
