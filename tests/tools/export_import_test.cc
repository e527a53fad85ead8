// Issue 35's acceptance 4 as a user runs it: `tandem export` writes a
// checkpoint's parameters (and only them) to safetensors bit for bit, and
// `tandem train --import` starts a pipeline from such a file with fresh
// optimizer state: its parameters come back bit-identical, and a file that
// is not the model's is refused naming the tensor. (PyTorch's loss from an
// exported file: tests/ir/torch_parity.py.)
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "controller/checkpoint.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/safetensors.h"
#include "ir/state_source.h"
#include "tests/testing/temporary_directory.h"
#include "tests/tools/cli_process.h"

namespace tandem::cli {
namespace {

using ::testing::HasSubstr;

const std::vector<std::string> kLlama = {"--model", "llama", "--layers", "2", "--dim", "32", "--heads", "4",
                                         "--kv-heads", "2", "--seq", "16", "--batch", "2", "--microbatches", "2",
                                         "--actors", "2", "--eval-batches", "0"};

std::vector<std::string> Llama(std::vector<std::string> more) {
  std::vector<std::string> args = kLlama;
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

// The tensors of the safetensors file at `path`, by name.
ir::TensorMap ReadAll(const std::string& path) {
  absl::StatusOr<std::vector<ir::SafetensorsEntry>> entries = ir::IndexSafetensors(path);
  EXPECT_TRUE(entries.ok()) << entries.status();
  ir::TensorMap tensors;
  for (const ir::SafetensorsEntry& entry : entries.value_or(std::vector<ir::SafetensorsEntry>{})) {
    absl::StatusOr<ir::HostTensor> tensor =
        ir::MaterializeState(entry.name, {entry.type, ir::StateFileSlice{path, entry.offset}});
    EXPECT_TRUE(tensor.ok()) << tensor.status();
    tensors[entry.name] = *std::move(tensor);
  }
  return tensors;
}

int Export(const std::string& checkpoint, const std::string& out, std::string& output) {
  CliProcess command({"export", "--checkpoint", checkpoint, "--format", "safetensors", "--out", out});
  const int code = ExitCode(command);
  output = command.out() + command.err();
  return code;
}

TEST(ExportImport, ACheckpointsParametersRoundTripBitForBitThroughSafetensors) {
  test::TemporaryDirectory dir("tandem-export-test");
  std::string out, err;
  ASSERT_EQ(RunTrain(Llama({"--steps", "2", "--checkpoint-dir", dir.Path("run")}), out, err), 0) << out << err;

  // Export: every parameter, no optimizer state, the checkpoint's bits.
  const std::string exported = dir.Path("model.safetensors");
  std::string said;
  ASSERT_EQ(Export(dir.Path("run"), exported, said), 0) << said;
  EXPECT_THAT(said, HasSubstr("parameters"));
  EXPECT_THAT(said, HasSubstr("after step 2"));
  absl::StatusOr<controller::LoadedCheckpoint> checkpoint = controller::LoadCheckpoint(dir.Path("run"));
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  const ir::TensorMap tensors = ReadAll(exported);
  ASSERT_EQ(tensors.size(), checkpoint->parameters.size());
  EXPECT_TRUE(tensors.contains("model.layers.1.self_attn.k_proj.weight"));
  EXPECT_FALSE(tensors.contains("adam.m.model.norm.weight"));
  for (const std::string& name : checkpoint->parameters) {
    absl::StatusOr<ir::HostTensor> saved = ir::MaterializeState(name, checkpoint->state.at(name));
    ASSERT_TRUE(saved.ok()) << saved.status();
    ASSERT_TRUE(tensors.contains(name)) << name;
    EXPECT_TRUE(tensors.at(name).BitwiseEquals(*saved)) << name;
  }

  // Import into a pipeline, checked against the reference started from the
  // same file; then a step that cannot move an f32 weight (SGD at lr 1e-30)
  // leaves the imported parameters, which export back bit-identical.
  ASSERT_EQ(RunTrain(Llama({"--steps", "1", "--import", exported, "--verify"}), out, err), 0) << out << err;
  EXPECT_THAT(out, HasSubstr("importing the parameters of " + exported));
  EXPECT_THAT(out, HasSubstr("bit-identical to the reference"));
  ASSERT_EQ(RunTrain(Llama({"--steps", "1", "--import", exported, "--optimizer", "sgd", "--lr", "1e-30",
                            "--checkpoint-dir", dir.Path("imported")}),
                     out, err),
            0)
      << out << err;
  const std::string again = dir.Path("again.safetensors");
  ASSERT_EQ(Export(dir.Path("imported"), again, said), 0) << said;
  const ir::TensorMap back = ReadAll(again);
  ASSERT_EQ(back.size(), tensors.size());
  for (const auto& [name, tensor] : tensors) EXPECT_TRUE(back.at(name).BitwiseEquals(tensor)) << name;
}

TEST(ExportImport, AFileOfAnotherModelOrShapeIsRefusedNamingTheTensor) {
  test::TemporaryDirectory dir("tandem-import-test");
  std::string out, err;
  ASSERT_EQ(RunTrain({"--model", "gpt", "--layers", "2", "--actors", "2", "--microbatches", "2", "--steps", "1",
                      "--eval-batches", "0", "--checkpoint-dir", dir.Path("gpt")},
                     out, err),
            0)
      << out << err;
  const std::string gpt = dir.Path("gpt.safetensors");
  std::string said;
  ASSERT_EQ(Export(dir.Path("gpt"), gpt, said), 0) << said;
  EXPECT_NE(RunTrain(Llama({"--steps", "1", "--import", gpt}), out, err), 0);
  EXPECT_THAT(err, HasSubstr("which is no parameter of llama"));
  EXPECT_NE(RunTrain(Llama({"--steps", "1", "--import", gpt, "--resume", dir.Path("gpt")}), out, err), 0);
  EXPECT_THAT(err, HasSubstr("excludes"));
  EXPECT_NE(Export(dir.Path("nothing-here"), dir.Path("x.safetensors"), said), 0);
  EXPECT_THAT(said, HasSubstr("no checkpoint at"));
}

}  // namespace
}  // namespace tandem::cli
