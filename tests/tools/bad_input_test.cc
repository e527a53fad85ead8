// Issue 13, section 5: bad input given to `tandem` as a user gives it. Each
// case ends in a clear error (or a correct result), never a signal, a hang
// or unbounded memory: the commands run capped at 2 GiB of memory
// (an unbounded allocation fails there instead of eating the machine), and
// every wait is bounded.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/parser.h"
#include "tests/tools/cli_process.h"

namespace tandem::cli {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::Not;

// What a finished `tandem` run left.
struct Finished {
  int exit_code = -1;  // -1: killed by a signal, or still running at the deadline
  int signal = 0;
  std::string out, err;
};

// Runs `tandem args...` to the end (at most `timeout`; then it is killed)
// and, with `capped`, held to 2 GiB of memory.
Finished RunCapped(const std::vector<std::string>& args, absl::Duration timeout = absl::Seconds(60),
                   const std::vector<std::string>& environment = {}, bool capped = true) {
  CliProcess process(args, environment, capped ? int64_t{2} << 30 : 0);
  Finished run;
  if (std::optional<int> status = process.Wait(timeout)) {
    if (WIFEXITED(*status)) run.exit_code = WEXITSTATUS(*status);
    if (WIFSIGNALED(*status)) run.signal = WTERMSIG(*status);
  }
  run.out = process.out();
  run.err = process.err();
  return run;
}

class BadInput : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / absl::StrCat("tandem-bad-input-files-", getpid());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& contents) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << contents;
    return path;
  }
  fs::path dir_;
};

TEST_F(BadInput, HugeCountsInAScheduleFileAreRefusedInBoundedMemory) {
  const std::string actors = Write("a.sched", "actors 999999999\nmicrobatches 1\n");
  Finished run = RunCapped({"sched", "check", actors});
  EXPECT_EQ(run.exit_code, 1) << "signal " << run.signal << ": " << run.err;
  EXPECT_THAT(run.err, HasSubstr(actors + ":1:8: error: actors 999999999 is more than the 4096 a schedule may have"));
  const std::string stages = Write("s.sched", "actors 2\nstages 999999999\nmicrobatches 1\n");
  run = RunCapped({"sched", "check", stages});
  EXPECT_EQ(run.exit_code, 1) << run.err;
  EXPECT_THAT(run.err, HasSubstr("stages 999999999 is more than the 65536"));
}

TEST_F(BadInput, AHugeStageInACsvFileIsRefusedByCheckSimAndConvert) {
  const std::string csv = Write("x.csv", "999999999F0\n");
  for (const std::vector<std::string>& args : {std::vector<std::string>{"sched", "check", csv},
                                               {"sched", "sim", csv},
                                               {"sched", "convert", csv, "--to", "tandem"}}) {
    Finished run = RunCapped(args);
    EXPECT_EQ(run.exit_code, 1) << args[1] << ": signal " << run.signal << ": " << run.err;
    EXPECT_THAT(run.err, HasSubstr("stage 999999999 in '999999999F0' is beyond the 65536 stages")) << args[1];
  }
}

TEST_F(BadInput, AMegabyteTokenMakesAShortMessage) {
  for (const auto& [name, text] : std::vector<std::pair<std::string, std::string>>{
           {"token.sched", std::string(1 << 20, 'x')}, {"token.csv", std::string(1 << 20, '7')}}) {
    const std::string path = Write(name, text);
    Finished run = RunCapped({"sched", "check", path});
    EXPECT_EQ(run.exit_code, 1) << name;
    EXPECT_LT(run.err.size(), path.size() + 300) << run.err.substr(0, 300);
  }
}

TEST_F(BadInput, ADirectoryIsNotAScheduleFile) {
  const std::string directory = (dir_ / "schedules").string();
  fs::create_directories(directory);
  Finished run = RunCapped({"sched", "check", directory});
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_THAT(run.err, AllOf(HasSubstr(directory + ": error: the file is a directory"), Not(HasSubstr("must be set"))));
  run = RunCapped({"train", "--model", "mlp", "--actors", "2", "--schedule", directory, "--steps", "1"});
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_THAT(run.err, HasSubstr("is a directory"));
}

TEST_F(BadInput, IrDumpParsesBack) {
  Finished run = RunCapped({"ir", "dump", "--model", "mlp", "--stages", "2"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  ASSERT_TRUE(absl::StartsWith(run.out, "# mlp: "));
  absl::StatusOr<ir::TrainStep> step = ir::ParseTrainStep(run.out, "dump.ir");
  EXPECT_TRUE(step.ok()) << step.status();
}

TEST_F(BadInput, AttentionIsFusedUnlessComposedIsAskedForAndNothingElse) {
  Finished fused = RunCapped({"ir", "dump", "--model", "llama", "--layers", "1", "--kv-heads", "2"});
  ASSERT_EQ(fused.exit_code, 0) << fused.err;
  EXPECT_THAT(fused.out, AllOf(HasSubstr("= attention("), HasSubstr("= attention_grad("), Not(HasSubstr("softmax("))));
  EXPECT_TRUE(ir::ParseTrainStep(fused.out, "fused.ir").ok());
  Finished composed =
      RunCapped({"ir", "dump", "--model", "llama", "--layers", "1", "--kv-heads", "2", "--attention", "composed"});
  ASSERT_EQ(composed.exit_code, 0) << composed.err;
  EXPECT_THAT(composed.out, AllOf(HasSubstr("= softmax("), HasSubstr("= causal_mask("), Not(HasSubstr("attention("))));
  Finished other = RunCapped({"ir", "dump", "--model", "gpt", "--attention", "flash"});
  EXPECT_EQ(other.exit_code, 2);
  EXPECT_THAT(other.err, HasSubstr("--attention: flash not in {fused,composed}"));
}

TEST_F(BadInput, HugeModelSizesAreRefusedQuicklyInBoundedMemory) {
  const absl::Time start = absl::Now();
  for (const auto& [flags, expected] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--dim", "1000000"}, "dim 1000000 is more than the 65536"},
           // 4 layers of 65536 x 65536 with Adam: 192 GiB of state, past this machine's memory.
           {{"--dim", "65536"}, "the step does not fit: its 4 actors need"},
           {{"--layers", "4294967298"}, "layers 4294967298 is more than the 1024"},
           {{"--actors", "10000"}, "actors 10000 is more than the 4096"},
           {{"--schedule", "interleaved", "--virtual", "100000"}, "virtual 100000 is more than the 64"}}) {
    std::vector<std::string> args = {"train", "--model", "mlp", "--steps", "1", "--launcher", "threads"};
    args.insert(args.end(), flags.begin(), flags.end());
    Finished run = RunCapped(args, absl::Seconds(30));
    EXPECT_NE(run.exit_code, 0) << flags[0];
    EXPECT_EQ(run.signal, 0) << flags[0] << ": " << run.err;
    EXPECT_THAT(run.err, HasSubstr(expected)) << flags[0];
  }
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
}

TEST_F(BadInput, DevicesThatCannotRunAreRefusedBeforeAnyActorStarts) {
  Finished run = RunCapped({"train", "--model", "mlp", "--steps", "1", "--device", "fake-gpu"});
  EXPECT_NE(run.exit_code, 0);
  EXPECT_THAT(run.err, HasSubstr("unknown device 'fake-gpu'"));
  EXPECT_THAT(run.err, HasSubstr("fake-cuda"));
  run = RunCapped({"train", "--model", "mlp", "--steps", "1", "--device", "fake-cuda/0"});
  EXPECT_NE(run.exit_code, 0);
  EXPECT_THAT(run.err, HasSubstr("fake-cuda/N (1 <= N <= 64 emulated GPUs per host)"));
  run = RunCapped({"train", "--model", "mlp", "--steps", "1", "--device", "fake-cuda", "--launcher", "threads"});
  EXPECT_NE(run.exit_code, 0);
  EXPECT_THAT(run.err, HasSubstr("--device fake-cuda needs actor processes"));
  run = RunCapped({"train", "--model", "mlp", "--steps", "1", "--device", "fake-cuda"},  absl::Seconds(30),
                  {"TANDEM_FAULT=fake-cuda-poison:0"});
  EXPECT_NE(run.exit_code, 0);
  EXPECT_EQ(run.signal, 0);
  EXPECT_THAT(run.err, HasSubstr("expected fake-cuda-poison:ACTOR:N"));
}

TEST_F(BadInput, LearningRatesThatAreNotNumbersAboveZeroAreRefused) {
  for (const char* lr : {"nan", "inf", "0", "-1"}) {
    Finished run = RunCapped({"train", "--model", "mlp", "--lr", lr, "--steps", "1", "--launcher", "reference"});
    EXPECT_EQ(run.exit_code, 1) << lr << ": " << run.err;
    EXPECT_THAT(run.err, HasSubstr("is not a learning rate")) << lr;
  }
}

TEST_F(BadInput, EvaluatingEveryKStepsNeedsBatchesToEvaluate) {
  Finished run = RunCapped({"train", "--model", "mlp", "--steps", "2", "--eval-every", "1", "--eval-batches", "0"});
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_THAT(run.err, HasSubstr("--eval-every needs --eval-batches above 0"));
}

TEST_F(BadInput, RestartsNeedAPipelineAndACountInRange) {
  Finished reference = RunCapped({"train", "--model", "mlp", "--steps", "1", "--launcher", "reference",
                                  "--max-restarts", "1"});
  EXPECT_EQ(reference.exit_code, 2) << reference.err;
  EXPECT_THAT(reference.err, HasSubstr("--max-restarts needs a pipeline (--launcher local or threads)"));
  for (const char* count : {"-1", "lots", "99999999999"}) {
    Finished run = RunCapped({"train", "--model", "mlp", "--steps", "1", "--max-restarts", count});
    EXPECT_EQ(run.exit_code, 2) << count << ": " << run.err;
    EXPECT_THAT(run.err, HasSubstr("--max-restarts")) << count;
  }
}

// Without the Python environment tools/setup.sh makes, a benchmark's PyTorch
// side says which command makes it (never a silent skip); Tandem's side
// still runs.
TEST_F(BadInput, ABenchmarkWithoutThePythonEnvironmentNamesTheCommandThatMakesIt) {
  Finished run = RunCapped({"bench", "step", "--layers", "1", "--dim", "16", "--heads", "2", "--seq", "8",
                            "--microbatches", "1", "--threads", "1", "--python", "/nonexistent/venv/bin/python"});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("pytorch unavailable: no Python at /nonexistent/venv/bin/python: make the "
                                 "environment with tools/setup.sh"));
  EXPECT_THAT(run.out, HasSubstr("bit-identical at every thread count: yes"));
}

// bench step's own model (d=256, 8 heads) fills only what neither the
// flags nor a preset say: --preset gpt2-small keeps its width and heads.
TEST_F(BadInput, ABenchmarksPresetKeepsItsSizes) {
  Finished run = RunCapped({"bench", "step", "--preset", "gpt2-small", "--layers", "1", "--seq", "8", "--batch", "1",
                            "--vocab", "128", "--microbatches", "1", "--threads", "1", "--repeats", "1", "--no-torch"});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("gpt: 1 layers, d=768, 12 heads, seq 8, vocab 128, batch 1 x 1 microbatches"));
}

TEST_F(BadInput, EvalNeedsALanguageModelAndItsParameters) {
  Finished nothing = RunCapped({"eval", "--batches", "4"});
  EXPECT_EQ(nothing.exit_code, 2) << nothing.err;
  EXPECT_THAT(nothing.err, HasSubstr("eval needs the parameters: --checkpoint DIR or --import FILE"));
  Finished mlp = RunCapped({"eval", "--model", "mlp", "--batches", "4", "--import", "p.safetensors"});
  EXPECT_EQ(mlp.exit_code, 2) << mlp.err;
  EXPECT_THAT(mlp.err, HasSubstr("eval needs a language model (gpt or llama), not mlp"));
  Finished both = RunCapped({"eval", "--batches", "4", "--import", "p.safetensors", "--checkpoint", "ck"});
  EXPECT_EQ(both.exit_code, 2) << both.err;
  EXPECT_THAT(both.err, HasSubstr("excludes"));
}

TEST_F(BadInput, ABinaryDataFileIsRefusedNamingTheByte) {
  std::string bytes(4096, 'a');
  bytes[2048] = '\0';
  const std::string data = Write("data.bin", bytes);
  Finished run = RunCapped({"train", "--data", data, "--steps", "1", "--launcher", "reference"});
  EXPECT_EQ(run.exit_code, 1) << run.err;
  EXPECT_THAT(run.err, HasSubstr(data + ": byte 2048 is a NUL byte"));
}

TEST_F(BadInput, AnUnwritableCheckpointDirectoryIsFoundBeforeTheFirstStep) {
  const std::string file = Write("not-a-directory", "x");
  Finished run = RunCapped({"train", "--model", "mlp", "--actors", "2", "--steps", "1000", "--launcher", "threads",
                            "--checkpoint-dir", file + "/checkpoints"});
  EXPECT_EQ(run.exit_code, 1) << run.err;
  EXPECT_THAT(run.err, HasSubstr("cannot write checkpoints under " + file + "/checkpoints"));
  EXPECT_THAT(run.out, Not(HasSubstr("step ")));
}

TEST_F(BadInput, AResumeThatFallsBackToAnOlderCheckpointSaysSo) {
  const std::string root = (dir_ / "checkpoints").string();
  Finished run = RunCapped({"train", "--model", "mlp", "--actors", "2", "--steps", "4", "--launcher", "threads",
                            "--checkpoint-dir", root, "--checkpoint-every", "2", "--eval-batches", "0"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  std::string manifest = ReadFile(root + "/step-00000004/MANIFEST");
  manifest[manifest.find("step\t4") + 5] = '0';  // one flipped bit: '4' -> '0'
  std::ofstream(root + "/step-00000004/MANIFEST", std::ios::trunc) << manifest;
  run = RunCapped({"train", "--model", "mlp", "--actors", "2", "--steps", "6", "--launcher", "threads", "--resume",
                   root, "--checkpoint-dir", (dir_ / "more").string(), "--eval-batches", "0"});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.err, HasSubstr("skipping checkpoint " + root + "/step-00000004: "));
  EXPECT_THAT(run.out, HasSubstr("resuming from " + root + "/step-00000002 (after step 2"));
}

TEST_F(BadInput, AKilledControllersRunDirectoryIsRemovedByTheNextStart) {
  const std::string tmpdir = (dir_ / "tmp").string();
  fs::create_directories(tmpdir);
  const std::string setting = "TMPDIR=" + tmpdir;
  auto run_directories = [&] {
    std::vector<std::string> found;
    for (const fs::directory_entry& entry : fs::directory_iterator(tmpdir)) {
      if (entry.path().filename().string().rfind("tandem-", 0) == 0) found.push_back(entry.path().string());
    }
    return found;
  };
  {
    CliProcess train({"train", "--model", "mlp", "--actors", "2", "--steps", "100000", "--eval-batches", "0"},
                     {setting});
    ASSERT_TRUE(CliProcess::Within(absl::Seconds(60), [&] { return train.out().find("/100000") != std::string::npos; }))
        << train.err();
    ASSERT_EQ(run_directories().size(), 1u);
    kill(train.pid(), SIGKILL);
    train.Wait(absl::Seconds(10));
  }
  const std::vector<std::string> left = run_directories();
  ASSERT_EQ(left.size(), 1u) << "SIGKILL leaves the directory; the next start must remove it";
  Finished next = RunCapped({"train", "--model", "mlp", "--actors", "2", "--steps", "1", "--eval-batches", "0"},
                            absl::Seconds(60), {setting}, /*capped=*/false);
  EXPECT_EQ(next.exit_code, 0) << next.err;
  EXPECT_FALSE(fs::exists(left[0]));
  EXPECT_TRUE(run_directories().empty());
}

}  // namespace
}  // namespace tandem::cli

namespace tandem::cli {
namespace {

// Issue 41, findings 3 and 7: a FIFO or a device given where a file is read
// is refused at once, naming it, instead of blocking in open() or reading
// without end.
TEST_F(BadInput, AFifoOrADeviceGivenAsAnInputFileIsRefusedAtOnce) {
  const std::string fifo = (dir_ / "input.fifo").string();
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const std::vector<std::string> gpt = {"train", "--model", "gpt", "--layers", "2", "--dim", "32", "--heads", "4",
                                        "--seq", "16", "--actors", "2", "--steps", "1", "--launcher", "threads"};
  for (const auto& [flags, expected] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--import", fifo}, fifo + " is a FIFO, not a regular file"},
           {{"--data", fifo}, fifo + " is a FIFO, not a regular file"},
           {{"--data", "/dev/zero"}, "/dev/zero is a character device, not a regular file"},
           {{"--plan", fifo}, "is a FIFO, not a regular file"},
           {{"--schedule", fifo}, "is a FIFO, not a regular file"}}) {
    std::vector<std::string> args = gpt;
    args.insert(args.end(), flags.begin(), flags.end());
    const absl::Time start = absl::Now();
    Finished run = RunCapped(args, absl::Seconds(30));
    EXPECT_EQ(run.exit_code, 1) << flags[0] << " " << flags[1] << ": signal " << run.signal << ": " << run.err;
    EXPECT_THAT(run.err, HasSubstr(expected)) << flags[0];
    EXPECT_LT(absl::Now() - start, absl::Seconds(20)) << flags[0];
  }
  for (const std::string& model : {fifo, std::string("/dev/zero")}) {
    Finished run = RunCapped({"tokenize", "--model", model, "--input", Write("t.txt", "text\n"), "--output",
                              (dir_ / "t.bin").string()},
                             absl::Seconds(30));
    EXPECT_EQ(run.exit_code, 1) << model << ": signal " << run.signal << ": " << run.err;
    EXPECT_THAT(run.err, HasSubstr("not a regular file")) << model;
  }
}

// Finding 2: a tokenizer model whose normaliser table points outside itself
// is refused naming the file; the library never reads it.
TEST_F(BadInput, ATokenizerModelWithAForgedNormaliserTableIsRefusedNotACrash) {
  // A model of one field: a normaliser spec whose charsmap's trie sends the
  // search to unit 2^20 of 256.
  std::string charsmap = {0, 4, 0, 0};  // a trie of 1024 bytes
  std::string trie(1024, '\0');
  trie[2] = 0;
  trie[3] = 0x40;  // unit 0 = 2^30: offset 2^20
  charsmap += trie + std::string("x\0", 2);
  std::string spec = std::string(1, 2 << 3 | 2);
  spec += static_cast<char>(0x86);
  spec += static_cast<char>(0x08);  // 1030 as a varint
  spec += charsmap;
  std::string model = std::string(1, 3 << 3 | 2);
  model += static_cast<char>(0x89);
  model += static_cast<char>(0x08);  // 1033
  model += spec;
  ASSERT_EQ(spec.size(), 1033u);
  const std::string path = Write("forged.model", model);
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"tokenize", "--model", path, "--input", Write("t.txt", "text\n"), "--output",
                                 (dir_ / "t.bin").string()},
        {"train", "--model", "llama", "--layers", "1", "--dim", "32", "--heads", "4", "--steps", "1", "--tokenizer",
         path, "--data", Write("tokens.bin", std::string(4096, '\0'))}}) {
    Finished run = RunCapped(args);
    EXPECT_EQ(run.signal, 0) << args[0] << ": " << run.err;
    EXPECT_EQ(run.exit_code, 1) << args[0] << ": " << run.err;
    EXPECT_THAT(run.err, AllOf(HasSubstr(path), HasSubstr("points outside its trie"))) << args[0];
  }
}

// Finding 6: an output that is a symbolic link is written through it (the
// link stays); one that is no regular file is refused, left as it was.
TEST_F(BadInput, AnOutputIsWrittenThroughItsLinkAndNeverReplacesAFifo) {
  const std::string model = (dir_ / "licences.model").string();
  Finished trained = RunCapped({"tokenize", "--train", "--input", "/usr/share/common-licenses/GPL-3", "--vocab", "400",
                                "--model", model},
                               absl::Seconds(120));
  ASSERT_EQ(trained.exit_code, 0) << trained.err;
  const std::string text = Write("text.txt", "Everyone is permitted to copy and distribute verbatim copies.\n");
  const std::string target = (dir_ / "real.bin").string();
  const std::string link = (dir_ / "link.bin").string();
  fs::create_symlink("real.bin", link);
  Finished run = RunCapped({"tokenize", "--model", model, "--input", text, "--output", link}, absl::Seconds(60));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_TRUE(fs::is_symlink(link)) << "the link was replaced by a file";
  EXPECT_TRUE(fs::is_regular_file(target));
  EXPECT_GT(fs::file_size(target), 0u);

  const std::string fifo = (dir_ / "out.fifo").string();
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  run = RunCapped({"tokenize", "--model", model, "--input", text, "--output", fifo}, absl::Seconds(60));
  EXPECT_EQ(run.exit_code, 1) << run.err;
  EXPECT_THAT(run.err, HasSubstr(fifo + " is a FIFO, not a regular file: Tandem writes its outputs only to regular files"));
  EXPECT_EQ(fs::status(fifo).type(), fs::file_type::fifo);
  const std::string fifo_link = (dir_ / "fifo-link.bin").string();
  fs::create_symlink(fifo, fifo_link);
  run = RunCapped({"tokenize", "--model", model, "--input", text, "--output", fifo_link}, absl::Seconds(60));
  EXPECT_EQ(run.exit_code, 1) << run.err;
  EXPECT_THAT(run.err, HasSubstr(absl::StrCat("(a link to ", fifo, ") is a FIFO")));
  EXPECT_TRUE(fs::is_symlink(fifo_link));
}

// Finding 10: a loss or a gradient that is not a finite number stops the
// run, naming the step and the stage whose gradients are not finite, and no
// checkpoint of that step (or after it) is written.
TEST_F(BadInput, ANonFiniteLossStopsTheRunBeforeItIsSaved) {
  const std::string root = (dir_ / "checkpoints").string();
  Finished run = RunCapped({"train", "--model", "mlp", "--actors", "2", "--steps", "20", "--launcher", "threads",
                            "--lr", "1e30", "--checkpoint-dir", root, "--checkpoint-every", "1", "--eval-batches", "0"});
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  EXPECT_THAT(run.err, AllOf(HasSubstr("OUT_OF_RANGE"), HasSubstr("the run stops here"),
                             ContainsRegex("the loss of microbatch [0-9]+ is -?nan"),
                             ContainsRegex("the gradients of stage [01] are not finite"),
                             HasSubstr("--on-nonfinite skip would leave the weights as they were")));
  const size_t at = run.err.find("step ");
  ASSERT_NE(at, std::string::npos) << run.err;
  const int bad_step = std::atoi(run.err.c_str() + at + 5);
  ASSERT_GT(bad_step, 0) << run.err;
  EXPECT_LT(bad_step, 20) << run.err;
  for (int step = bad_step; step <= 20; ++step) {
    EXPECT_FALSE(fs::exists(absl::StrFormat("%s/step-%08d", root, step))) << "a checkpoint of step " << step;
  }
  if (bad_step > 1) {
    EXPECT_TRUE(fs::exists(absl::StrFormat("%s/step-%08d", root, bad_step - 1)));
  }
}

// Finding 10, asked otherwise: --on-nonfinite skip leaves the weights (and
// Adam's moments) of a step whose gradients are not finite as they were,
// goes on, counts the skipped steps, and saves finite checkpoints: every one
// after the first good step holds the same bytes. The pipeline and the
// reference skip the same steps (--verify).
TEST_F(BadInput, SkippingNonFiniteStepsKeepsTheWeightsAndCountsThem) {
  const std::string root = (dir_ / "checkpoints").string();
  Finished run = RunCapped({"train", "--model", "mlp", "--actors", "2", "--steps", "6", "--launcher", "threads",
                            "--lr", "1e30", "--on-nonfinite", "skip", "--verify", "--checkpoint-dir", root,
                            "--checkpoint-every", "1", "--eval-batches", "0"});
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_THAT(run.out, AllOf(HasSubstr("done: 6 steps, 5 skipped (gradients not finite)"),
                             ContainsRegex("step +2/6  loss -?nan .*skipped: .*the gradients of stage"),
                             HasSubstr("bit-identical to the reference")));
  for (const std::string file : {"actor-0.state", "actor-1.state"}) {
    const std::string first = ReadFile(absl::StrFormat("%s/step-%08d/%s", root, 1, file));
    ASSERT_FALSE(first.empty()) << file;
    for (int step = 2; step <= 6; ++step) {
      EXPECT_EQ(ReadFile(absl::StrFormat("%s/step-%08d/%s", root, step, file)), first)
          << file << " after skipped step " << step;
    }
  }
  Finished bad = RunCapped({"train", "--model", "mlp", "--steps", "1", "--on-nonfinite", "ignore"});
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_THAT(bad.err, HasSubstr("--on-nonfinite"));
}

// Finding 4: counts inside their documented ranges whose product makes a
// step too large to compile are refused as the user's error, quickly and in
// bounded memory, not an INTERNAL error or an abort after gigabytes.
TEST_F(BadInput, AStepTooLargeToCompileIsRefusedQuicklyInBoundedMemory) {
  for (const auto& [flags, expected] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--model", "mlp", "--layers", "1024", "--actors", "1024", "--microbatches", "1024"},
            "has 2097152 tasks on its 1024 actors (1024 microbatches of 1024 stages): more than the 1048576"},
           {{"--model", "gpt", "--layers", "4", "--actors", "4", "--microbatches", "65536"},
            "one actor program may have"},
           {{"--model", "gpt", "--layers", "256", "--actors", "256", "--microbatches", "4096"},
            "a compiled step may have"}}) {
    std::vector<std::string> args = {"compile"};
    args.insert(args.end(), flags.begin(), flags.end());
    const std::string what = absl::StrJoin(flags, " ");
    const absl::Time start = absl::Now();
    Finished run = RunCapped(args, absl::Seconds(120));
    EXPECT_EQ(run.exit_code, 1) << what << ": signal " << run.signal << ": " << run.err;
    EXPECT_THAT(run.err, AllOf(HasSubstr("INVALID_ARGUMENT"), HasSubstr(expected), HasSubstr("make it smaller")))
        << what;
    EXPECT_LT(absl::Now() - start, absl::Seconds(60)) << what;
  }
}

// The other side of finding 4: a model too large for any one machine still
// compiles (GPT-3 175B's shapes, 96 stages x 8 replicas: 768 actor
// programs) in bounded memory; running it is what the memory-fit checks
// refuse, naming the bytes.
TEST_F(BadInput, GptThreeShapesCompileButAreRefusedToRunHere) {
  const std::vector<std::string> gpt3 = {"--model", "gpt",  "--layers", "96",   "--dim",          "12288",
                                         "--heads", "96",   "--seq",    "2048", "--microbatches", "192"};
  std::vector<std::string> compile = {"compile", "--actors", "96", "--data-parallel", "8"};
  compile.insert(compile.end(), gpt3.begin(), gpt3.end());
  Finished compiled = RunCapped(compile, absl::Seconds(240));
  ASSERT_EQ(compiled.exit_code, 0) << "signal " << compiled.signal << ": " << compiled.err;
  EXPECT_THAT(compiled.out, HasSubstr("768 actors, 96 stages, 192 microbatches per replica, 8 data-parallel replicas"));
  std::vector<std::string> train = {"train", "--actors", "96", "--steps", "1"};
  train.insert(train.end(), gpt3.begin(), gpt3.end());
  Finished refused = RunCapped(train, absl::Seconds(240));
  EXPECT_EQ(refused.exit_code, 1) << "signal " << refused.signal << ": " << refused.err;
  EXPECT_THAT(refused.err, AllOf(HasSubstr("RESOURCE_EXHAUSTED: the step does not fit"), HasSubstr("GiB")));
}

// --actor-timeout, how long an actor may go unheard, is bounded like every
// flag: below half a second every busy moment would end the job.
TEST_F(BadInput, AnActorTimeoutOutsideItsRangeIsRefusedBeforeLaunch) {
  for (const std::string value : {"0", "0.1", "-3", "1e9"}) {
    Finished run = RunCapped({"train", "--model", "mlp", "--steps", "1", "--actor-timeout", value});
    EXPECT_EQ(run.exit_code, 2) << value << ": " << run.err;
    EXPECT_THAT(run.err, HasSubstr("--actor-timeout")) << value;
  }
  Finished run = RunCapped({"train", "--model", "mlp", "--actors", "2", "--steps", "2", "--actor-timeout", "10",
                            "--eval-batches", "0"});
  EXPECT_EQ(run.exit_code, 0) << run.err;
}

// Finding 5: the reference launcher checks its memory before it allocates
// the model, as the local and threads launchers check their actors'.
TEST_F(BadInput, AModelTooLargeForTheReferenceIsRefusedBeforeItIsAllocated) {
  // 4 layers of 65536 x 65536 with Adam: 192 GiB of state, past any
  // machine this runs on.
  const absl::Time start = absl::Now();
  Finished run = RunCapped({"train", "--model", "mlp", "--dim", "65536", "--steps", "1", "--launcher", "reference"});
  EXPECT_EQ(run.exit_code, 1) << "signal " << run.signal << ": " << run.err;
  EXPECT_THAT(run.err, AllOf(HasSubstr("RESOURCE_EXHAUSTED"),
                             HasSubstr("the reference interpreter holds the whole model in this process")));
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
}

// Finding 11: a plan made for another model or device than the run's is
// not applied in silence: the run says so, and goes on with its cut.
TEST_F(BadInput, APlanForAnotherModelOrDeviceIsNamedNotIgnored) {
  const std::string plan = Write(
      "plan.json",
      R"({"format":"tandem-plan","version":1,"model":"mlp: 99 hidden layers of 7, batch 1 x 2 microbatches, 2 stages",)"
      R"("device":"cuda","actors":2,"data_parallel":1,"schedule":"1f1b","virtual_stages":1,"microbatches":2,)"
      R"("microbatch_size":4,"segments":2,"memory_cap":0,"stages":[{"segments":[0,1],"remat":false,"actor":0},)"
      R"({"segments":[1,2],"remat":false,"actor":1}]})");
  Finished run = RunCapped({"train", "--model", "mlp", "--plan", plan, "--steps", "1", "--launcher", "threads",
                            "--eval-batches", "0"});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.err, HasSubstr("note: plan " + plan + " was made for \"mlp: 99 hidden layers of 7\", not this run's"));
  EXPECT_THAT(run.err, HasSubstr("was measured on cuda, not this run's cpu"));
}

// Findings 7 and 11: --threads past what any process may ask for, and
// --eval-batches past its bound, are usage errors of `tandem` itself,
// before an actor starts.
TEST_F(BadInput, CountFlagsPastTheirBoundsAreUsageErrorsBeforeAnyActorStarts) {
  for (const auto& [flag, value, bound] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"--threads", "100000", "4096"}, {"--eval-batches", "9223372036854775807", "65536"}}) {
    Finished run = RunCapped({"train", "--model", "mlp", "--actors", "2", "--steps", "1", flag, value});
    EXPECT_EQ(run.exit_code, 2) << flag << ": " << run.err;
    EXPECT_THAT(run.err, AllOf(HasSubstr(flag), HasSubstr(bound))) << flag;
    EXPECT_THAT(run.err, Not(HasSubstr("actor 0"))) << flag;
    EXPECT_THAT(run.out, Not(HasSubstr("step "))) << flag;
  }
}

}  // namespace
}  // namespace tandem::cli
