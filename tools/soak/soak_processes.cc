#include "tools/soak/soak_processes.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "ir/errno_status.h"
#include "ir/process_stat.h"

namespace tandem::soak {
namespace {

namespace fs = std::filesystem;

constexpr char kActorName[] = "tandem-actor";

std::vector<pid_t> AllPids() {
  std::vector<pid_t> pids;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return pids;
  while (const dirent* entry = readdir(proc)) {
    pid_t pid = 0;
    if (absl::SimpleAtoi(entry->d_name, &pid)) pids.push_back(pid);
  }
  closedir(proc);
  return pids;
}

// The actor id a tandem-actor process was given (TANDEM_ACTOR_ID), or -1.
int32_t ActorIdOf(pid_t pid) {
  const std::string environment = ReadWholeFile(absl::StrCat("/proc/", pid, "/environ"));
  for (absl::string_view entry : absl::StrSplit(environment, '\0')) {
    int32_t id = -1;
    if (absl::ConsumePrefix(&entry, "TANDEM_ACTOR_ID=") && absl::SimpleAtoi(entry, &id)) return id;
  }
  return -1;
}

}  // namespace


std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Alive: exists and is neither a zombie nor dead. A stopped process is alive.
bool Alive(pid_t pid) {
  const std::optional<ir::ProcessStat> stat = ir::ReadProcessStat(pid);
  return stat.has_value() && !stat->exited();
}

// The live tandem-actor children of `controller`, by actor id.
std::map<int32_t, pid_t> ActorsOf(pid_t controller) {
  std::map<int32_t, pid_t> actors;
  for (pid_t pid : AllPids()) {
    const std::optional<ir::ProcessStat> stat = ir::ReadProcessStat(pid);
    if (!stat.has_value() || stat->parent != controller || stat->name != kActorName || !Alive(pid)) continue;
    const int32_t id = ActorIdOf(pid);
    if (id >= 0) actors[id] = pid;
  }
  return actors;
}

// Live processes among `pids` and in process group `group` (if > 0).
std::vector<pid_t> Survivors(const std::vector<pid_t>& pids, const std::vector<pid_t>& groups) {
  std::set<pid_t> alive;
  for (pid_t pid : pids) {
    if (Alive(pid)) alive.insert(pid);
  }
  if (!groups.empty()) {
    for (pid_t pid : AllPids()) {
      const std::optional<ir::ProcessStat> stat = ir::ReadProcessStat(pid);
      if (stat.has_value() && std::find(groups.begin(), groups.end(), stat->group) != groups.end() && Alive(pid)) {
        alive.insert(pid);
      }
    }
  }
  return std::vector<pid_t>(alive.begin(), alive.end());
}

// Reaps the orphans this subreaper inherited. Only after the controller
// itself was reaped, or waitpid(-1) could take its status.
void ReapOrphans() {
  while (waitpid(-1, nullptr, WNOHANG) > 0) {
  }
}

int ExitCodeOf(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

// Waits until `pid` (our child) ends or `deadline`; its wait status.
std::optional<int> WaitChild(pid_t pid, absl::Time deadline) {
  while (true) {
    int status = 0;
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) return status;
    if (done < 0 && errno != EINTR) return std::nullopt;
    if (absl::Now() >= deadline) return std::nullopt;
    absl::SleepFor(kPollInterval);
  }
}

// "tandem train: ..." from the controller's stderr, else its last line.
std::string ErrorText(const std::string& stderr_text) {
  std::string last;
  for (absl::string_view line : absl::StrSplit(stderr_text, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) continue;
    if (absl::StartsWith(line, "tandem train:")) return std::string(line);
    last = std::string(line);
  }
  return last;
}

// Starts `tandem train ARGS` in its own process group, dying with us, with
// TMPDIR (where the launcher makes its run directory) set to `tmpdir`.
absl::StatusOr<pid_t> SpawnTrain(const std::string& tandem, const std::vector<std::string>& train_args,
                                 const std::string& directory, const std::string& tmpdir) {
  std::vector<std::string> argv = {tandem, "train"};
  argv.insert(argv.end(), train_args.begin(), train_args.end());
  std::vector<char*> raw;
  for (std::string& arg : argv) raw.push_back(arg.data());
  raw.push_back(nullptr);
  const std::string out_path = directory + "/out";
  const std::string err_path = directory + "/err";
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return absl::ErrnoToStatus(errno, "fork");
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    setpgid(0, 0);
    const int in = open("/dev/null", O_RDONLY);
    const int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    const int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (in < 0 || out < 0 || err < 0 || dup2(in, STDIN_FILENO) < 0 || dup2(out, STDOUT_FILENO) < 0 ||
        dup2(err, STDERR_FILENO) < 0) {
      _exit(127);
    }
    setenv("TMPDIR", tmpdir.c_str(), 1);
    execv(raw[0], raw.data());
    _exit(127);
  }
  return pid;
}

std::vector<std::string> RunDirectoriesIn(const std::string& tmpdir) {
  std::vector<std::string> left;
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator(tmpdir, error)) {
    if (absl::StartsWith(entry.path().filename().string(), "tandem-")) left.push_back(entry.path().string());
  }
  std::sort(left.begin(), left.end());
  return left;
}

std::vector<pid_t> KillLeftovers(const std::vector<pid_t>& pids, const std::vector<pid_t>& groups,
                                 absl::Duration grace) {
  const absl::Time grace_deadline = absl::Now() + grace;
  while (!Survivors(pids, groups).empty() && absl::Now() < grace_deadline) {
    ReapOrphans();
    absl::SleepFor(kPollInterval);
  }
  const std::vector<pid_t> left = Survivors(pids, groups);
  for (pid_t pid : left) kill(pid, SIGKILL);
  const absl::Time reap_deadline = absl::Now() + grace;
  while (!Survivors(left).empty() && absl::Now() < reap_deadline) {
    ReapOrphans();
    absl::SleepFor(kPollInterval);
  }
  ReapOrphans();
  return left;
}

}  // namespace tandem::soak
