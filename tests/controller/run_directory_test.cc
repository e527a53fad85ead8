// Run directories outlive no controller: one whose owner was killed (even
// with SIGKILL) is removed by the next one made, a live job's never is, and
// a directory without an owner's lock is left alone.
#include "controller/run_directory.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::controller {
namespace {

namespace fs = std::filesystem;

class RunDirectoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    parent_ = fs::path(::testing::TempDir()) / absl::StrCat("tandem-run-directory-test-", getpid());
    fs::remove_all(parent_);
    fs::create_directories(parent_);
  }
  void TearDown() override { fs::remove_all(parent_); }

  int Count() const {
    int count = 0;
    for (const fs::directory_entry& entry : fs::directory_iterator(parent_)) {
      if (entry.path().filename().string().rfind("tandem-", 0) == 0) ++count;
    }
    return count;
  }

  fs::path parent_;
};

TEST_F(RunDirectoryTest, ALiveJobsDirectoryIsNeverRemoved) {
  absl::StatusOr<std::unique_ptr<RunDirectory>> live = RunDirectory::Create(parent_.string());
  ASSERT_TRUE(live.ok()) << live.status();
  EXPECT_EQ(SweepAbandonedRunDirectories(parent_.string()), 0);
  absl::StatusOr<std::unique_ptr<RunDirectory>> second = RunDirectory::Create(parent_.string());
  ASSERT_TRUE(second.ok());
  EXPECT_TRUE(fs::is_directory((*live)->path()));
  EXPECT_EQ(Count(), 2);
  const std::string path = (*live)->path();
  live->reset();
  EXPECT_FALSE(fs::exists(path));
}

TEST_F(RunDirectoryTest, AKilledOwnersDirectoryIsRemovedByTheNextOne) {
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    absl::StatusOr<std::unique_ptr<RunDirectory>> directory = RunDirectory::Create(parent_.string());
    const std::string path = directory.ok() ? (*directory)->path() : "";
    if (write(pipe_fds[1], path.data(), path.size()) < 0) _exit(2);
    close(pipe_fds[1]);
    pause();
    _exit(0);
  }
  close(pipe_fds[1]);
  char buffer[4096];
  const ssize_t got = read(pipe_fds[0], buffer, sizeof(buffer));
  close(pipe_fds[0]);
  ASSERT_GT(got, 0);
  const std::string abandoned(buffer, static_cast<size_t>(got));
  kill(child, SIGKILL);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  ASSERT_TRUE(fs::is_directory(abandoned));

  absl::StatusOr<std::unique_ptr<RunDirectory>> next = RunDirectory::Create(parent_.string());
  ASSERT_TRUE(next.ok());
  EXPECT_FALSE(fs::exists(abandoned));
  EXPECT_EQ(Count(), 1);
}

TEST_F(RunDirectoryTest, DirectoriesWithoutAnOwnersLockAreLeftAlone) {
  // One being made right now, or one of an older Tandem: not ours to judge.
  fs::create_directory(parent_ / "tandem-AbC123");
  // Not a run directory's name at all.
  fs::create_directory(parent_ / "tandem-cli-test-AbC123");
  std::ofstream(parent_ / "tandem-cli-test-AbC123" / "owner.lock") << "";
  EXPECT_EQ(SweepAbandonedRunDirectories(parent_.string()), 0);
  EXPECT_TRUE(fs::is_directory(parent_ / "tandem-AbC123"));
  EXPECT_TRUE(fs::is_directory(parent_ / "tandem-cli-test-AbC123"));
}

}  // namespace
}  // namespace tandem::controller
