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
#include "tools/soak/soak_processes.h"

namespace tandem::soak {
namespace {

namespace fs = std::filesystem;

}  // namespace

absl::string_view FaultName(Fault fault) {
  switch (fault) {
    case Fault::kActorKill: return "actor-kill";
    case Fault::kActorStop: return "actor-stop";
    case Fault::kActorDrop: return "actor-drop";
    case Fault::kControllerKill: return "controller-kill";
  }
  return "?";
}

absl::StatusOr<Fault> ParseFault(absl::string_view name) {
  for (Fault fault : {Fault::kActorKill, Fault::kActorStop, Fault::kActorDrop, Fault::kControllerKill}) {
    if (name == FaultName(fault)) return fault;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown fault '", name, "': expected actor-kill, actor-stop, actor-drop or controller-kill"));
}

int FaultSignal(Fault fault) {
  switch (fault) {
    case Fault::kActorStop: return SIGSTOP;
    case Fault::kActorDrop: return SIGTERM;
    case Fault::kActorKill:
    case Fault::kControllerKill: return SIGKILL;
  }
  return SIGKILL;
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
      absl::Seconds(std::uniform_real_distribution<double>(0, absl::ToDoubleSeconds(options.max_delay))(random));
  const int32_t victim_index = std::uniform_int_distribution<int32_t>(0, options.actors - 1)(random);

  absl::StatusOr<pid_t> spawned = SpawnTrain(options.tandem, options.train_args, directory, tmpdir);
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
      result.delay_s = absl::ToDoubleSeconds(absl::Now() - appeared);
      result.training_started = absl::StrContains(ReadWholeFile(directory + "/out"), "\nstep ");
      const int signal_number = FaultSignal(fault);
      pid_t target = controller;
      if (fault != Fault::kControllerKill) {
        auto victim = std::next(actors.begin(), std::min<int32_t>(victim_index, actors.size() - 1));
        result.actor = victim->first;
        target = victim->second;
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
      while (!Survivors(actor_pids).empty() && absl::Now() < deadline) absl::SleepFor(kPollInterval);
      if (Survivors(actor_pids).empty()) result.detect_s = absl::ToDoubleSeconds(absl::Now() - *fault_time);
    } else {
      controller_status = WaitChild(controller, deadline);
      if (controller_status.has_value()) result.detect_s = absl::ToDoubleSeconds(absl::Now() - *fault_time);
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
  result.leftover_processes = KillLeftovers(actor_pids, actor_group > 0 ? std::vector<pid_t>{actor_group} : std::vector<pid_t>{},
                                            options.leftover_grace);
  result.leftover_directories = RunDirectoriesIn(tmpdir);
  result.error = ErrorText(ReadWholeFile(directory + "/err"));
  std::error_code ignored;
  fs::remove_all(directory, ignored);
  return result;
}

}  // namespace tandem::soak
