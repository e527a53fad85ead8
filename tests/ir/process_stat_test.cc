// ir/process_stat.h: /proc/PID/stat read as proc(5) lays it out.
#include "ir/process_stat.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gtest/gtest.h"

namespace tandem::ir {
namespace {

TEST(ProcessStat, TheFieldsAfterTheNameStartAfterItsLastParenthesis) {
  const std::optional<ProcessStat> stat = ParseProcessStat("4242 (a (b) c) T 17 4242 4242 0 -1 4194560");
  ASSERT_TRUE(stat.has_value());
  EXPECT_EQ(stat->name, "a (b) c");
  EXPECT_EQ(stat->state, 'T');
  EXPECT_TRUE(stat->stopped());
  EXPECT_FALSE(stat->exited());
  EXPECT_EQ(stat->parent, 17);
  EXPECT_EQ(stat->group, 4242);
  EXPECT_TRUE(ParseProcessStat("9 (z) Z 1 9")->exited());
}

TEST(ProcessStat, TextThatDoesNotReadSoIsNothing) {
  EXPECT_FALSE(ParseProcessStat("").has_value());
  EXPECT_FALSE(ParseProcessStat("12 (name").has_value());
  EXPECT_FALSE(ParseProcessStat("12 (name) S").has_value());
  EXPECT_FALSE(ParseProcessStat("12 (name) S x 3").has_value());
  EXPECT_FALSE(ParseProcessStat("12 (name) SS 1 3").has_value());
}

TEST(ProcessStat, ReadsThisProcessAndAStoppedChildAndForgetsAReapedOne) {
  const std::optional<ProcessStat> self = ReadProcessStat(getpid());
  ASSERT_TRUE(self.has_value());
  EXPECT_EQ(self->parent, getppid());
  EXPECT_FALSE(self->stopped());

  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    pause();
    _exit(0);
  }
  ASSERT_EQ(kill(child, SIGSTOP), 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, WUNTRACED), child);  // bounded: SIGSTOP stops it at once
  ASSERT_TRUE(WIFSTOPPED(status));
  std::optional<ProcessStat> stopped = ReadProcessStat(child);
  ASSERT_TRUE(stopped.has_value());
  EXPECT_TRUE(stopped->stopped());
  EXPECT_EQ(stopped->parent, getpid());
  ASSERT_EQ(kill(child, SIGKILL), 0);
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_FALSE(ReadProcessStat(child).has_value());
}

}  // namespace
}  // namespace tandem::ir
