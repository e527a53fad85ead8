// `tandem train --schedule pipedream|2bw` as a user runs it: bit-identical
// to the reference with the same weight-version semantics on actor threads
// and processes, the static peak (stashed versions included) equal to the
// measured one on every actor; --update-every that does not fit is a usage
// error that says why.
#include <ostream>
#include <regex>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/temporary_directory.h"
#include "tests/tools/cli_process.h"

namespace tandem::cli {
namespace {

using ::testing::HasSubstr;

struct Case {
  std::string schedule;
  std::string launcher;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.schedule << " on " << c.launcher; }

class TrainAsync : public ::testing::TestWithParam<Case> {};

TEST_P(TrainAsync, IsBitIdenticalToTheReferenceAndItsStaticPeakIsMeasured) {
  std::string out, err;
  const int code = RunTrain({"--model", "gpt", "--layers", "4", "--actors", "2", "--schedule", GetParam().schedule,
                             "--microbatches", "8", "--update-every", GetParam().schedule == "2bw" ? "4" : "1",
                             "--steps", "3", "--verify", "--eval-batches", "0", "--launcher", GetParam().launcher},
                            out, err);
  ASSERT_EQ(code, 0) << out << err;
  EXPECT_THAT(out, HasSubstr("verify: losses of 3 steps and all"));
  // "actor  bytes sent/step  static peak bytes  measured peak bytes"
  const std::regex row(R"(\n +([0-9]+) +[0-9]+ +([0-9]+) +([0-9]+)(?=\n))");
  int actors = 0;
  for (std::sregex_iterator it(out.begin(), out.end(), row), end; it != end; ++it, ++actors) {
    EXPECT_EQ((*it)[2].str(), (*it)[3].str()) << "actor " << (*it)[1].str() << "\n" << out;
  }
  EXPECT_EQ(actors, 2) << out;
}

INSTANTIATE_TEST_SUITE_P(SchedulesLaunchers, TrainAsync,
                         ::testing::Values(Case{"pipedream", "threads"}, Case{"pipedream", "local"},
                                           Case{"2bw", "threads"}, Case{"2bw", "local"}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return (info.param.schedule == "2bw" ? "twobw_" : "pipedream_") + info.param.launcher;
                         });

// --launcher reference trains what the pipeline trains: the same stages and
// the same weight versions, not a synchronous step under an asynchronous
// schedule's name.
TEST(TrainAsyncReference, TheReferenceLauncherKeepsTheScheduleWeightVersions) {
  test::TemporaryDirectory dir("tandem-async-losses");
  const auto losses_of = [&](const std::string& schedule, const std::string& launcher) {
    const std::string path = dir.Path(schedule + "-" + launcher);
    std::string out, err;
    const int code = RunTrain({"--model", "mlp", "--actors", "2", "--schedule", schedule, "--microbatches", "4",
                               "--steps", "4", "--eval-batches", "0", "--launcher", launcher, "--losses", path},
                              out, err);
    EXPECT_EQ(code, 0) << schedule << " on " << launcher << "\n" << out << err;
    return ReadFile(path);
  };
  const std::string reference = losses_of("2bw", "reference");
  ASSERT_THAT(reference, HasSubstr("\"losses\""));
  EXPECT_EQ(reference, losses_of("2bw", "threads"));
  EXPECT_NE(reference, losses_of("1f1b", "reference")) << "2bw ran without its stale weights";
}

TEST(TrainAsyncOptions, AnUpdateCadenceThatDoesNotFitIsAUsageError) {
  const struct {
    std::vector<std::string> args;
    std::string message;
  } cases[] = {
      {{"--schedule", "1f1b", "--microbatches", "4", "--update-every", "2"},
       "--update-every applies to --schedule 2bw, not '1f1b'"},
      {{"--schedule", "pipedream", "--microbatches", "4", "--update-every", "2"},
       "pipedream updates after every microbatch"},
      {{"--schedule", "2bw", "--microbatches", "4", "--update-every", "3"},
       "2bw updates every 3 microbatches, which must divide --microbatches 4"},
      {{"--schedule", "2bw", "--microbatches", "3"}, "(the stage count, by default)"},
  };
  for (const auto& c : cases) {
    for (const std::string launcher : {"local", "reference"}) {
      std::vector<std::string> args = {"--model", "mlp", "--actors", "2", "--steps", "1", "--launcher", launcher};
      args.insert(args.end(), c.args.begin(), c.args.end());
      std::string out, err;
      EXPECT_EQ(RunTrain(args, out, err), 2) << c.message << " on " << launcher << "\n" << out << err;
      EXPECT_THAT(err, HasSubstr(c.message)) << launcher;
    }
  }
}

}  // namespace
}  // namespace tandem::cli
