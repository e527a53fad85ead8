// Issue 34's acceptance 3: the CPU kernels use the cores with bits that do
// not depend on how many: a GPT trained with 1 kernel thread and with 2
// gives the same losses and the same state, bit for bit, on the reference
// interpreter and on actor processes.
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/temporary_directory.h"
#include "tests/tools/cli_process.h"

namespace tandem::cli {
namespace {

class TrainThreads : public ::testing::Test {
 protected:

  // Trains a GPT large enough that every kernel splits its work (GEMMs into
  // tiles, elementwise ops and rows into pieces) on `threads` threads; the
  // losses file and the checkpoint's state files, by name.
  std::map<std::string, std::string> Train(const std::string& launcher, int threads) {
    const std::string run = dir_.Path(absl::StrCat(launcher, "-", threads));
    std::vector<std::string> args = {"train", "--model", "gpt", "--dim", "256", "--heads", "8", "--seq", "64",
                                     "--batch", "4", "--layers", "4", "--microbatches", "4", "--steps", "3",
                                     "--eval-batches", "0", "--launcher", launcher, "--threads",
                                     absl::StrCat(threads), "--losses", run + ".losses.json"};
    if (launcher != "reference") {
      args.insert(args.end(), {"--actors", "2", "--checkpoint-dir", run});
    }
    CliProcess train(args);
    EXPECT_EQ(ExitCode(train, absl::Seconds(240)), 0) << train.err();
    std::map<std::string, std::string> files = {{"losses", ReadFile(run + ".losses.json")}};
    if (launcher != "reference") {
      for (const auto& entry : std::filesystem::directory_iterator(run + "/step-00000003")) {
        files[entry.path().filename().string()] = ReadFile(entry.path().string());
      }
    }
    return files;
  }

  test::TemporaryDirectory dir_{"tandem-threads-test"};
};

TEST_F(TrainThreads, OneAndTwoKernelThreadsGiveTheSameBits) {
  for (const std::string launcher : {"reference", "local"}) {
    const std::map<std::string, std::string> one = Train(launcher, 1);
    const std::map<std::string, std::string> two = Train(launcher, 2);
    ASSERT_FALSE(one.at("losses").empty()) << launcher;
    EXPECT_EQ(one.size(), launcher == "local" ? 4u : 1u);  // losses, MANIFEST, 2 actor files
    ASSERT_EQ(one.size(), two.size());
    for (const auto& [name, bytes] : one) {
      EXPECT_TRUE(two.at(name) == bytes) << launcher << ": " << name << " differs between 1 and 2 threads";
    }
  }
}

}  // namespace
}  // namespace tandem::cli
