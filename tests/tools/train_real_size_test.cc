// Issue 34's acceptance on the CPU: GPT-2 small's shapes train on 4 actor
// processes bit-identical to the reference, checkpoint and resume
// bit-identical to an uninterrupted run, with actors whose state exceeds
// 256 MiB, and a controller that holds a fraction of the model: the actors
// generate and read their state themselves, and what crosses the control
// plane moves in bounded pieces.
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/temporary_directory.h"
#include "tests/tools/cli_process.h"

namespace tandem::cli {
namespace {

using ::testing::HasSubstr;

// GPT-2 small's shapes (12 layers, d=768, 12 heads, vocab 50257, a tied
// head) at a CPU's sequence length, 1F1B over 4 actor processes. Four
// actors generating 124M parameters on 2 cores once left one of them
// unheard for 3.2 s (the default --actor-timeout is 3 s): these tests are
// about bits and memory, not about how soon a silent actor is named.
std::vector<std::string> Gpt2Small(int steps, std::vector<std::string> extra) {
  std::vector<std::string> args = {"train", "--model", "gpt", "--preset", "gpt2-small", "--seq", "128", "--batch", "1",
                                   "--microbatches", "4", "--actors", "4", "--schedule", "1f1b", "--steps",
                                   absl::StrCat(steps), "--eval-batches", "0", "--actor-timeout", "30"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// A finished `tandem train`: its exit code (-1 past the deadline) and output.
struct Finished {
  int code = -1;
  std::string out, err;
};
Finished Train(const std::vector<std::string>& args) {
  CliProcess train(args);
  Finished run;
  run.code = ExitCode(train, absl::Minutes(6));
  run.out = train.out();
  run.err = train.err();
  return run;
}

// "controller: peak resident memory N bytes": the controller's VmHWM.
int64_t ControllerPeak(const std::string& out) {
  std::smatch match;
  int64_t bytes = -1;
  if (std::regex_search(out, match, std::regex("controller: peak resident memory ([0-9]+) bytes"))) {
    EXPECT_TRUE(absl::SimpleAtoi(match[1].str(), &bytes));
  }
  return bytes;
}

// The model's state bytes by the checkpoint's manifest: every "state NAME
// f32[...]" record, each tensor once.
int64_t StateBytes(const std::string& checkpoint) {
  std::ifstream manifest(checkpoint + "/MANIFEST");
  int64_t total = 0;
  for (std::string line; std::getline(manifest, line);) {
    std::vector<std::string> fields = absl::StrSplit(line, '\t');
    if (fields.size() != 3 || fields[0] != "state") continue;
    const std::string& type = fields[2];
    EXPECT_TRUE(type.starts_with("f32[")) << type;
    int64_t elements = 1;
    for (absl::string_view extent : absl::StrSplit(type.substr(4, type.size() - 5), ',', absl::SkipEmpty())) {
      int64_t value = 0;
      EXPECT_TRUE(absl::SimpleAtoi(extent, &value)) << type;
      elements *= value;
    }
    total += 4 * elements;
  }
  return total;
}

class RealSize : public ::testing::Test {
 protected:
  std::string Path(const std::string& name) const { return dir_.Path(name); }

  test::TemporaryDirectory dir_{"tandem-real-size-test"};
};

TEST_F(RealSize, Gpt2SmallOnFourActorsIsBitIdenticalToTheReference) {
  Finished run = Train(Gpt2Small(2, {"--verify"}));
  ASSERT_EQ(run.code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("gpt: 12 layers, d=768, 12 heads, seq 128, vocab 50257"));
  EXPECT_THAT(run.out, HasSubstr("verify: losses of 2 steps and all 444 state tensors bit-identical"));
}

TEST_F(RealSize, Gpt2SmallResumesBitIdenticalWhileTheControllerHoldsUnderAQuarterOfTheModel) {
  Finished straight = Train(Gpt2Small(2, {"--checkpoint-dir", Path("straight")}));
  ASSERT_EQ(straight.code, 0) << straight.err;
  Finished first = Train(Gpt2Small(1, {"--checkpoint-dir", Path("split")}));
  ASSERT_EQ(first.code, 0) << first.err;
  Finished second = Train(Gpt2Small(2, {"--resume", Path("split")}));
  ASSERT_EQ(second.code, 0) << second.err;
  EXPECT_THAT(second.out, HasSubstr("done: 1 steps (2 to 2)"));

  const std::map<std::string, std::string> expected = StateFiles(Path("straight/step-00000002"));
  const std::map<std::string, std::string> resumed = StateFiles(Path("split/step-00000002"));
  ASSERT_EQ(expected.size(), 4u);
  ASSERT_EQ(resumed.size(), expected.size());
  for (const auto& [name, bytes] : expected) {
    EXPECT_TRUE(resumed.at(name) == bytes) << name << " differs from the uninterrupted run's";
  }
  // The first actor holds the embedding with its Adam slots: one actor's
  // state alone is past 256 MiB, far past a control message's 64 MiB.
  EXPECT_GT(expected.at("actor-0.state").size(), size_t{256} << 20);

  const int64_t state_bytes = StateBytes(Path("straight/step-00000002"));
  EXPECT_GT(state_bytes, int64_t{1} << 30);  // 124 M parameters and two Adam slots
  for (const Finished* run : {&straight, &first, &second}) {
    const int64_t peak = ControllerPeak(run->out);
    ASSERT_GT(peak, 0) << run->out;
    EXPECT_LT(peak, state_bytes / 4) << "the controller's peak resident memory, against the model's state of "
                                     << state_bytes << " bytes";
  }
}

}  // namespace
}  // namespace tandem::cli
