// Issue 35's walk-through as a user runs it: `tandem tokenize --train` a BPE
// model on the licence texts, `tandem tokenize` them into a token file,
// `tandem train --model llama` on it (the validation loss falls),
// `tandem generate` from its checkpoint, and `tandem eval` of it.
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/temporary_directory.h"
#include "tests/tools/cli_process.h"

namespace tandem::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

double ValidationLoss(const std::string& out) {
  std::smatch match;
  double loss = 0;
  if (!std::regex_search(out, match, std::regex("validation loss ([0-9.]+)")) ||
      !absl::SimpleAtod(match[1].str(), &loss)) {
    ADD_FAILURE() << "no validation loss in:\n" << out;
  }
  return loss;
}

TEST(TokenizeTrainGenerate, ALlamaTrainedOnATokenFileLearnsAndGenerates) {
  test::TemporaryDirectory dir("tandem-tokenize-test");
  const std::string model = dir.Path("licences.model");
  const std::string tokens = dir.Path("licences.bin");
  CliRun trained = RunCli({"tokenize", "--train", "--input", "/usr/share/common-licenses", "--vocab", "512", "--model",
                           model});
  ASSERT_EQ(trained.code, 0) << trained.out << trained.err;
  EXPECT_THAT(trained.out, HasSubstr("trained a BPE tokenizer of 512 pieces"));
  CliRun encoded = RunCli({"tokenize", "--model", model, "--input", "/usr/share/common-licenses", "--output", tokens});
  ASSERT_EQ(encoded.code, 0) << encoded.out << encoded.err;
  EXPECT_THAT(encoded.out, HasSubstr("as uint16 in " + tokens));

  const std::vector<std::string> llama = {"--model", "llama", "--layers", "2", "--dim", "64", "--heads", "4",
                                          "--kv-heads", "2", "--seq", "32", "--batch", "8", "--data", tokens,
                                          "--tokenizer", model, "--actors", "2", "--microbatches", "2",
                                          "--eval-batches", "4", "--warmup-steps", "5", "--clip-grad-norm", "1"};
  auto train = [&](const std::string& steps, std::vector<std::string> more) {
    std::vector<std::string> args = llama;
    args.insert(args.end(), {"--steps", steps});
    args.insert(args.end(), more.begin(), more.end());
    std::string out, err;
    EXPECT_EQ(RunTrain(args, out, err), 0) << out << err;
    return out;
  };
  const std::string one = train("1", {});
  EXPECT_THAT(one, HasSubstr("vocab 512"));
  EXPECT_THAT(one, HasSubstr("tokens of " + model));
  const std::string sixty = train("60", {"--checkpoint-dir", dir.Path("run")});
  EXPECT_LT(ValidationLoss(sixty), ValidationLoss(one) - 0.5) << one << sixty;

  CliRun generated = RunCli({"generate", "--checkpoint", dir.Path("run"), "--model", "llama", "--layers", "2", "--dim",
                             "64", "--heads", "4", "--kv-heads", "2", "--seq", "32", "--data", tokens, "--tokenizer",
                             model, "--prompt", "This program is", "--tokens", "12"});
  ASSERT_EQ(generated.code, 0) << generated.out << generated.err;
  EXPECT_THAT(generated.out, StartsWith("This program is"));
  EXPECT_GT(generated.out.size(), std::string("This program is\n").size());

  // eval: the mean loss over the token file's first windows, the same
  // however many share a forward pass and from the exported parameters.
  const std::vector<std::string> eval = {"eval", "--model", "llama", "--layers", "2", "--dim", "64", "--heads", "4",
                                         "--kv-heads", "2", "--seq", "32", "--data", tokens, "--tokenizer", model,
                                         "--batches", "8"};
  auto evaluate = [&](std::vector<std::string> more) {
    std::vector<std::string> args = eval;
    args.insert(args.end(), more.begin(), more.end());
    CliRun run = RunCli(args);
    EXPECT_EQ(run.code, 0) << run.out << run.err;
    EXPECT_THAT(run.err, HasSubstr("8 windows of 32 tokens of " + tokens));
    double loss = 0;
    EXPECT_TRUE(absl::StartsWith(run.out, "loss ") && absl::SimpleAtod(run.out.substr(5), &loss)) << run.out;
    return loss;
  };
  const double eight_per_pass = evaluate({"--checkpoint", dir.Path("run")});
  EXPECT_LT(eight_per_pass, ValidationLoss(one) - 0.5);  // trained: well below the untrained model's
  EXPECT_NEAR(evaluate({"--checkpoint", dir.Path("run"), "--batch", "2"}), eight_per_pass, 1e-5 * eight_per_pass);
  ASSERT_EQ(RunCli({"export", "--checkpoint", dir.Path("run"), "--out", dir.Path("run.safetensors")}).code, 0);
  EXPECT_EQ(evaluate({"--import", dir.Path("run.safetensors")}), eight_per_pass);
  std::vector<std::string> too_many = eval;
  too_many.back() = "100000000";
  too_many.insert(too_many.end(), {"--checkpoint", dir.Path("run")});
  CliRun past = RunCli(too_many);
  EXPECT_EQ(past.code, 1);
  EXPECT_THAT(past.err, HasSubstr("windows of 32 tokens (each followed by its label), not"));

  CliRun mismatched = RunCli({"generate", "--checkpoint", dir.Path("run"), "--model", "llama", "--layers", "3",
                              "--dim", "64", "--data", tokens, "--tokenizer", model, "--prompt", "x"});
  EXPECT_NE(mismatched.code, 0);
  EXPECT_THAT(mismatched.err, HasSubstr("pass the model options it was trained with"));
}

}  // namespace
}  // namespace tandem::cli
