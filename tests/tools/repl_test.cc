// `tandem repl` as a user drives it: a script over a live GPT pipeline on 4
// actor processes with a breakpoint, where, inspect, continue, loss and a
// schedule switch; errors that do not end the session; a clean exit that
// leaves no actor behind.
#include <signal.h>
#include <sys/wait.h>

#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/tools/cli_process.h"

namespace tandem::cli {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

// A script file, removed with the object.
class Script {
 public:
  explicit Script(const std::string& commands) {
    char path[] = "/tmp/tandem-repl-script-XXXXXX";
    close(mkstemp(path));
    path_ = path;
    std::ofstream(path_) << commands;
  }
  ~Script() { unlink(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// `tandem repl <args> --script` over `commands`.
class Repl : private Script, public CliProcess {
 public:
  Repl(const std::vector<std::string>& args, const std::string& commands)
      : Script(commands), CliProcess(Args(args, path())) {}

 private:
  static std::vector<std::string> Args(std::vector<std::string> args, const std::string& script) {
    args.insert(args.begin(), "repl");
    args.push_back("--script");
    args.push_back(script);
    return args;
  }
};

const std::vector<std::string> kGpt = {"--model", "gpt", "--actors", "4"};

// The value actor 2 receives for its forward of microbatch 0, as `show
// program 2` names it ("%90" in "recv <- actor 1 tag 3 (%90@0)").
std::string ReceivedActivation() {
  Repl repl(kGpt, "show program 2\nquit\n");
  EXPECT_EQ(ExitCode(repl), 0) << repl.err();
  std::smatch match;
  const std::string out = repl.out();
  if (!std::regex_search(out, match, std::regex(R"(F2\.0  recv <- actor 1 tag \d+ \((%\d+)@0\))"))) return "";
  return match[1];
}

// Actor pids from `actors` output lines ("    2  pid 1234   ...").
std::vector<pid_t> ActorPids(const std::string& out) {
  std::vector<pid_t> pids;
  std::smatch match;
  std::string rest = out;
  while (std::regex_search(rest, match, std::regex(R"(\n +\d+  pid (\d+) )"))) {
    pids.push_back(std::stoi(match[1]));
    rest = match.suffix();
  }
  return pids;
}

TEST(Repl, BreakWhereInspectContinueAndAScheduleSwitch) {
  const std::string activation = ReceivedActivation();
  ASSERT_FALSE(activation.empty());
  Repl repl(kGpt, absl::StrCat("break 2 B1.0\n"  // B1.0 is stage 1's: it runs on actor 1
                               "break 2 B2.0\n"
                               "step\n"
                               "where\n"
                               "inspect 2 ", activation, " 0\n"
                               "actors\n"
                               "continue\n"
                               "loss\n"
                               "set schedule zb-h1\n"
                               "step 2\n"
                               "no-such-command\n"
                               "quit\n"));
  ASSERT_EQ(ExitCode(repl), 0) << repl.err();
  const std::string out = repl.out();
  const std::string err = repl.err();
  EXPECT_THAT(err, HasSubstr("error: actor 2 runs no task B1.0; it runs on actor 1"));
  EXPECT_THAT(out, AllOf(HasSubstr("breakpoint 1: actor 2 pauses before B2.0"),
                         HasSubstr("step 1 paused: actor 2 before B2.0 (breakpoint 1)")));
  // where: actor 2 paused, actor 1 waiting for it, actor 3 for its forward.
  EXPECT_THAT(out, AllOf(HasSubstr("actor 2  task 3/9  paused before B2.0 (breakpoint 1); waited for by actor 1 "
                                   "(for B2.0), actor 3 (for F2.2)"),
                         HasSubstr("actor 1  task 4/9  before B1.0, waiting for actor 2's B2.0"),
                         HasSubstr("actor 0  task 5/9  before B0.0, waiting for actor 1's B1.0")));
  // inspect: finite statistics of a [batch, seq, d] activation.
  EXPECT_THAT(out, AllOf(HasSubstr(absl::StrCat("actor 2 ", activation, "@0: f32[8,32,64]")), HasSubstr("  min "),
                         HasSubstr("all finite"), HasSubstr("first values: ")));
  EXPECT_THAT(out, HasSubstr("paused before B2.0"));  // in `actors`
  EXPECT_THAT(out, AllOf(HasSubstr("step 1: loss "), HasSubstr("step 1: mean loss "),
                         HasSubstr("recompiled: schedule zb-h1, 4 microbatches, 4 actors; going on after step 1"),
                         HasSubstr("note: breakpoint 1 (2 B2.0) matches no task of this schedule"),
                         HasSubstr("step 2: loss "), HasSubstr("step 3: loss ")));
  EXPECT_THAT(err, HasSubstr("error: unknown command 'no-such-command' (try help)"));
  EXPECT_THAT(out, HasSubstr("shutting the actors down"));

  const std::vector<pid_t> pids = ActorPids(out);
  ASSERT_EQ(pids.size(), 4u) << out;
  for (pid_t pid : pids) EXPECT_TRUE(Gone(pid)) << "actor pid " << pid << " outlived the REPL";
}

TEST(Repl, ShowsThePlanTracesStepsAndDrawsTheSchedule) {
  char dir_template[] = "/tmp/tandem-repl-files-XXXXXX";
  const std::string dir = mkdtemp(dir_template);
  Repl repl({"--model", "mlp", "--actors", "2", "--steps", "3"},
            absl::StrCat("show ir 1\nshow schedule\nshow placement\nsim\ndraw\ndraw svg ", dir,
                         "/plan.svg\ndraw perfetto ", dir, "/plan.json\ntrace on\nrun\ntrace save ", dir,
                         "/measured.json\nshow memory\nrun\n"));
  ASSERT_EQ(ExitCode(repl), 0) << repl.err();
  const std::string out = repl.out();
  EXPECT_THAT(out, AllOf(HasSubstr("# F1 on actor 1\n"), HasSubstr("# B1 on actor 1\n")));           // show ir 1
  EXPECT_THAT(out, HasSubstr("actor 1: F1.0 B1.0 F1.1 B1.1"));                                      // show schedule
  EXPECT_THAT(out, AllOf(HasSubstr("stage 1 -> actor 1"), HasSubstr("actor 1 holds ")));           // show placement
  EXPECT_THAT(out, AllOf(HasSubstr("makespan "), HasSubstr("bubble ")));                           // sim, draw
  EXPECT_THAT(out, AllOf(HasSubstr("step 1: loss"), HasSubstr("step 2: loss"), HasSubstr("step 3: loss")));
  EXPECT_THAT(out, HasSubstr("wrote 3 traced steps to " + dir + "/measured.json"));
  EXPECT_THAT(repl.err(), HasSubstr("error: 3 steps done, --steps is 3: use step N to go further"));
  EXPECT_THAT(ReadFile(dir + "/plan.svg"), HasSubstr("<svg"));
  // The measured trace and the simulated plan are the same Chrome/Perfetto
  // format: events per actor (pid) on named tracks.
  for (const char* file : {"/plan.json", "/measured.json"}) {
    const std::string json = ReadFile(dir + file);
    EXPECT_THAT(json, AllOf(HasSubstr(R"("traceEvents")"), HasSubstr(R"("ph":"X")"), HasSubstr(R"("pid":1,)")))
        << file;
  }
  // Measured peaks appear once a step ran.
  EXPECT_TRUE(std::regex_search(out, std::regex(R"(\n +1 +[0-9.]+ (B|KiB|MiB) +[0-9.]+ (B|KiB|MiB)\n)"))) << out;
  for (const char* file : {"/plan.svg", "/plan.json", "/measured.json"}) unlink((dir + file).c_str());
  rmdir(dir.c_str());
}

// The "step 2: mean loss ...; per microbatch: ..." line of `loss`.
std::string SecondStepLosses(const std::string& out) {
  std::smatch match;
  if (!std::regex_search(out, match, std::regex(R"(step 2: mean loss [^\n]*)"))) return "";
  return match[0];
}

TEST(Repl, ReplicasShowInWhereAndActorsAndStepLikeTheFusedRun) {
  const std::vector<std::string> dp = {"--model", "gpt", "--layers", "4", "--actors", "2", "--data-parallel", "2",
                                       "--microbatches", "4", "--schedule", "1f1b"};
  // Actor 3 is replica 1's stage 1; B1.3 is its last backward, which starts
  // its all-reduce with actor 1.
  Repl repl(dp, "show placement\nbreak 3 B1.3\nstep\nwhere\nactors\ncontinue\ndelete\nstep\nloss\n");
  Repl fused(dp, "step 2\nloss\n");
  ASSERT_EQ(ExitCode(repl), 0) << repl.err();
  ASSERT_EQ(ExitCode(fused), 0) << fused.err();
  const std::string out = repl.out();
  EXPECT_THAT(out, AllOf(HasSubstr("4 actors ("), HasSubstr(": 2 replicas of 2, gradients all-reduced)"),
                         HasSubstr("4 microbatches per replica")));
  EXPECT_THAT(out, AllOf(HasSubstr("stage 1 -> actors 1, 3 (one per replica; gradients all-reduced among them)"),
                         HasSubstr("actors 0, 2 each hold 26 parameters")));
  EXPECT_THAT(out, HasSubstr("step 1 paused: actor 3 (replica 1) before B1.3 (breakpoint 1)"));
  // Replica 0's stage 1 holds before its B1.3 until replica 1's can run it too.
  EXPECT_THAT(out, AllOf(HasSubstr("actor 1 (replica 0)  task 8/9  before B1.3, waiting for actor 3 (replica 1)'s "
                                   "B1.3"),
                         HasSubstr("actor 3 (replica 1)  task 8/9  paused before B1.3 (breakpoint 1); waited for by "
                                   "actor 1 (replica 0) (for B1.3)")));
  EXPECT_THAT(out, AllOf(HasSubstr("actor  replica  process"), HasSubstr("\n    3        1  pid ")));
  EXPECT_THAT(out, HasSubstr("paused before B1.3"));
  // Stepped task by task around a pause, the second step's losses are the
  // fused run's (they depend on the first step's all-reduced update).
  const std::string losses = SecondStepLosses(out);
  ASSERT_FALSE(losses.empty()) << out;
  EXPECT_EQ(losses, SecondStepLosses(fused.out()));
}

TEST(Repl, EveryCommandHasHelpAndUsageErrorsDoNotEndTheSession) {
  Repl repl({"--model", "mlp", "--actors", "2"},
            "help\nhelp inspect\nshow\ninspect 0\nstep 0\ncontinue\nset microbatches 8\nshow memory\nstep\nloss\n");
  ASSERT_EQ(ExitCode(repl), 0) << repl.err();
  const std::string out = repl.out();
  for (const char* command : {"help", "show", "sim", "draw", "step", "run", "loss", "break", "delete", "continue",
                              "where", "inspect", "trace", "set", "actors", "quit"}) {
    EXPECT_THAT(out, HasSubstr(absl::StrCat("\n  ", command))) << command << " is missing from help";
  }
  EXPECT_THAT(out, HasSubstr("inspect ACTOR VALUE [MB]\n  a live buffer"));
  EXPECT_THAT(repl.err(), AllOf(HasSubstr("error: usage: show model|ir [STAGE]"),
                                HasSubstr("error: usage: inspect ACTOR VALUE [MB]"),
                                HasSubstr("error: step takes a positive count, not '0'"),
                                HasSubstr("error: no step is paused")));
  EXPECT_THAT(out, AllOf(HasSubstr("recompiled: schedule 1f1b, 8 microbatches, 2 actors"), HasSubstr("step 1: loss"),
                         HasSubstr("per microbatch: ")));
}

}  // namespace
}  // namespace tandem::cli
