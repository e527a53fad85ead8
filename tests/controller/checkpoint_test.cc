// Checkpoints against damaged and mixed-up files: a manifest protects
// itself with a checksum and must name its own directory's step, actor
// files copied in from another checkpoint are refused naming the file, a
// resume that falls back to an older checkpoint says why, and a checkpoint
// root that cannot be written is found out before training starts.
#include "controller/checkpoint.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "controller/pipeline.h"
#include "controller/session.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/state_file.h"
#include "schedules/generators.h"
#include "tests/controller/parity_harness.h"

namespace tandem::controller {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::SizeIs;

std::string Read(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}
void Write(const fs::path& path, const std::string& contents) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << contents;
}

// `text` (a manifest without its checksum line) with a correct one added,
// as a tool that rewrites manifests would.
std::string Resealed(const std::string& text) {
  std::string body = text.substr(0, text.rfind("checksum\t"));
  return absl::StrCat(body, "checksum\t", ir::StateChecksum(body), "\n");
}

// A two-actor MLP trained on actor threads, checkpointed after steps 1 and 2
// under a fresh root.
class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::path(::testing::TempDir()) / absl::StrCat("tandem-checkpoint-test-", getpid());
    fs::remove_all(root_);
    absl::StatusOr<ir::TrainStep> step = testing_harness::TinyMlp(2, 2);
    ASSERT_TRUE(step.ok()) << step.status();
    step_ = *std::move(step);
    absl::StatusOr<schedules::Schedule> schedule = schedules::Generate("1f1b", {.actors = 2, .microbatches = 2});
    ASSERT_TRUE(schedule.ok());
    absl::StatusOr<std::unique_ptr<Pipeline>> pipeline =
        Pipeline::Create(step_, *schedule, ir::SeedSources(step_), testing_harness::ThreadsLauncher());
    ASSERT_TRUE(pipeline.ok()) << pipeline.status();
    for (int64_t s = 1; s <= 2; ++s) {
      ASSERT_TRUE((*pipeline)->Step(testing_harness::Batches(step_, s)).ok());
      absl::StatusOr<std::string> saved = SaveCheckpoint(**pipeline, root_.string());
      ASSERT_TRUE(saved.ok()) << saved.status();
    }
    first_ = root_ / "step-00000001";
    second_ = root_ / "step-00000002";
  }
  void TearDown() override { fs::remove_all(root_); }

  fs::path root_, first_, second_;
  ir::TrainStep step_;
};

TEST_F(CheckpointTest, TheManifestEndsInAChecksumOfEverythingBeforeIt) {
  const std::string text = Read(second_ / "MANIFEST");
  EXPECT_TRUE(absl::StartsWith(text, "tandem-checkpoint\t3\nmodel\tmlp\nstep\t2\n"));
  EXPECT_EQ(Resealed(text), text);
  absl::StatusOr<CheckpointManifest> manifest = ParseCheckpointManifest(text, "MANIFEST");
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  EXPECT_EQ(manifest->step, 2);
  EXPECT_EQ(manifest->actors, 2);
  EXPECT_THAT(manifest->files, SizeIs(2));
  absl::StatusOr<LoadedCheckpoint> loaded = LoadCheckpoint(root_.string(), step_);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->step, 2);
  EXPECT_TRUE(loaded->skipped.empty());
}

// Version 3 lists which state is parameters (what `tandem export` writes);
// version 2, which did not, still resumes.
TEST_F(CheckpointTest, TheManifestListsTheParametersAndAVersionTwoOneStillLoads) {
  std::set<std::string> parameters;
  for (const ir::StateSpec& spec : step_.state) {
    if (spec.role == ir::StateRole::kParameter) parameters.insert(spec.name);
  }
  ASSERT_FALSE(parameters.empty());
  ASSERT_LT(parameters.size(), step_.state.size()) << "the MLP has optimizer state too";
  absl::StatusOr<LoadedCheckpoint> loaded = LoadCheckpoint(second_.string());  // no job: as export loads it
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE(loaded->parameters_known);
  EXPECT_EQ(loaded->parameters, parameters);
  EXPECT_EQ(loaded->model, "mlp");

  std::string text = Read(second_ / "MANIFEST");
  std::string old;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    if (absl::StartsWith(line, "parameter\t")) continue;
    absl::StrAppend(&old, line, "\n");
  }
  old.replace(old.find("\t3\n"), 3, "\t2\n");
  Write(second_ / "MANIFEST", Resealed(old));
  loaded = LoadCheckpoint(second_.string(), step_);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_FALSE(loaded->parameters_known);
  // A version-2 manifest may not list parameters, and version 3 only state.
  EXPECT_EQ(ParseCheckpointManifest(Resealed(absl::StrCat(old.substr(0, old.rfind("checksum\t")), "parameter\tx\nchecksum\t")),
                                    "M")
                .status()
                .code(),
            absl::StatusCode::kDataLoss);
}

TEST_F(CheckpointTest, OneFlippedBitInTheManifestFailsTheLoad) {
  // "step\t2" -> "step\t0": 0x32 -> 0x30 is one bit. Before the checksum this
  // resumed as if no step had run, on step-2 weights.
  const std::string text = Read(second_ / "MANIFEST");
  std::string flipped = text;
  flipped[flipped.find("step\t2") + 5] ^= 0x02;
  ASSERT_NE(flipped.find("step\t0"), std::string::npos);
  Write(second_ / "MANIFEST", flipped);
  absl::StatusOr<LoadedCheckpoint> loaded = LoadCheckpoint(second_.string(), step_);
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(loaded.status().message(),
              AllOf(HasSubstr("MANIFEST"), HasSubstr("does not match the manifest's contents")));
  // Every single-bit flip anywhere in the manifest is caught.
  for (size_t byte = 0; byte < text.size(); byte += 7) {
    for (int bit = 0; bit < 8; bit += 3) {
      std::string damaged = text;
      damaged[byte] ^= static_cast<char>(1 << bit);
      EXPECT_FALSE(ParseCheckpointManifest(damaged, "MANIFEST").ok()) << "byte " << byte << " bit " << bit;
    }
  }
}

TEST_F(CheckpointTest, AManifestMustNameItsOwnDirectorysStep) {
  // Resealed, so only the step check can catch it.
  Write(second_ / "MANIFEST", Resealed(absl::StrReplaceAll(Read(second_ / "MANIFEST"), {{"step\t2\n", "step\t0\n"}})));
  absl::StatusOr<LoadedCheckpoint> loaded = LoadCheckpoint(second_.string(), step_);
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(loaded.status().message(), HasSubstr("says step 0 but its directory is step-00000002"));
}

TEST_F(CheckpointTest, AnActorFileFromAnotherCheckpointIsRefusedNamingIt) {
  fs::copy_file(first_ / "actor-1.state", second_ / "actor-1.state", fs::copy_options::overwrite_existing);
  absl::StatusOr<LoadedCheckpoint> loaded = LoadCheckpoint(second_.string(), step_);
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(loaded.status().message(),
              AllOf(HasSubstr((second_ / "actor-1.state").string() + " has CRC-32 "),
                    HasSubstr("it does not belong to this checkpoint, changed or copied from another one")));
}

TEST_F(CheckpointTest, MixingFilesAndTheirManifestRecordsIsRefused) {
  // How mixing got through before: the actor file and its `file` record
  // copied together (the per-file CRCs lived in a manifest nothing
  // checked), giving a checkpoint of step-2 actor 0 and step-1 actor 1.
  fs::copy_file(first_ / "actor-1.state", second_ / "actor-1.state", fs::copy_options::overwrite_existing);
  std::string record;
  for (absl::string_view line : absl::StrSplit(Read(first_ / "MANIFEST"), '\n')) {
    if (absl::StartsWith(line, "file\tactor-1.state")) record = std::string(line);
  }
  std::string mixed;
  for (absl::string_view line : absl::StrSplit(Read(second_ / "MANIFEST"), '\n', absl::SkipEmpty())) {
    absl::StrAppend(&mixed, absl::StartsWith(line, "file\tactor-1.state") ? record : std::string(line), "\n");
  }
  Write(second_ / "MANIFEST", mixed);
  absl::StatusOr<LoadedCheckpoint> loaded = LoadCheckpoint(second_.string(), step_);
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(loaded.status().message(), HasSubstr("the manifest was changed"));
}

TEST_F(CheckpointTest, AFallbackToAnOlderCheckpointSaysWhichWasSkippedAndWhy) {
  std::string state = Read(second_ / "actor-0.state");
  state[state.size() / 2] ^= 0x40;
  Write(second_ / "actor-0.state", state);
  fs::create_directory(root_ / "step-00000003");  // a directory without a MANIFEST
  absl::StatusOr<LoadedCheckpoint> loaded = LoadCheckpoint(root_.string(), step_);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->step, 1);
  ASSERT_THAT(loaded->skipped, SizeIs(2));
  EXPECT_EQ(loaded->skipped[0].path, (root_ / "step-00000003").string());
  EXPECT_THAT(loaded->skipped[0].reason.message(), HasSubstr("has no MANIFEST"));
  EXPECT_EQ(loaded->skipped[1].path, second_.string());
  EXPECT_THAT(loaded->skipped[1].reason.message(),
              AllOf(HasSubstr("actor-0.state has CRC-32 "), HasSubstr("does not belong to this checkpoint")));
  // When none loads, the newest one's error, and how many more failed.
  Write(first_ / "MANIFEST", "tandem-checkpoint\t2\n");
  absl::StatusOr<LoadedCheckpoint> none = LoadCheckpoint(root_.string(), step_);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(none.status().message(), AllOf(HasSubstr("has no MANIFEST"), HasSubstr("the 2 older checkpoints")));
}

TEST_F(CheckpointTest, ACheckpointOfAnotherModelStopsTheFallback) {
  absl::StatusOr<ir::TrainStep> other = testing_harness::TinyGpt(2, 2);
  ASSERT_TRUE(other.ok());
  absl::StatusOr<LoadedCheckpoint> loaded = LoadCheckpoint(root_.string(), *other);
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(loaded.status().message(), HasSubstr("step-00000002 does not fit this job"));
}

TEST(CheckpointManifest, MalformedManifestsAreDataLossQuotingShortly) {
  auto error = [](const std::string& text) {
    absl::StatusOr<CheckpointManifest> manifest = ParseCheckpointManifest(text, "M");
    EXPECT_EQ(manifest.status().code(), absl::StatusCode::kDataLoss) << text.substr(0, 80);
    return std::string(manifest.status().message());
  };
  EXPECT_THAT(error(""), HasSubstr("M:1: not a Tandem checkpoint manifest"));
  EXPECT_THAT(error("tandem-checkpoint\t1\nmodel\tm\nstep\t1\nfile\ta\t1\tx\n"),
              HasSubstr("manifest version '1': this build reads versions 2 and 3"));
  EXPECT_THAT(error(Resealed("tandem-checkpoint\t3\nmodel\tm\nstep\t1\nparameter\tw\nfile\ta\t1\tx\nchecksum\t")),
              HasSubstr("parameter 'w' is no state listed before it"));
  EXPECT_THAT(error("tandem-checkpoint\t2\nmodel\tm\nstep\t1\n"),
              HasSubstr("the last line must be the manifest's checksum"));
  EXPECT_THAT(error(Resealed("tandem-checkpoint\t2\nmodel\tm\nstep\t1\nactors\t2\nfile\ta\t1\tx\nchecksum\t")),
              HasSubstr("lists 1 actor files for 2 actors"));
  EXPECT_THAT(error(Resealed("tandem-checkpoint\t2\nmodel\tm\nstep\t1\nfile\t../a\t1\tx\nchecksum\t")),
              HasSubstr("leaves the checkpoint"));
  const std::string long_record =
      Resealed(absl::StrCat("tandem-checkpoint\t2\n", std::string(1 << 20, 'r'), "\nchecksum\t"));
  EXPECT_LT(error(long_record).size(), 200u);
  EXPECT_LT(error(std::string(1 << 20, 'x')).size(), 200u);
}

// The actors record is optional: a manifest without one prints without one,
// instead of as "actors 0", which no parser accepts (a fuzz finding,
// tests/fuzz/regressions/checkpoint_manifest/no-actors-record.txt).
TEST(CheckpointManifest, AManifestWithoutAnActorsRecordPrintsAndParsesBack) {
  absl::StatusOr<CheckpointManifest> manifest = ParseCheckpointManifest(
      Resealed("tandem-checkpoint\t2\nmodel\tm\nstep\t1\nstate\tw\tf32[2]\nfile\ta\t1\tx\nchecksum\t"), "M");
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  EXPECT_EQ(manifest->actors, 0);
  const std::string printed = PrintCheckpointManifest(*manifest);
  EXPECT_THAT(printed, ::testing::Not(HasSubstr("actors")));
  absl::StatusOr<CheckpointManifest> again = ParseCheckpointManifest(printed, "M");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, *manifest);
}

TEST(PrepareCheckpointRoot, AnUnwritableRootIsFoundOutNamingThePathAndTheReason) {
  const fs::path file = fs::path(::testing::TempDir()) / absl::StrCat("tandem-not-a-directory-", getpid());
  Write(file, "x");
  const std::string root = (file / "checkpoints").string();
  const absl::Status status = PrepareCheckpointRoot(root);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr("cannot write checkpoints under " + root), HasSubstr("Not a directory")));
  // A session told its checkpoint root refuses to start, before any actor.
  SessionOptions options;
  options.checkpoint_root = root;
  options.launcher = [] { return testing_harness::ThreadsLauncher(); };
  absl::StatusOr<ir::TrainStep> step = testing_harness::TinyMlp(2, 2);
  ASSERT_TRUE(step.ok());
  absl::StatusOr<std::unique_ptr<Session>> session =
      Session::Start(*step, *schedules::Generate("1f1b", {.actors = 2, .microbatches = 2}), options);
  EXPECT_EQ(session.status().code(), absl::StatusCode::kFailedPrecondition);
  fs::remove(file);

  const fs::path fresh = fs::path(::testing::TempDir()) / absl::StrCat("tandem-fresh-root-", getpid()) / "a" / "b";
  EXPECT_TRUE(PrepareCheckpointRoot(fresh.string()).ok());
  EXPECT_TRUE(fs::is_directory(fresh));
  EXPECT_TRUE(fs::is_empty(fresh));
  fs::remove_all(fresh.parent_path().parent_path());
}

}  // namespace
}  // namespace tandem::controller
