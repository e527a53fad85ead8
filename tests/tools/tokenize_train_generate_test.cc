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

  // Two prompts, 40 tokens each: past the window of 32, which then slides.
  const std::vector<std::string> generate = {"generate", "--checkpoint", dir.Path("run"), "--model", "llama",
                                             "--layers", "2", "--dim", "64", "--heads", "4", "--kv-heads", "2",
                                             "--seq", "32", "--data", tokens, "--tokenizer", model, "--prompt",
                                             "This program is", "--prompt", "You may", "--tokens", "40"};
  auto generate_with = [&](std::vector<std::string> more) {
    std::vector<std::string> args = generate;
    args.insert(args.end(), more.begin(), more.end());
    return RunCli(args);
  };
  CliRun generated = generate_with({});
  ASSERT_EQ(generated.code, 0) << generated.out << generated.err;
  EXPECT_THAT(generated.out, StartsWith("This program is"));
  EXPECT_THAT(generated.out, HasSubstr("\nYou may"));
  EXPECT_GT(generated.out.size(), std::string("This program is\nYou may\n").size() + 40);
  EXPECT_THAT(generated.err, HasSubstr("2 prompts in 1 microbatch of 2 in this process, KV cache of 32 positions"));
  // The same text without a cache, and through 2 actors (a microbatch of
  // each prompt), processes or threads.
  CliRun uncached = generate_with({"--no-kv-cache"});
  ASSERT_EQ(uncached.code, 0) << uncached.err;
  EXPECT_EQ(uncached.out, generated.out);
  EXPECT_THAT(uncached.err, HasSubstr("without a KV cache: 80 tokens"));
  for (const char* launcher : {"local", "threads"}) {
    CliRun piped = generate_with({"--actors", "2", "--launcher", launcher});
    ASSERT_EQ(piped.code, 0) << piped.err;
    EXPECT_EQ(piped.out, generated.out) << launcher;
    EXPECT_THAT(piped.err, HasSubstr("2 prompts in 2 microbatches of 1 on 2 actors"));
  }
  CliRun both = generate_with({"--actors", "2", "--no-kv-cache"});
  EXPECT_EQ(both.code, 2);
  EXPECT_THAT(both.err, HasSubstr("--actors excludes --no-kv-cache"));
  CliRun more_actors = generate_with({"--actors", "3"});
  EXPECT_EQ(more_actors.code, 1);
  EXPECT_THAT(more_actors.err, HasSubstr("2 layers cannot fill 3 stages"));

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
  // Generation from the exported model through 2 actors: the checkpoint's text.
  std::vector<std::string> imported = generate;
  imported[1] = "--import";
  imported[2] = dir.Path("run.safetensors");
  imported.insert(imported.end(), {"--actors", "2"});
  CliRun from_import = RunCli(imported);
  ASSERT_EQ(from_import.code, 0) << from_import.err;
  EXPECT_EQ(from_import.out, generated.out);
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
