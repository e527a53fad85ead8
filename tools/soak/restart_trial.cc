#include "tools/soak/restart_trial.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <utility>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "ir/errno_status.h"
#include "ir/process_stat.h"
#include "tools/soak/soak_processes.h"

namespace tandem::soak {
namespace {

namespace fs = std::filesystem;

// A fresh trial directory (with tmp/ for the run's TMPDIR); "" on failure.
std::string MakeTrialDirectory() {
  char directory_template[] = "/tmp/tandem-soak-XXXXXX";
  if (mkdtemp(directory_template) == nullptr) return "";
  std::error_code error;
  fs::create_directory(fs::path(directory_template) / "tmp", error);
  return error ? "" : directory_template;
}

std::vector<std::string> WithCheckpoints(const RestartTrialOptions& options, const std::string& root,
                                         int32_t max_restarts) {
  std::vector<std::string> args = options.train_args;
  args.insert(args.end(), {"--checkpoint-dir", root});
  if (max_restarts > 0) args.insert(args.end(), {"--max-restarts", std::to_string(max_restarts)});
  return args;
}

// The .step-*.partial directories under `root` (checkpoints being written,
// or left by a write a fault broke), by inode: a write made again after a
// restart gets a directory of the same name and a new inode.
std::set<std::pair<std::string, ino_t>> PartialCheckpoints(const std::string& root) {
  std::set<std::pair<std::string, ino_t>> found;
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator(root, error)) {
    const std::string name = entry.path().filename().string();
    struct stat info {};
    if (absl::StartsWith(name, ".step-") && absl::EndsWith(name, ".partial") &&
        stat(entry.path().c_str(), &info) == 0) {
      found.emplace(name, info.st_ino);
    }
  }
  return found;
}

// Whether a checkpoint not among `before` is being written under `root`.
bool NewCheckpointBeingWritten(const std::string& root, const std::set<std::pair<std::string, ino_t>>& before) {
  for (const auto& partial : PartialCheckpoints(root)) {
    if (!before.contains(partial)) return true;
  }
  return false;
}

// The step-* directories under `root`, sorted.
std::vector<std::string> CheckpointNames(const std::string& root) {
  std::vector<std::string> names;
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator(root, error)) {
    const std::string name = entry.path().filename().string();
    if (absl::StartsWith(name, "step-")) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<std::string> FileNames(const fs::path& directory) {
  std::vector<std::string> names;
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator(directory, error)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// "restarts: N of M (K steps redone, S s lost)" from the run's output.
void ParseRestartLine(const std::string& out, RestartTrialResult& result) {
  static const std::regex line(R"(restarts: (\d+) of \d+ \((\d+) steps? redone, ([0-9.]+) s lost\))");
  std::smatch match;
  if (!std::regex_search(out, match, line)) return;
  (void)absl::SimpleAtoi(match[1].str(), &result.restarts);
  (void)absl::SimpleAtoi(match[2].str(), &result.steps_redone);
  (void)absl::SimpleAtod(match[3].str(), &result.seconds_lost);
}

// The victim's process is gone and `actors` live actors run again, none of
// them the victim: the restart is over (or the run ended). False at `deadline`.
bool AwaitReplacement(pid_t controller, pid_t victim, int32_t actors, absl::Time deadline) {
  while (absl::Now() < deadline) {
    if (!Alive(controller)) return false;
    const std::map<int32_t, pid_t> now = ActorsOf(controller);
    bool replaced = static_cast<int32_t>(now.size()) >= actors && !Alive(victim);
    for (const auto& [id, pid] : now) replaced = replaced && pid != victim;
    if (replaced) return true;
    absl::SleepFor(kPollInterval);
  }
  return false;
}

}  // namespace

std::string CompareCheckpointRoots(const std::string& expected, const std::string& got, int32_t& compared) {
  compared = 0;
  const std::vector<std::string> want = CheckpointNames(expected);
  const std::vector<std::string> have = CheckpointNames(got);
  if (want.empty()) return absl::StrCat("the uninterrupted run left no checkpoint under ", expected);
  if (want != have) {
    return absl::StrCat("checkpoints ", absl::StrJoin(have, ","), " instead of ", absl::StrJoin(want, ","));
  }
  for (const std::string& name : want) {
    const fs::path a = fs::path(expected) / name;
    const fs::path b = fs::path(got) / name;
    const std::vector<std::string> files = FileNames(a);
    if (files != FileNames(b)) return absl::StrCat(name, ": other files than the uninterrupted run's");
    for (const std::string& file : files) {
      if (ReadWholeFile((a / file).string()) != ReadWholeFile((b / file).string())) {
        return absl::StrCat(name, "/", file, " differs from the uninterrupted run's");
      }
    }
    ++compared;
  }
  return "";
}

absl::StatusOr<double> RunUninterrupted(const RestartTrialOptions& options, const std::string& root) {
  const std::string directory = MakeTrialDirectory();
  if (directory.empty()) return absl::InternalError(absl::StrCat("cannot make a directory: ", ir::ErrnoText(errno)));
  const absl::Time start = absl::Now();
  absl::StatusOr<pid_t> controller =
      SpawnTrain(options.tandem, WithCheckpoints(options, root, 0), directory, directory + "/tmp");
  if (!controller.ok()) return controller.status();
  std::optional<int> status = WaitChild(*controller, start + options.run_timeout);
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  if (!status.has_value()) killpg(*controller, SIGKILL);
  (void)WaitChild(*controller, absl::Now() + options.leftover_grace);
  ReapOrphans();
  const std::string error = ErrorText(ReadWholeFile(directory + "/err"));
  std::error_code ignored;
  fs::remove_all(directory, ignored);
  if (!status.has_value() || ExitCodeOf(*status) != 0) {
    return absl::InternalError(absl::StrCat("the uninterrupted run failed (exit ",
                                            status.has_value() ? ExitCodeOf(*status) : -1, "): ", error));
  }
  return seconds;
}

RestartTrialResult RunRestartTrial(const RestartTrialOptions& options, std::mt19937_64& random) {
  RestartTrialResult result;
  const std::string directory = MakeTrialDirectory();
  if (directory.empty()) {
    result.problem = absl::StrCat("cannot make a trial directory: ", ir::ErrnoText(errno));
    return result;
  }
  const std::string root = directory + "/ck";
  const std::string tmpdir = directory + "/tmp";
  // Drawn before anything runs, so a seed gives the same faults however
  // long the steps take.
  struct Plan {
    Fault kind;
    absl::Duration delay;
    bool at_checkpoint;
    int32_t victim;
  };
  std::vector<Plan> plans;
  for (int32_t i = 0; i < options.faults; ++i) {
    Plan plan;
    plan.kind = options.kinds[std::uniform_int_distribution<size_t>(0, options.kinds.size() - 1)(random)];
    plan.delay =
        absl::Seconds(std::uniform_real_distribution<double>(0, absl::ToDoubleSeconds(options.max_delay))(random));
    plan.at_checkpoint = std::uniform_real_distribution<double>(0, 1)(random) < options.during_checkpoint;
    plan.victim = std::uniform_int_distribution<int32_t>(0, options.actors - 1)(random);
    plans.push_back(plan);
  }

  const absl::Time start = absl::Now();
  const absl::Time deadline = start + options.run_timeout;
  absl::StatusOr<pid_t> spawned =
      SpawnTrain(options.tandem, WithCheckpoints(options, root, options.max_restarts), directory, tmpdir);
  if (!spawned.ok()) {
    result.problem = spawned.status().ToString();
    std::error_code ignored;
    fs::remove_all(directory, ignored);
    return result;
  }
  const pid_t controller = *spawned;
  // The actors of every start, and their process groups (one per start),
  // for the leftover check.
  std::set<pid_t> every_actor;
  std::set<pid_t> groups;
  auto note_actors = [&] {
    std::map<int32_t, pid_t> actors = ActorsOf(controller);
    for (const auto& [id, pid] : actors) {
      every_actor.insert(pid);
      if (const std::optional<ir::ProcessStat> stat = ir::ReadProcessStat(pid); stat.has_value()) {
        groups.insert(stat->group);
      }
    }
    return actors;
  };
  std::optional<int> status;
  for (const Plan& plan : plans) {
    // Until the run's actors are all up.
    std::map<int32_t, pid_t> actors;
    while (absl::Now() < deadline && !(status = WaitChild(controller, absl::Now())).has_value()) {
      actors = note_actors();
      if (static_cast<int32_t>(actors.size()) >= options.actors) break;
      absl::SleepFor(kPollInterval);
    }
    if (status.has_value() || absl::Now() >= deadline) break;
    // The moment: a delay, or the next checkpoint's write (bounded by the delay's
    // ceiling past the first wait, so a run between checkpoints still gets its fault).
    const absl::Time at = absl::Now() + plan.delay;
    bool writing = false;
    if (plan.at_checkpoint) {
      const absl::Time give_up = absl::Now() + options.max_delay * 4;
      const auto before = PartialCheckpoints(root);  // left by a fault before: not being written
      while (absl::Now() < std::min(give_up, deadline) && !(writing = NewCheckpointBeingWritten(root, before))) {
        if ((status = WaitChild(controller, absl::Now())).has_value()) break;
        absl::SleepFor(absl::Microseconds(500));
      }
    } else {
      status = WaitChild(controller, std::min(at, deadline));
    }
    if (status.has_value()) break;
    actors = note_actors();
    if (actors.empty()) continue;
    auto victim = std::next(actors.begin(), std::min<size_t>(plan.victim, actors.size() - 1));
    RestartFault fault{.kind = plan.kind,
                       .actor = victim->first,
                       .at_s = absl::ToDoubleSeconds(absl::Now() - start),
                       .during_checkpoint = writing && !PartialCheckpoints(root).empty()};
    if (kill(victim->second, FaultSignal(plan.kind)) != 0) {
      result.problem = absl::StrCat("cannot signal pid ", victim->second, ": ", ir::ErrnoText(errno));
      break;
    }
    result.faults.push_back(fault);
    (void)AwaitReplacement(controller, victim->second, options.actors, deadline);
  }
  if (!status.has_value()) status = WaitChild(controller, deadline);
  result.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  if (status.has_value()) {
    result.exit_code = ExitCodeOf(*status);
  } else {
    killpg(controller, SIGKILL);
    (void)WaitChild(controller, absl::Now() + options.leftover_grace);
  }
  ReapOrphans();
  result.leftover_processes = KillLeftovers(std::vector<pid_t>(every_actor.begin(), every_actor.end()),
                                            std::vector<pid_t>(groups.begin(), groups.end()), options.leftover_grace);
  result.leftover_directories = RunDirectoriesIn(tmpdir);
  const std::string out = ReadWholeFile(directory + "/out");
  ParseRestartLine(out, result);
  if (result.exit_code != 0) result.error = ErrorText(ReadWholeFile(directory + "/err"));
  result.difference = CompareCheckpointRoots(options.expected_checkpoints, root, result.checkpoints);
  std::error_code ignored;
  fs::remove_all(directory, ignored);
  return result;
}

}  // namespace tandem::soak
