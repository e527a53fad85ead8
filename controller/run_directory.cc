#include "controller/run_directory.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "ir/errno_status.h"
#include "rpc/connection.h"

namespace tandem::controller {
namespace {

constexpr char kPrefix[] = "tandem-";
constexpr char kLockName[] = "owner.lock";

std::string DefaultParent(absl::string_view parent) {
  if (!parent.empty()) return std::string(parent);
  const char* tmpdir = getenv("TMPDIR");
  return tmpdir != nullptr && tmpdir[0] != '\0' ? tmpdir : "/tmp";
}

// mkdtemp's names: the prefix and six letters or digits.
bool IsRunDirectoryName(absl::string_view name) {
  if (!absl::ConsumePrefix(&name, kPrefix) || name.size() != 6) return false;
  for (char c : name) {
    const bool alphanumeric = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (!alphanumeric) return false;
  }
  return true;
}

// Removes `path` if it is an abandoned run directory; true if it did.
bool RemoveIfAbandoned(const std::string& path) {
  struct stat info {};
  if (lstat(path.c_str(), &info) != 0 || !S_ISDIR(info.st_mode) || info.st_uid != geteuid()) return false;
  const std::string lock_path = absl::StrCat(path, "/", kLockName);
  const int fd = open(lock_path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return false;  // no owner.lock: being made, or not ours to judge
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    close(fd);  // held: its owner lives
    return false;
  }
  // Ours now: its owner is gone, and a second sweeper cannot get here.
  std::error_code error;
  const bool removed = std::filesystem::remove_all(path, error) > 0 && !error;
  close(fd);
  return removed;
}

}  // namespace

int SweepAbandonedRunDirectories(absl::string_view parent) {
  const std::string directory = DefaultParent(parent);
  DIR* listing = opendir(directory.c_str());
  if (listing == nullptr) return 0;
  int removed = 0;
  while (const dirent* entry = readdir(listing)) {
    if (!IsRunDirectoryName(entry->d_name)) continue;
    if (RemoveIfAbandoned(absl::StrCat(directory, "/", entry->d_name))) ++removed;
  }
  closedir(listing);
  return removed;
}

absl::StatusOr<std::unique_ptr<RunDirectory>> RunDirectory::Create(absl::string_view parent) {
  const std::string directory = DefaultParent(parent);
  SweepAbandonedRunDirectories(directory);
  absl::StatusOr<std::string> path = rpc::MakePrivateRunDirectory(directory);
  if (!path.ok()) return path.status();
  // Locked under a temporary name, then renamed: a sweeper never sees an
  // unlocked owner.lock of a live job.
  const std::string temporary = absl::StrCat(*path, "/", kLockName, ".new");
  const std::string lock_path = absl::StrCat(*path, "/", kLockName);
  const int fd = open(temporary.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0 || flock(fd, LOCK_EX | LOCK_NB) != 0 || rename(temporary.c_str(), lock_path.c_str()) != 0) {
    const int error = errno;
    if (fd >= 0) close(fd);
    std::error_code ignored;
    std::filesystem::remove_all(*path, ignored);
    return ir::ErrnoStatus(absl::StatusCode::kInternal, absl::StrCat("cannot lock the run directory ", *path), error);
  }
  return std::unique_ptr<RunDirectory>(new RunDirectory(*std::move(path), fd));
}

RunDirectory::~RunDirectory() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
  close(lock_fd_);
}

}  // namespace tandem::controller
