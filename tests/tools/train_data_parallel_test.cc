// `tandem train --data-parallel D` as a user runs it: D replicas of a
// 2-actor pipeline, verified bit for bit against the reference's two-level
// step on every launcher and data plane, with the schedules that differ in
// where a stage's last backward falls (gpipe, 1f1b, zero-bubble's split W,
// interleaved stages). A killed replica ends the job naming it.
#include <signal.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/tools/cli_process.h"

namespace tandem::cli {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

struct Case {
  std::string launcher;   // threads, or local over `transport`
  std::string transport;
  std::string schedule;
  std::string device = "cpu";  // fake-cuda/N: the gradients are reduced on the (emulated) devices
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.launcher << " " << c.transport << " " << c.schedule << " " << c.device;
}

class DataParallelTrain : public ::testing::TestWithParam<Case> {};

TEST_P(DataParallelTrain, IsBitIdenticalToTheTwoLevelReference) {
  const Case& c = GetParam();
  std::vector<std::string> args = {"--model", "gpt", "--layers", "4", "--actors", "2", "--data-parallel", "2",
                                   "--schedule", c.schedule, "--microbatches", "4", "--steps", "3", "--verify",
                                   "--eval-batches", "0", "--launcher", c.launcher};
  if (c.launcher == "local") args.insert(args.end(), {"--transport", c.transport});
  if (c.schedule == "interleaved") args.insert(args.end(), {"--virtual", "2"});
  if (c.device != "cpu") args.insert(args.end(), {"--device", c.device});
  std::string out, err;
  ASSERT_EQ(RunTrain(args, out, err), 0) << out << err;
  EXPECT_THAT(out, HasSubstr("4 actors"));
  EXPECT_THAT(out, HasSubstr("8 microbatches (4 on each of 2 replicas)"));
  EXPECT_THAT(out, HasSubstr("bit-identical to the reference"));
}

std::vector<Case> AllCases() {
  std::vector<Case> cases;
  for (const char* schedule : {"gpipe", "1f1b", "zb-h1", "interleaved"}) {
    cases.push_back({"threads", "", schedule});
    cases.push_back({"local", "shm", schedule});
    cases.push_back({"local", "tcp", schedule});
  }
  // Device-resident replicas reduce on their devices: over the fake NCCL
  // (four emulated GPUs: every member its own) and over CUDA IPC (one).
  cases.push_back({"local", "shm", "1f1b", "fake-cuda/4"});
  cases.push_back({"local", "shm", "zb-h1", "fake-cuda"});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(LaunchersAndSchedules, DataParallelTrain, ::testing::ValuesIn(AllCases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           std::string name = absl::StrCat(info.param.launcher, info.param.transport, "_",
                                                           info.param.schedule);
                           if (info.param.device != "cpu") absl::StrAppend(&name, "_", info.param.device);
                           for (char& c : name) {
                             if (c == '-' || c == '/') c = '_';
                           }
                           return name;
                         });

TEST(DataParallelTrain, ThreeReplicasWithATiedEmbeddingAreBitIdentical) {
  std::string out, err;
  ASSERT_EQ(RunTrain({"--model", "gpt", "--layers", "4", "--actors", "2", "--data-parallel", "3", "--tied",
                      "--schedule", "1f1b", "--microbatches", "4", "--steps", "3", "--verify", "--eval-batches", "0"},
                     out, err),
            0)
      << out << err;
  EXPECT_THAT(out, AllOf(HasSubstr("6 actors"), HasSubstr("12 microbatches (4 on each of 3 replicas)"),
                         HasSubstr("bit-identical to the reference")));
}

TEST(DataParallelTrain, TraceShowsAStagesReductionRunningBeforeTheDrainEnds) {
  // Interleaved on 2 actors: actor 0 holds stages 0 and 2. Stage 2's last
  // backward comes several backward tasks before stage 0's, and its
  // reduction runs on its own track meanwhile.
  const std::string path =
      (std::filesystem::temp_directory_path() / absl::StrCat("tandem_dp_trace_", getpid(), ".json")).string();
  std::string out, err;
  ASSERT_EQ(RunTrain({"--model", "gpt", "--layers", "4", "--actors", "2", "--data-parallel", "2", "--schedule",
                      "interleaved", "--virtual", "2", "--microbatches", "4", "--steps", "2", "--eval-batches", "0",
                      "--launcher", "threads", "--trace", path},
                     out, err),
            0)
      << out << err;
  const std::string text = ReadFile(path);
  std::remove(path.c_str());
  const nlohmann::json trace = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(trace.is_discarded()) << text.substr(0, 200);
  std::map<std::pair<int, std::string>, double> reduce_start;  // (actor, slice name) -> start
  std::map<int, double> backward_end;
  std::map<int, int> reduce_tracks;
  for (const nlohmann::json& event : trace["traceEvents"]) {
    if (event.value("ph", "") == "M" && event.value("name", "") == "thread_name" &&
        event["args"].value("name", "") == "reduce") {
      ++reduce_tracks[event["pid"].get<int>()];
    }
    if (event.value("ph", "") != "X" || event["args"].value("step", 0.0) != 1.0) continue;
    const int pid = event["pid"].get<int>();
    const double start = event["ts"].get<double>();
    if (event.value("cat", "") == "reduce") {
      reduce_start[{pid, event.value("name", "")}] = start;
    } else if (event.value("cat", "") == "B") {
      backward_end[pid] = std::max(backward_end[pid], start + event["dur"].get<double>());
    }
  }
  EXPECT_EQ(reduce_tracks.size(), 4u) << "each actor's reductions have a track of their own";
  // The bubble table compares every actor with its position in the simulated replica.
  EXPECT_THAT(out, HasSubstr("actor  measured bubble  simulated bubble"));
  for (const char* row : {"\n    0  ", "\n    3  "}) EXPECT_THAT(out, HasSubstr(row));
  EXPECT_EQ(reduce_start.size(), 8u) << "every actor reduces its two stages once per step";
  for (int actor : {0, 2}) {
    ASSERT_TRUE(reduce_start.count({actor, "all-reduce stage 2"})) << "actor " << actor;
    EXPECT_LT((reduce_start[{actor, "all-reduce stage 2"}]), backward_end[actor]) << "actor " << actor;
  }
}

// A data-parallel run checkpointed after step 3 and resumed (on actor
// threads) ends with the bits of an uninterrupted run: every replica's
// file, so the replicas also still agree.
TEST(DataParallelTrain, ResumedFromACheckpointIsBitIdenticalToAnUninterruptedRun) {
  char dir_template[] = "/tmp/tandem-dp-checkpoint-XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template;
  auto args = [](int steps, std::vector<std::string> extra) {
    std::vector<std::string> args = {"--model", "gpt", "--layers", "4", "--actors", "2", "--data-parallel", "2",
                                     "--microbatches", "2", "--steps", absl::StrCat(steps), "--eval-batches", "0"};
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  std::string out, err;
  ASSERT_EQ(RunTrain(args(6, {"--checkpoint-dir", dir + "/straight"}), out, err), 0) << err;
  ASSERT_EQ(RunTrain(args(3, {"--checkpoint-dir", dir + "/split"}), out, err), 0) << err;
  ASSERT_EQ(RunTrain(args(6, {"--resume", dir + "/split", "--launcher", "threads"}), out, err), 0) << err;
  EXPECT_THAT(out, HasSubstr("done: 3 steps (4 to 6)"));
  for (int actor = 0; actor < 4; ++actor) {
    const std::string name = absl::StrCat("/step-00000006/actor-", actor, ".state");
    const std::string expected = ReadFile(dir + "/straight" + name);
    ASSERT_FALSE(expected.empty()) << name;
    EXPECT_TRUE(ReadFile(dir + "/split" + name) == expected) << name << " differs from the uninterrupted run's";
  }
  std::filesystem::remove_all(dir);
}

TEST(DataParallelTrain, ReplicasOutOfRangeAreAUsageError) {
  std::string out, err;
  EXPECT_EQ(RunTrain({"--data-parallel", "0", "--steps", "1"}, out, err), 2);
  EXPECT_THAT(err, HasSubstr("--data-parallel"));
  EXPECT_EQ(RunTrain({"--data-parallel", "5000", "--steps", "1"}, out, err), 1);
  EXPECT_THAT(err, HasSubstr("data-parallel replicas 5000 is outside [1, 4096]"));
}

TEST(DataParallelTrain, AKilledReplicaEndsTheJobNamingItWithinSeconds) {
  CliProcess train({"train", "--model", "gpt", "--actors", "2", "--data-parallel", "2", "--schedule", "1f1b",
                    "--microbatches", "4", "--steps", "100000", "--eval-batches", "0"});
  std::vector<pid_t> actors;
  CliProcess::Within(absl::Seconds(60), [&] {
    actors = ChildrenOf(train.pid());
    return actors.size() == 4 && train.out().find("/100000  loss") != std::string::npos;
  });
  ASSERT_EQ(actors.size(), 4u) << train.err();
  pid_t victim = -1;  // actor 3: replica 1's stage 1
  for (pid_t pid : actors) {
    std::string cmdline = ReadFile(absl::StrCat("/proc/", pid, "/cmdline"));
    if (cmdline.find(std::string("--actor\0003\0", 10)) != std::string::npos) victim = pid;
  }
  ASSERT_GT(victim, 0);
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  const absl::Time killed_at = absl::Now();
  std::optional<int> status = train.Wait(absl::Seconds(10));
  ASSERT_TRUE(status.has_value()) << "the controller did not exit within 10 s of the kill";
  EXPECT_LT(absl::Now() - killed_at, absl::Seconds(10));
  ASSERT_TRUE(WIFEXITED(*status));
  EXPECT_NE(WEXITSTATUS(*status), 0);
  EXPECT_THAT(train.err(), AllOf(HasSubstr("actor 3 (replica 1, stage 1) died during step "),
                                 HasSubstr("killed by signal 9")));
  for (pid_t pid : actors) EXPECT_TRUE(Gone(pid)) << "actor pid " << pid << " survived";
}

}  // namespace
}  // namespace tandem::cli
