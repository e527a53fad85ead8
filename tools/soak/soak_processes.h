// What the soak's trials share: starting `tandem train` as a child in its
// own process group, finding its actor processes, waiting on them with
// deadlines, reaping orphans, and finding what a run left behind. For one
// thread, in a process that made itself a child subreaper
// (tools/soak/trial.h: BecomeSubreaper).
#ifndef TANDEM_TOOLS_SOAK_SOAK_PROCESSES_H_
#define TANDEM_TOOLS_SOAK_SOAK_PROCESSES_H_

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace tandem::soak {

// How often waits look again.
inline constexpr absl::Duration kPollInterval = absl::Milliseconds(5);

// The whole file, or "" when it cannot be read.
std::string ReadWholeFile(const std::string& path);

// Alive: exists and is neither a zombie nor dead. A stopped process is alive.
bool Alive(pid_t pid);

// The live tandem-actor children of `controller`, by actor id
// (TANDEM_ACTOR_ID in their environment).
std::map<int32_t, pid_t> ActorsOf(pid_t controller);

// Live processes among `pids` and in the process groups `groups`.
std::vector<pid_t> Survivors(const std::vector<pid_t>& pids, const std::vector<pid_t>& groups = {});

// Reaps the orphans this subreaper inherited. Only after the controller
// itself was reaped, or waitpid(-1) could take its status.
void ReapOrphans();

// A wait status as an exit code: the code, or 128 + the signal; -1 otherwise.
int ExitCodeOf(int status);

// Waits until `pid` (our child) ends or `deadline`; its wait status.
std::optional<int> WaitChild(pid_t pid, absl::Time deadline);

// "tandem train: ..." from the controller's stderr, else its last line.
std::string ErrorText(const std::string& stderr_text);

// Starts `tandem train ARGS` in its own process group, dying with us, with
// TMPDIR (where the launcher makes its run directory) set to `tmpdir`;
// its stdout and stderr go to `directory`/out and /err.
absl::StatusOr<pid_t> SpawnTrain(const std::string& tandem, const std::vector<std::string>& train_args,
                                 const std::string& directory, const std::string& tmpdir);

// The `tandem-*` run directories in `tmpdir`, sorted.
std::vector<std::string> RunDirectoriesIn(const std::string& tmpdir);

// Ends what a run left: waits `grace` for the processes among `pids` and
// in `groups` to end by themselves, kills and reaps (within `grace`) those
// that did not, and returns them.
std::vector<pid_t> KillLeftovers(const std::vector<pid_t>& pids, const std::vector<pid_t>& groups,
                                 absl::Duration grace);

}  // namespace tandem::soak

#endif  // TANDEM_TOOLS_SOAK_SOAK_PROCESSES_H_
