// `tandem train --control tcp`: the control plane on TCP as across hosts
// (actors dial the controller at a port the OS picked and answer its
// challenge), bit-identical to the reference with and without
// data-parallel replicas, over each data plane (shared-memory rings then
// travel as paths, which a TCP connection can carry); and the usage errors
// of the Slurm launch options.
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/tools/cli_process.h"

namespace tandem::cli {
namespace {

using ::testing::HasSubstr;

struct Case {
  std::string schedule;
  int replicas = 1;
  std::string transport = "tcp";
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.schedule << " x" << c.replicas << " " << c.transport; }

class TcpControlTrain : public ::testing::TestWithParam<Case> {};

TEST_P(TcpControlTrain, IsBitIdenticalToTheReference) {
  const Case& c = GetParam();
  CliProcess train({"train", "--control", "tcp", "--transport", c.transport, "--model", "gpt", "--layers", "4", "--actors",
                    "2", "--data-parallel", absl::StrCat(c.replicas), "--schedule", c.schedule, "--microbatches", "4",
                    "--steps", "3", "--verify", "--eval-batches", "0"});
  ASSERT_EQ(ExitCode(train, absl::Seconds(120)), 0) << train.out() << train.err();
  EXPECT_THAT(train.out(), HasSubstr(absl::StrCat("tcp control plane, ", c.transport, " data plane")));
  EXPECT_THAT(train.out(), HasSubstr(absl::StrCat(2 * c.replicas, " actors")));
  EXPECT_THAT(train.out(), HasSubstr("bit-identical to the reference"));
  EXPECT_THAT(train.out(), ::testing::Not(HasSubstr("security: refused")));
}

INSTANTIATE_TEST_SUITE_P(SchedulesAndReplicas, TcpControlTrain,
                         ::testing::Values(Case{"1f1b", 1}, Case{"zb-h1", 1}, Case{"1f1b", 2}, Case{"zb-h1", 2},
                                           Case{"1f1b", 2, "shm"}, Case{"zb-h1", 2, "auto"}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           std::string name = absl::StrCat(info.param.schedule, "_x", info.param.replicas, "_",
                                                           info.param.transport);
                           for (char& ch : name) {
                             if (ch == '-') ch = '_';
                           }
                           return name;
                         });

TEST(SlurmTrain, OutsideAnAllocationIsAnErrorNamingIt) {
  CliProcess train({"train", "--launcher", "slurm", "--bind", "127.0.0.1", "--steps", "1"});
  EXPECT_NE(ExitCode(train, absl::Seconds(60)), 0);
  EXPECT_THAT(train.err(), HasSubstr("--launcher slurm runs inside a Slurm allocation"));
  EXPECT_THAT(train.err(), HasSubstr("SLURM_JOB_ID is not set"));
}

TEST(SlurmTrain, SharedMemoryOrAUnixSocketIsAUsageErrorSayingWhy) {
  for (const std::vector<std::string>& plane :
       {std::vector<std::string>{"--transport", "shm"}, std::vector<std::string>{"--control", "unix"}}) {
    std::vector<std::string> args = {"train", "--launcher", "slurm", "--steps", "1"};
    args.insert(args.end(), plane.begin(), plane.end());
    CliProcess train(args);
    EXPECT_NE(ExitCode(train, absl::Seconds(60)), 0);
    EXPECT_THAT(train.err(), HasSubstr("--launcher slurm runs actors on other nodes: it needs --control tcp and --transport auto or tcp"));
  }
}

}  // namespace
}  // namespace tandem::cli
