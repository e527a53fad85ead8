// `tandem train` as a user runs it: a controller process with its actor
// processes. A killed actor ends the job with a clear error and no process
// left behind; a killed controller takes its actors with it. Every wait is
// bounded; every process started here is killed and reaped on every path.
#include <signal.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/tools/cli_process.h"

namespace tandem::cli {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// `tandem train ...`.
class TrainProcess : public CliProcess {
 public:
  explicit TrainProcess(std::vector<std::string> args, const std::vector<std::string>& environment = {})
      : CliProcess(WithSubcommand(std::move(args)), environment) {}

  // The actor processes, once `count` of them run and a step of kLongRun is
  // logged (within 60 s); empty otherwise.
  std::vector<pid_t> AwaitTraining(size_t count) {
    std::vector<pid_t> actors;
    Within(absl::Seconds(60), [&] {
      actors = ChildrenOf(pid());
      return actors.size() == count && out().find("/100000  loss") != std::string::npos;
    });
    if (actors.size() != count) actors.clear();
    return actors;
  }

 private:
  static std::vector<std::string> WithSubcommand(std::vector<std::string> args) {
    args.insert(args.begin(), "train");
    return args;
  }
};

// Long enough that the kill lands mid-run: a GPT step takes tens of ms.
const std::vector<std::string> kLongRun = {"--model", "gpt", "--actors", "2", "--schedule", "1f1b",
                                           "--microbatches", "4", "--steps", "100000", "--eval-batches", "0"};

TEST(TrainProcess, KilledActorEndsTheJobWithUnavailableAndNoProcessLeft) {
  TrainProcess train(kLongRun);
  std::vector<pid_t> actors = train.AwaitTraining(2);
  ASSERT_EQ(actors.size(), 2u) << train.err();
  // Which pid is actor 1: its command line says --actor 1.
  pid_t victim = -1;
  for (pid_t pid : actors) {
    std::string cmdline = ReadFile(absl::StrCat("/proc/", pid, "/cmdline"));
    if (cmdline.find(std::string("--actor\0001\0", 10)) != std::string::npos) victim = pid;
  }
  ASSERT_GT(victim, 0);
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  const absl::Time killed_at = absl::Now();
  std::optional<int> status = train.Wait(absl::Seconds(5));
  ASSERT_TRUE(status.has_value()) << "the controller did not exit within 5 s of the kill";
  EXPECT_LT(absl::Now() - killed_at, absl::Seconds(5));
  ASSERT_TRUE(WIFEXITED(*status));
  EXPECT_NE(WEXITSTATUS(*status), 0);
  EXPECT_THAT(train.err(), AllOf(HasSubstr("UNAVAILABLE"), HasSubstr("actor 1 (stage 1) died during step "),
                                 HasSubstr("killed by signal 9")));
  for (pid_t pid : actors) EXPECT_TRUE(Gone(pid)) << "actor pid " << pid << " survived";
}

TEST(TrainProcess, KilledControllerTakesEveryActorWithinFiveSeconds) {
  TrainProcess train(kLongRun);
  std::vector<pid_t> actors = train.AwaitTraining(2);
  ASSERT_EQ(actors.size(), 2u) << train.err();
  ASSERT_EQ(kill(train.pid(), SIGKILL), 0);
  ASSERT_TRUE(train.Wait(absl::Seconds(5)).has_value());
  const bool all_gone = TrainProcess::Within(absl::Seconds(5), [&] {
    for (pid_t pid : actors) {
      if (!Gone(pid)) return false;
    }
    return true;
  });
  EXPECT_TRUE(all_gone) << "an actor outlived its controller by 5 s";
  for (pid_t pid : actors) {
    if (!Gone(pid)) kill(pid, SIGKILL);  // leave nothing behind, whatever happened
  }
}

TEST(TrainProcess, CtrlCShutsTheActorsDownAndExits130) {
  TrainProcess train(kLongRun);
  std::vector<pid_t> actors = train.AwaitTraining(2);
  ASSERT_EQ(actors.size(), 2u) << train.err();
  ASSERT_EQ(kill(train.pid(), SIGINT), 0);
  std::optional<int> status = train.Wait(absl::Seconds(5));
  ASSERT_TRUE(status.has_value()) << "no exit within 5 s of SIGINT";
  ASSERT_TRUE(WIFEXITED(*status)) << "died of a signal instead of unwinding";
  EXPECT_EQ(WEXITSTATUS(*status), 130);
  EXPECT_THAT(train.err(), HasSubstr("interrupted by Interrupt"));
  for (pid_t pid : actors) EXPECT_TRUE(Gone(pid)) << "actor pid " << pid << " survived";
}

// Counts the step lines a run printed so far.
size_t StepLines(const std::string& out) {
  size_t lines = 0;
  for (size_t at = out.find("  loss"); at != std::string::npos; at = out.find("  loss", at + 1)) ++lines;
  return lines;
}

TEST(TrainProcess, ControllerStoppedBrieflyGoesOnWithoutBlamingAnActor) {
  // Longer than an actor may stay silent (3 s), shorter than the actors'
  // patience with a silent controller (60 s by default): on SIGCONT the run
  // goes on, since the actors' silence was the controller's own.
  TrainProcess train(kLongRun);
  std::vector<pid_t> actors = train.AwaitTraining(2);
  ASSERT_EQ(actors.size(), 2u) << train.err();
  ASSERT_EQ(kill(train.pid(), SIGSTOP), 0);
  absl::SleepFor(absl::Seconds(5));
  const size_t before = StepLines(train.out());
  ASSERT_EQ(kill(train.pid(), SIGCONT), 0);
  EXPECT_TRUE(TrainProcess::Within(absl::Seconds(20), [&] { return StepLines(train.out()) > before + 2; }))
      << "no step after the controller continued: " << train.err();
  ASSERT_EQ(kill(train.pid(), SIGINT), 0);
  std::optional<int> status = train.Wait(absl::Seconds(10));
  ASSERT_TRUE(status.has_value()) << "no exit within 10 s of SIGINT";
  ASSERT_TRUE(WIFEXITED(*status));
  EXPECT_EQ(WEXITSTATUS(*status), 130) << train.err();
  EXPECT_THAT(train.err(), ::testing::Not(HasSubstr("stopped answering")));
  for (pid_t pid : actors) EXPECT_TRUE(Gone(pid)) << "actor pid " << pid << " survived";
}

TEST(TrainProcess, ControllerStoppedPastItsActorsPatienceEndsTheJobNamingTheController) {
  // The actors give a silent controller 2 s, then exit; the controller,
  // continued, reports them gone and says that it was the one stopped. It
  // exits within seconds: nothing it waits on holds the board's lock.
  std::vector<std::string> args = kLongRun;
  args.insert(args.end(), {"--controller-timeout", "2"});
  TrainProcess train(args);
  std::vector<pid_t> actors = train.AwaitTraining(2);
  ASSERT_EQ(actors.size(), 2u) << train.err();
  ASSERT_EQ(kill(train.pid(), SIGSTOP), 0);
  const bool actors_left = TrainProcess::Within(absl::Seconds(30), [&] {
    for (pid_t pid : actors) {
      if (!Gone(pid)) return false;
    }
    return true;
  });
  absl::SleepFor(absl::Seconds(1));
  ASSERT_EQ(kill(train.pid(), SIGCONT), 0);
  EXPECT_TRUE(actors_left) << "the actors waited on a stopped controller for 30 s";
  std::optional<int> status = train.Wait(absl::Seconds(20));
  ASSERT_TRUE(status.has_value()) << "the controller hung after SIGCONT: " << train.err();
  ASSERT_TRUE(WIFEXITED(*status));
  EXPECT_NE(WEXITSTATUS(*status), 0) << train.err();
  EXPECT_THAT(train.err(), AllOf(HasSubstr("the controller has sent nothing, not even a heartbeat, for 2s"),
                                 HasSubstr("the controller itself did not run for")));
  for (pid_t pid : actors) EXPECT_TRUE(Gone(pid)) << "actor pid " << pid << " survived";
}

TEST(TrainProcess, BadTransportIsAUsageError) {
  TrainProcess train({"--transport", "carrier-pigeon", "--steps", "1"});
  std::optional<int> status = train.Wait(absl::Seconds(30));
  ASSERT_TRUE(status.has_value());
  ASSERT_TRUE(WIFEXITED(*status));
  EXPECT_EQ(WEXITSTATUS(*status), 2);
  EXPECT_THAT(train.err(), HasSubstr("--transport: carrier-pigeon not in {shm,tcp,auto}"));
}

// Issue 16's acceptance run on the emulated GPU, at the smallest size: the
// run is bit-identical, every pair goes by CUDA IPC, and each actor's device
// peak is its static peak.
TEST(TrainProcess, FakeCudaVerifiesBitIdenticalOverIpcWithTheDevicePeakAtTheStaticPeak) {
  TrainProcess train({"--device", "fake-cuda", "--model", "gpt", "--layers", "4", "--actors", "2", "--schedule",
                      "zb-h1", "--microbatches", "8", "--steps", "3", "--verify"});
  std::optional<int> status = train.Wait(absl::Seconds(60));
  ASSERT_TRUE(status.has_value());
  ASSERT_TRUE(WIFEXITED(*status));
  ASSERT_EQ(WEXITSTATUS(*status), 0) << train.err();
  EXPECT_THAT(train.out(), AllOf(HasSubstr("fake-cuda"), HasSubstr("data plane: 0-1 ipc\n"),
                                 HasSubstr("bit-identical to the reference"), HasSubstr("device peak bytes")));
  // Each actor's row: actor, bytes sent, static peak, measured peak, device peak.
  int rows = 0;
  std::istringstream lines(train.out());
  for (std::string line; std::getline(lines, line);) {
    std::istringstream fields(line);
    int64_t actor, sent, static_peak, measured, device;
    if (!(fields >> actor >> sent >> static_peak >> measured >> device)) continue;
    ++rows;
    EXPECT_EQ(device, static_peak) << line;
    EXPECT_EQ(measured, static_peak) << line;
  }
  EXPECT_EQ(rows, 2) << train.out();
}

// Two emulated GPUs: the pair goes device to device through the (fake) NCCL
// and the run is still bit-identical to the reference.
TEST(TrainProcess, FakeCudaOnTwoEmulatedGpusVerifiesBitIdenticalOverNccl) {
  TrainProcess train({"--device", "fake-cuda/2", "--model", "gpt", "--layers", "4", "--actors", "2", "--schedule",
                      "1f1b", "--microbatches", "8", "--steps", "3", "--verify"});
  std::optional<int> status = train.Wait(absl::Seconds(60));
  ASSERT_TRUE(status.has_value());
  ASSERT_TRUE(WIFEXITED(*status));
  ASSERT_EQ(WEXITSTATUS(*status), 0) << train.err();
  EXPECT_THAT(train.out(), AllOf(HasSubstr("fake-cuda/2"), HasSubstr("data plane: 0-1 nccl\n"),
                                 HasSubstr("bit-identical to the reference")));
}

// A device that says how much memory it has free (a GPU; here the emulated
// one told it has 1000 bytes) refuses a program whose static peak needs
// more, before any state is loaded, naming the actor and the bytes.
TEST(TrainProcess, AProgramTooLargeForItsDeviceIsRefusedBeforeItsStateLoads) {
  TrainProcess train({"--device", "fake-cuda", "--model", "gpt", "--layers", "2", "--actors", "2", "--steps", "1"},
                     {"TANDEM_FAULT=fake-cuda-free:1:1000"});
  std::optional<int> status = train.Wait(absl::Seconds(60));
  ASSERT_TRUE(status.has_value());
  ASSERT_TRUE(WIFEXITED(*status));
  EXPECT_EQ(WEXITSTATUS(*status), 1) << train.err();
  EXPECT_THAT(train.err(), AllOf(HasSubstr("RESOURCE_EXHAUSTED"),
                                 HasSubstr("actor 1 does not fit its device: its program needs "),
                                 HasSubstr("and fake-cuda has 1000 B free"), HasSubstr("--memory-cap 1000")));
}

// Checkpoints. A small GPT on 2 actors; each run is a few seconds.
class TrainCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir_template[] = "/tmp/tandem-checkpoint-test-XXXXXX";
    ASSERT_NE(mkdtemp(dir_template), nullptr);
    dir_ = dir_template;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // `tandem train` of the small GPT for `steps` in all, plus `extra`.
  static std::vector<std::string> Args(int steps, std::vector<std::string> extra) {
    std::vector<std::string> args = {"--model", "gpt", "--actors", "2", "--microbatches", "4",
                                     "--steps", absl::StrCat(steps), "--eval-batches", "0"};
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  }
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }

  std::string dir_;
};

// The state files of a checkpoint, by name, with their bytes.
TEST_F(TrainCheckpoint, ResumedRunIsBitIdenticalToAnUninterruptedOne) {
  TrainProcess straight(Args(6, {"--checkpoint-dir", Path("straight")}));
  ASSERT_EQ(ExitCode(straight), 0) << straight.err();
  TrainProcess first(Args(3, {"--checkpoint-dir", Path("split")}));
  ASSERT_EQ(ExitCode(first), 0) << first.err();
  // The second half runs under another schedule and on actor threads (whose
  // launcher writes the files from the controller): a checkpoint holds
  // tensors, not a schedule's or a launcher's layout.
  TrainProcess second(Args(6, {"--resume", Path("split"), "--schedule", "gpipe", "--launcher", "threads"}));
  ASSERT_EQ(ExitCode(second), 0) << second.err();
  EXPECT_THAT(second.out(), AllOf(HasSubstr("resuming from " + Path("split/step-00000003") + " (after step 3"),
                                  HasSubstr("done: 3 steps (4 to 6)")));

  std::map<std::string, std::string> expected = StateFiles(Path("straight/step-00000006"));
  std::map<std::string, std::string> resumed = StateFiles(Path("split/step-00000006"));
  ASSERT_EQ(expected.size(), 2u);
  ASSERT_EQ(resumed.size(), expected.size());
  for (const auto& [name, bytes] : expected) {
    EXPECT_TRUE(resumed[name] == bytes) << name << " differs from the uninterrupted run's";
  }
}

TEST_F(TrainCheckpoint, ControllerKilledDuringACheckpointWriteLeavesThePreviousOneLoadable) {
  TrainProcess first(Args(3, {"--checkpoint-dir", Path("ck")}));
  ASSERT_EQ(ExitCode(first), 0) << first.err();
  // Dies after the actors wrote their files for step 6, before the manifest.
  TrainProcess crashed(Args(6, {"--resume", Path("ck")}), {"TANDEM_FAULT=checkpoint-before-manifest"});
  std::optional<int> status = crashed.Wait(absl::Seconds(120));
  ASSERT_TRUE(status.has_value());
  ASSERT_TRUE(WIFSIGNALED(*status)) << crashed.err();
  EXPECT_EQ(WTERMSIG(*status), SIGKILL);
  EXPECT_TRUE(std::filesystem::exists(Path("ck/.step-00000006.partial/actor-0.state")));
  EXPECT_FALSE(std::filesystem::exists(Path("ck/step-00000006")));

  TrainProcess resumed(Args(6, {"--resume", Path("ck")}));
  ASSERT_EQ(ExitCode(resumed), 0) << resumed.err();
  EXPECT_THAT(resumed.out(), HasSubstr("resuming from " + Path("ck/step-00000003")));
  EXPECT_TRUE(std::filesystem::exists(Path("ck/step-00000006/MANIFEST")));
  EXPECT_FALSE(std::filesystem::exists(Path("ck/.step-00000006.partial")));
}

TEST_F(TrainCheckpoint, CorruptOrMismatchedCheckpointIsRefused) {
  TrainProcess first(Args(2, {"--checkpoint-dir", Path("ck")}));
  ASSERT_EQ(ExitCode(first), 0) << first.err();

  // Another model, other shapes.
  TrainProcess mlp({"--model", "mlp", "--actors", "2", "--steps", "4", "--resume", Path("ck")});
  EXPECT_EQ(ExitCode(mlp), 1);
  EXPECT_THAT(mlp.err(), AllOf(HasSubstr("FAILED_PRECONDITION"), HasSubstr("does not fit this job"),
                               HasSubstr("it is of model 'gpt', this job's model is 'mlp'")));
  TrainProcess wider(Args(4, {"--dim", "96", "--resume", Path("ck")}));
  EXPECT_EQ(ExitCode(wider), 1);
  EXPECT_THAT(wider.err(), AllOf(HasSubstr("does not fit this job: state '"), HasSubstr(" there and "),
                                 HasSubstr(" in this job")));

  // One flipped byte in an actor's file.
  const std::string victim = Path("ck/step-00000002/actor-1.state");
  std::string bytes = ReadFile(victim);
  ASSERT_GT(bytes.size(), 1000u);
  bytes[bytes.size() / 2] ^= 0x01;
  std::ofstream(victim, std::ios::binary | std::ios::trunc) << bytes;
  TrainProcess corrupt(Args(4, {"--resume", Path("ck")}));
  EXPECT_EQ(ExitCode(corrupt), 1);
  EXPECT_THAT(corrupt.err(), AllOf(HasSubstr("DATA_LOSS"), HasSubstr("actor-1.state has CRC-32 "),
                                   HasSubstr("(the checkpoint is corrupt)")));

  // Starting afresh over existing checkpoints would mix two runs.
  TrainProcess again(Args(2, {"--checkpoint-dir", Path("ck")}));
  EXPECT_EQ(ExitCode(again), 2);
  EXPECT_THAT(again.err(), HasSubstr("holds checkpoints already"));
}

// --max-restarts: an actor killed (once) mid-run; the run goes on from its
// last checkpoint and ends with the uninterrupted run's checkpoint, byte
// for byte. The checkpoints are waited for (--checkpoint-wait), so the one
// after step 3 is whole when step 5 fails however slow the machine (one
// written behind the steps may still be in flight then, and the restart
// rightly goes back further: the test after this one covers that).
TEST_F(TrainCheckpoint, AKilledActorIsRestartedAndTheRunEndsAsIfNothingHappened) {
  TrainProcess straight(Args(8, {"--checkpoint-dir", Path("straight"), "--checkpoint-every", "3"}));
  ASSERT_EQ(ExitCode(straight), 0) << straight.err();
  TrainProcess restarted(Args(8, {"--checkpoint-dir", Path("restarted"), "--checkpoint-every", "3",
                                  "--checkpoint-wait", "--max-restarts", "2", "--log-every", "100"}),
                         {absl::StrCat("TANDEM_FAULT=actor-crash-once:1:5:", Path("struck"))});
  ASSERT_EQ(ExitCode(restarted), 0) << restarted.err();
  EXPECT_THAT(restarted.out(),
              AllOf(HasSubstr("restart 1 of 2 during step 5: actor 1 (stage 1) died during step 5"),
                    HasSubstr("from " + Path("restarted/step-00000003") + " (after step 3), 1 step redone"),
                    HasSubstr("done: 8 steps"), HasSubstr("restarts: 1 of 2 (1 step redone, ")));
  for (const char* checkpoint : {"step-00000006", "step-00000008"}) {
    std::map<std::string, std::string> expected = StateFiles(Path("straight/") + checkpoint);
    std::map<std::string, std::string> got = StateFiles(Path("restarted/") + checkpoint);
    ASSERT_EQ(expected.size(), 2u);
    ASSERT_EQ(got.size(), expected.size());
    for (const auto& [name, bytes] : expected) {
      EXPECT_TRUE(got[name] == bytes) << checkpoint << "/" << name << " differs from the uninterrupted run's";
    }
  }
}

// Checkpoints written behind the steps hold the same bytes as checkpoints
// the steps waited for; a fault while one is being written leaves the one
// before as the restart point, and the redo writes it again.
TEST_F(TrainCheckpoint, CheckpointsBehindTheStepsAreTheWaitedOnesAndSurviveAFaultWhileWritten) {
  TrainProcess waited(Args(8, {"--checkpoint-dir", Path("waited"), "--checkpoint-every", "3", "--checkpoint-wait"}));
  ASSERT_EQ(ExitCode(waited), 0) << waited.err();
  // Actor 0 dies as step 4 begins: the checkpoint after step 3 was begun
  // and not yet put in place.
  TrainProcess behind(Args(8, {"--checkpoint-dir", Path("behind"), "--checkpoint-every", "3", "--max-restarts", "1",
                               "--log-every", "100"}),
                      {absl::StrCat("TANDEM_FAULT=actor-crash-once:0:4:", Path("struck"))});
  ASSERT_EQ(ExitCode(behind), 0) << behind.err();
  EXPECT_THAT(behind.out(), AllOf(HasSubstr("saving the checkpoint after step 3 behind the steps"),
                                  HasSubstr("restart 1 of 1 during step 4: actor 0 (stage 0) died"),
                                  HasSubstr("from the state the session started from (after step 0), 3 steps redone"),
                                  HasSubstr("saved " + Path("behind/step-00000006") + " (written behind the steps)")));
  for (const char* checkpoint : {"step-00000003", "step-00000006", "step-00000008"}) {
    std::map<std::string, std::string> expected = StateFiles(Path("waited/") + checkpoint);
    std::map<std::string, std::string> got = StateFiles(Path("behind/") + checkpoint);
    ASSERT_EQ(expected.size(), 2u) << checkpoint;
    ASSERT_EQ(got.size(), expected.size()) << checkpoint;
    for (const auto& [name, bytes] : expected) {
      EXPECT_TRUE(got[name] == bytes) << checkpoint << "/" << name << " differs from the waited-for checkpoint's";
    }
  }
}

// --eval-batches and --eval-every evaluate through a forward-only pipeline
// of their own, the reference's losses bit for bit, and leave nothing in
// TMPDIR.
TEST_F(TrainCheckpoint, TheValidationLossRunsThroughAPipelineWithTheReferenceBits) {
  std::filesystem::create_directory(Path("tmp"));
  TrainProcess train({"--model", "gpt", "--actors", "2", "--microbatches", "4", "--steps", "4", "--eval-every", "2",
                      "--eval-batches", "2", "--verify", "--log-every", "100"},
                     {"TMPDIR=" + Path("tmp")});
  ASSERT_EQ(ExitCode(train), 0) << train.err();
  EXPECT_THAT(train.out(), AllOf(::testing::ContainsRegex("step +2/4 .* validation loss [0-9.]+"),
                                 HasSubstr("verify: validation losses of 8 microbatches bit-identical to the reference"),
                                 ::testing::ContainsRegex("done: 4 steps, final train loss [0-9.]+, validation loss")));
  EXPECT_TRUE(std::filesystem::is_empty(Path("tmp"))) << "the evaluation's scratch files were left behind";
}

// A fault that strikes every time the actors start again ends the run with
// its error once the restarts are spent, not in a loop.
TEST(TrainProcess, AFaultThatRepeatsEndsTheRunWhenItsRestartsAreSpent) {
  TrainProcess train({"--device", "fake-cuda", "--model", "mlp", "--actors", "2", "--steps", "4", "--max-restarts",
                      "2", "--eval-batches", "0"},
                     {"TANDEM_FAULT=fake-cuda-die:1:3"});
  EXPECT_EQ(ExitCode(train), 1) << train.err();
  EXPECT_THAT(train.out(), AllOf(HasSubstr("restart 1 of 2 during step 1: actor 1 (stage 1) died"),
                                 HasSubstr("restart 2 of 2 during step 1: actor 1 (stage 1) died")));
  EXPECT_THAT(train.err(), AllOf(HasSubstr("UNAVAILABLE: step 1: actor 1 (stage 1) died during step 1"),
                                 HasSubstr("(no restart left: 2 of 2 made)")));
}

}  // namespace
}  // namespace tandem::cli
