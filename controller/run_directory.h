// RunDirectory: a job's private directory on this host (/tmp/tandem-XXXXXX,
// mode 0700), where the controller's control socket lives, and the sweep
// that removes those of controllers that died without cleaning up.
//
// A controller killed with SIGKILL (or by SIGTERM before it set up its
// handlers) cannot remove its run directory. So the owner holds a lock on
// <dir>/owner.lock (flock, LOCK_EX) for the directory's whole life; the
// kernel drops the lock when the owner dies, however it dies. Every new
// RunDirectory first sweeps: a tandem-XXXXXX directory of this user whose
// owner.lock it can lock is abandoned, and it removes it. The lock file is
// made under a temporary name, locked, then renamed into place, so an
// owner.lock is never seen unlocked while its owner lives, and a directory
// without one (being made, or from an older Tandem) is left alone.
//
// Owned by the launcher that made it; the destructor removes the directory
// and everything in it. Not thread-safe.
#ifndef TANDEM_CONTROLLER_RUN_DIRECTORY_H_
#define TANDEM_CONTROLLER_RUN_DIRECTORY_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tandem::controller {

class RunDirectory {
 public:
  // Sweeps abandoned run directories under `parent` (default: $TMPDIR, or
  // /tmp), then makes and locks a new one there. The errors of
  // rpc::MakePrivateRunDirectory; Internal when the lock cannot be made.
  static absl::StatusOr<std::unique_ptr<RunDirectory>> Create(absl::string_view parent = "");
  RunDirectory(const RunDirectory&) = delete;
  RunDirectory& operator=(const RunDirectory&) = delete;
  ~RunDirectory();

  const std::string& path() const { return path_; }

 private:
  RunDirectory(std::string path, int lock_fd) : path_(std::move(path)), lock_fd_(lock_fd) {}

  std::string path_;
  int lock_fd_;
};

// Removes the abandoned run directories under `parent` (default: $TMPDIR,
// or /tmp): those named tandem-XXXXXX, owned by this user, whose
// owner.lock is not held. Never touches a live job's directory, nor one
// without an owner.lock. Returns how many it removed.
int SweepAbandonedRunDirectories(absl::string_view parent = "");

}  // namespace tandem::controller

#endif  // TANDEM_CONTROLLER_RUN_DIRECTORY_H_
