// SrunStep against a stand-in for srun (a shell script that records how it
// was run and prints what srun prints when tasks end), so that the parsing
// of srun's output is checked without a cluster. tests/slurm/ runs the real
// one.
#include "controller/srun_step.h"

#include <stdlib.h>
#include <sys/stat.h>

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::controller {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

class SrunStepTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/tandem-srun-step-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
    setenv("SLURM_JOB_ID", "42", 1);
  }
  void TearDown() override {
    unsetenv("SLURM_JOB_ID");
    std::system(absl::StrCat("rm -rf ", dir_).c_str());
  }

  // A fake srun running `body` after recording its arguments and the token
  // it was given.
  std::string FakeSrun(const std::string& body) {
    const std::string path = dir_ + "/srun";
    std::ofstream(path) << "#!/bin/sh\n"
                        << "echo \"$@\" > " << dir_ << "/args\n"
                        << "echo \"$TANDEM_JOB_TOKEN\" > " << dir_ << "/token\n"
                        << body;
    chmod(path.c_str(), 0755);
    return path;
  }

  absl::StatusOr<std::unique_ptr<SrunStep>> Start(const std::string& body, int32_t actors) {
    SrunStepOptions options;
    options.num_actors = actors;
    options.actor.program = "/opt/tandem/tandem-actor";
    options.actor.args = {"--slurm", "--actors", absl::StrCat(actors)};
    options.actor.environment = {{"TANDEM_JOB_TOKEN", "s3cret"}};
    options.srun = FakeSrun(body);
    options.min_grace = absl::Seconds(1);
    options.sink = [this](absl::string_view line) {
      absl::MutexLock lock(&mu_);
      lines_.emplace_back(line);
    };
    return SrunStep::Start(std::move(options));
  }

  std::string Read(const std::string& name) {
    std::ifstream file(dir_ + "/" + name);
    return std::string(std::istreambuf_iterator<char>(file), {});
  }
  std::vector<std::string> Lines() {
    absl::MutexLock lock(&mu_);
    return lines_;
  }

  std::string dir_;
  absl::Mutex mu_;
  std::vector<std::string> lines_ ABSL_GUARDED_BY(mu_);
};

TEST_F(SrunStepTest, EndsSrunReportsAreEachTasksWithItsNodeThenSrunsOwn) {
  absl::StatusOr<std::unique_ptr<SrunStep>> step = Start(
      "echo '0: hello from task 0'\n"
      "echo ' 1: hello from task 1'\n"
      "echo 'srun: error: n2: task 1: Killed' >&2\n"
      "echo 'srun: error: n1: tasks 0,2-3: Terminated' >&2\n"
      "echo 'srun: error: n1: task 2: Terminated' >&2\n"
      "exit 9\n",
      4);
  ASSERT_TRUE(step.ok()) << step.status();
  absl::StatusOr<ExitInfo> first = (*step)->WaitAny(absl::Seconds(10));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->actor.value, 1);
  EXPECT_EQ(first->node, "n2");
  EXPECT_EQ(first->Describe(), "srun: task 1 on node n2: Killed");
  std::vector<int32_t> terminated;
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<ExitInfo> next = (*step)->WaitAny(absl::Seconds(10));
    ASSERT_TRUE(next.ok()) << next.status();
    EXPECT_EQ(next->node, "n1");
    EXPECT_EQ(next->report, "Terminated");
    terminated.push_back(next->actor.value);
  }
  EXPECT_THAT(terminated, ElementsAre(0, 2, 3));  // task 2 once, though srun named it twice
  absl::StatusOr<ExitInfo> srun = (*step)->WaitAny(absl::Seconds(10));
  ASSERT_TRUE(srun.ok()) << srun.status();
  EXPECT_EQ(srun->actor.value, -1);
  EXPECT_EQ(srun->exit_code, 9);
  EXPECT_THAT(srun->Describe(), HasSubstr("srun (pid"));
  EXPECT_THAT(srun->Describe(), HasSubstr("exited with status 9: srun: error: n1: task 2: Terminated"));
  EXPECT_EQ((*step)->WaitAny(absl::Seconds(1)).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE((*step)->Poll().has_value());

  EXPECT_THAT(Lines(), ElementsAre("[actor 0] hello from task 0", "[actor 1] hello from task 1",
                                   "[srun] srun: error: n2: task 1: Killed",
                                   "[srun] srun: error: n1: tasks 0,2-3: Terminated",
                                   "[srun] srun: error: n1: task 2: Terminated"));
  // One step of four tasks; the token only in the environment.
  const std::string args = Read("args");
  EXPECT_THAT(args, HasSubstr("--ntasks=4 --kill-on-bad-exit=1 --label"));
  EXPECT_THAT(args, HasSubstr("/opt/tandem/tandem-actor --slurm --actors 4"));
  EXPECT_THAT(args, Not(HasSubstr("s3cret")));
  EXPECT_EQ(Read("token"), "s3cret\n");
}

TEST_F(SrunStepTest, LinesNameTheNodeOnceKnownAndACancelledStepSaysSo) {
  absl::StatusOr<std::unique_ptr<SrunStep>> step = Start(
      "sleep 0.5\n"
      "echo '0: working'\n"
      "echo '0: slurmstepd: error: *** STEP 42.0 ON n3 CANCELLED AT 2026-11-24T20:00:00 ***'\n"
      "echo 'srun: error: n3: task 0: Terminated' >&2\n"
      "exit 143\n",
      1);
  ASSERT_TRUE(step.ok()) << step.status();
  (*step)->SetNode(0, "n3");
  absl::StatusOr<ExitInfo> end = (*step)->WaitAny(absl::Seconds(10));
  ASSERT_TRUE(end.ok()) << end.status();
  EXPECT_EQ(end->actor.value, 0);
  EXPECT_THAT(end->Describe(), HasSubstr("srun: task 0 on node n3: Terminated"));
  EXPECT_THAT(end->Describe(), HasSubstr("*** STEP 42.0 ON n3 CANCELLED AT"));
  EXPECT_THAT(Lines(), testing::Contains("[actor 0 on n3] working"));
}

// srun --kill-on-bad-exit cancels the step after a task failed: that
// cancellation is what followed, not the cause, and it is waited for (a
// moment), not srun's end.
TEST_F(SrunStepTest, ACancellationAfterATasksEndIsReportedAsWhatFollowed) {
  absl::StatusOr<std::unique_ptr<SrunStep>> step = Start(
      "echo 'srun: error: n2: task 1: Killed' >&2\n"
      "sleep 0.1\n"
      "echo '0: slurmstepd-n1: error: *** STEP 42.0 ON n1 CANCELLED AT 2026-11-24T20:00:00 ***'\n"
      "exec sleep 30\n",
      2);
  ASSERT_TRUE(step.ok()) << step.status();
  absl::StatusOr<ExitInfo> end = (*step)->WaitAny(absl::Seconds(10));
  ASSERT_TRUE(end.ok()) << end.status();
  EXPECT_EQ(end->actor.value, 1);
  EXPECT_EQ(end->Describe(),
            "srun: task 1 on node n2: Killed; then Slurm: *** STEP 42.0 ON n1 CANCELLED AT 2026-11-24T20:00:00 ***");
}

TEST_F(SrunStepTest, OutsideAnAllocationIsAFailedPreconditionSayingWhy) {
  unsetenv("SLURM_JOB_ID");
  absl::StatusOr<std::unique_ptr<SrunStep>> step = Start("exit 0\n", 2);
  EXPECT_EQ(step.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(step.status().message()), HasSubstr("SLURM_JOB_ID is not set"));
}

TEST_F(SrunStepTest, ShutdownEndsAStepThatRunsOn) {
  absl::StatusOr<std::unique_ptr<SrunStep>> step = Start("exec sleep 60\n", 2);
  ASSERT_TRUE(step.ok()) << step.status();
  const absl::Time start = absl::Now();
  EXPECT_TRUE((*step)->Shutdown(absl::ZeroDuration()).ok());
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  absl::StatusOr<ExitInfo> end = (*step)->WaitAny(absl::Seconds(5));
  ASSERT_TRUE(end.ok()) << end.status();
  EXPECT_EQ(end->actor.value, -1);
}

TEST(SrunTaskList, ParsesSrunsRangesAndRefusesAnythingElse) {
  EXPECT_THAT(*ParseSrunTaskList("3", 4), ElementsAre(3));
  EXPECT_THAT(*ParseSrunTaskList("0-2,5", 8), ElementsAre(0, 1, 2, 5));
  for (const char* bad : {"", "4", "2-1", "-1", "a", "0-", "1,,2", "0-99999999999"}) {
    EXPECT_EQ(ParseSrunTaskList(bad, 4).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace tandem::controller
