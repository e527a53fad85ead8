#include "tools/soak/trial.h"

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
#include <map>
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

constexpr absl::Duration kPollInterval = absl::Milliseconds(5);
constexpr char kActorName[] = "tandem-actor";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Alive: exists and is neither a zombie nor dead. A stopped process is alive.
bool Alive(pid_t pid) {
  const std::optional<ir::ProcessStat> stat = ir::ReadProcessStat(pid);
  return stat.has_value() && !stat->exited();
}

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
  const std::string environment = ReadFile(absl::StrCat("/proc/", pid, "/environ"));
  for (absl::string_view entry : absl::StrSplit(environment, '\0')) {
    int32_t id = -1;
    if (absl::ConsumePrefix(&entry, "TANDEM_ACTOR_ID=") && absl::SimpleAtoi(entry, &id)) return id;
  }
  return -1;
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
std::vector<pid_t> Survivors(const std::vector<pid_t>& pids, pid_t group) {
  std::set<pid_t> alive;
  for (pid_t pid : pids) {
    if (Alive(pid)) alive.insert(pid);
  }
  if (group > 0) {
    for (pid_t pid : AllPids()) {
      const std::optional<ir::ProcessStat> stat = ir::ReadProcessStat(pid);
      if (stat.has_value() && stat->group == group && Alive(pid)) alive.insert(pid);
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
absl::StatusOr<pid_t> SpawnController(const TrialOptions& options, const std::string& directory,
                                      const std::string& tmpdir) {
  std::vector<std::string> argv = {options.tandem, "train"};
  argv.insert(argv.end(), options.train_args.begin(), options.train_args.end());
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

double Seconds(absl::Duration duration) { return absl::ToDoubleSeconds(duration); }

}  // namespace

absl::string_view FaultName(Fault fault) {
  switch (fault) {
    case Fault::kActorKill: return "actor-kill";
    case Fault::kActorStop: return "actor-stop";
    case Fault::kControllerKill: return "controller-kill";
  }
  return "?";
}

absl::StatusOr<Fault> ParseFault(absl::string_view name) {
  for (Fault fault : {Fault::kActorKill, Fault::kActorStop, Fault::kControllerKill}) {
    if (name == FaultName(fault)) return fault;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown fault '", name, "': expected actor-kill, actor-stop or controller-kill"));
}

absl::Status BecomeSubreaper() {
  if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) return absl::ErrnoToStatus(errno, "prctl(PR_SET_CHILD_SUBREAPER)");
  return absl::OkStatus();
}

TrialResult RunTrial(const TrialOptions& options, Fault fault, std::mt19937_64& random) {
  TrialResult result;
  result.fault = fault;
  char directory_template[] = "/tmp/tandem-soak-XXXXXX";
  if (mkdtemp(directory_template) == nullptr) {
    result.problem = absl::StrCat("cannot make a trial directory: ", ir::ErrnoText(errno));
    return result;
  }
  const std::string directory = directory_template;
  const std::string tmpdir = directory + "/tmp";
  fs::create_directory(tmpdir);
  // Drawn before anything runs, so a seed gives the same faults however
  // long the steps take.
  const absl::Duration delay =
      absl::Seconds(std::uniform_real_distribution<double>(0, Seconds(options.max_delay))(random));
  const int32_t victim_index = std::uniform_int_distribution<int32_t>(0, options.actors - 1)(random);

  absl::StatusOr<pid_t> spawned = SpawnController(options, directory, tmpdir);
  if (!spawned.ok()) {
    result.problem = spawned.status().ToString();
    fs::remove_all(directory);
    return result;
  }
  const pid_t controller = *spawned;
  std::optional<int> controller_status;
  std::map<int32_t, pid_t> actors;
  pid_t actor_group = 0;

  // 1. Until every actor process is there.
  const absl::Time start_deadline = absl::Now() + options.start_timeout;
  while (true) {
    actors = ActorsOf(controller);
    if (static_cast<int32_t>(actors.size()) >= options.actors) break;
    controller_status = WaitChild(controller, absl::Now());
    if (controller_status.has_value()) {
      result.problem = "the controller exited before its actors appeared";
      break;
    }
    if (absl::Now() >= start_deadline) {
      result.problem = absl::StrCat("only ", actors.size(), " of ", options.actors, " actors appeared within ",
                                    absl::FormatDuration(options.start_timeout));
      break;
    }
    absl::SleepFor(kPollInterval);
  }
  std::vector<pid_t> actor_pids;
  for (const auto& [id, pid] : actors) actor_pids.push_back(pid);
  if (!actor_pids.empty()) {
    const std::optional<ir::ProcessStat> stat = ir::ReadProcessStat(actor_pids.front());
    if (stat.has_value()) actor_group = stat->group;
  }

  // 2. The fault, at the drawn moment.
  std::optional<absl::Time> fault_time;
  if (result.problem.empty()) {
    const absl::Time appeared = absl::Now();
    controller_status = WaitChild(controller, appeared + delay);
    if (controller_status.has_value()) {
      result.problem = "the controller exited before the fault";
    } else {
      result.delay_s = Seconds(absl::Now() - appeared);
      result.training_started = absl::StrContains(ReadFile(directory + "/out"), "\nstep ");
      int signal_number = SIGKILL;
      pid_t target = controller;
      if (fault != Fault::kControllerKill) {
        auto victim = std::next(actors.begin(), std::min<int32_t>(victim_index, actors.size() - 1));
        result.actor = victim->first;
        target = victim->second;
        if (fault == Fault::kActorStop) signal_number = SIGSTOP;
      }
      if (kill(target, signal_number) != 0) {
        result.problem = absl::StrCat("cannot signal pid ", target, ": ", ir::ErrnoText(errno));
      } else {
        fault_time = absl::Now();
      }
    }
  }

  // 3. Detection: the controller's exit, or for a controller kill every
  // actor's.
  if (fault_time.has_value()) {
    const absl::Time deadline = *fault_time + options.detect_timeout;
    if (fault == Fault::kControllerKill) {
      controller_status = WaitChild(controller, deadline);
      while (!Survivors(actor_pids, 0).empty() && absl::Now() < deadline) absl::SleepFor(kPollInterval);
      if (Survivors(actor_pids, 0).empty()) result.detect_s = Seconds(absl::Now() - *fault_time);
    } else {
      controller_status = WaitChild(controller, deadline);
      if (controller_status.has_value()) result.detect_s = Seconds(absl::Now() - *fault_time);
    }
  }
  if (controller_status.has_value()) {
    result.exit_code = ExitCodeOf(*controller_status);
  } else {
    killpg(controller, SIGKILL);  // the controller's own group; it is not reaped, so the id is still its
    controller_status = WaitChild(controller, absl::Now() + options.leftover_grace);
  }
  ReapOrphans();

  // 4. Leftovers, after a grace period, then clean up whatever is left.
  const absl::Time grace_deadline = absl::Now() + options.leftover_grace;
  while (!Survivors(actor_pids, actor_group).empty() && absl::Now() < grace_deadline) {
    ReapOrphans();
    absl::SleepFor(kPollInterval);
  }
  result.leftover_processes = Survivors(actor_pids, actor_group);
  for (pid_t pid : result.leftover_processes) kill(pid, SIGKILL);
  const absl::Time reap_deadline = absl::Now() + options.leftover_grace;
  while (!Survivors(result.leftover_processes, 0).empty() && absl::Now() < reap_deadline) {
    ReapOrphans();
    absl::SleepFor(kPollInterval);
  }
  ReapOrphans();
  result.leftover_directories = RunDirectoriesIn(tmpdir);
  result.error = ErrorText(ReadFile(directory + "/err"));
  std::error_code ignored;
  fs::remove_all(directory, ignored);
  return result;
}

}  // namespace tandem::soak
