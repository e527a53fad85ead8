// Bad options to the example jobs behind `tandem train` and `tandem ir`:
// every size is refused past its bound before anything is traced, a model of
// any size within them is traced without allocating its state (each case
// runs in a child capped at 1 GiB of address space), learning rates must be
// numbers above 0, and a binary --data file is refused naming the byte.
#include "examples/example_job.h"

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "controller/memory_fit.h"
#include "examples/data/char_corpus.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/stage_graph.h"
#include "tests/testing/memory_limit.h"

namespace tandem::examples {
namespace {

using ::testing::HasSubstr;
using test::ExpectWithinMemory;

ExampleJobOptions Mlp() {
  ExampleJobOptions options;
  options.model = "mlp";
  return options;
}

bool Refused(const ExampleJobOptions& options, const std::string& expected) {
  absl::StatusOr<ExampleJob> job = MakeExampleJob(options);
  if (!job.ok() && job.status().code() == absl::StatusCode::kInvalidArgument &&
      absl::StrContains(job.status().message(), expected)) {
    return true;
  }
  fprintf(stderr, "expected InvalidArgument with '%s', got: %s\n", expected.c_str(),
          job.ok() ? "a job" : job.status().ToString().c_str());
  return false;
}

TEST(ExampleJobLimits, EachSizeIsRefusedPastItsBoundBeforeTracing) {
  const absl::Time start = absl::Now();
  ExpectWithinMemory([] {
    ExampleJobOptions layers = Mlp();
    layers.layers = int64_t{4294967298};
    ExampleJobOptions dim = Mlp();
    dim.dim = 1000000;
    ExampleJobOptions heads;
    heads.heads = 100000;
    ExampleJobOptions seq;
    seq.seq = int64_t{1} << 40;
    ExampleJobOptions batch = Mlp();
    batch.batch = -3;
    ExampleJobOptions microbatches = Mlp();
    microbatches.microbatches = 100000000;
    ExampleJobOptions stages = Mlp();
    stages.stages = 10000;
    return Refused(layers, "layers 4294967298 is more than the 1024 an example model may have") &&
           Refused(dim, "dim 1000000 is more than the 65536 an example model may have") &&
           Refused(heads, "heads 100000 is more than the 1024") &&
           Refused(seq, "seq 1099511627776 is more than the 65536") && Refused(batch, "batch -3 must be at least 1") &&
           Refused(microbatches, "microbatches 100000000 is more than the 65536") &&
           Refused(stages, "stages 10000 is more than the 1024");
  });
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
}

// A model of any size is traced (compiling, simulating and planning need
// no more), without allocating its state: whether it fits is asked where it
// would be held (controller/memory_fit.h), and the answer for 48 TiB of
// state is no.
TEST(ExampleJobLimits, AModelOfAnySizeIsTracedWithoutAllocatingItsState) {
  ExpectWithinMemory([] {
    ExampleJobOptions wide = Mlp();
    wide.dim = 65536;  // 1024 layers of 65536 x 65536 f32 with Adam: 48 TiB
    wide.layers = 1024;
    absl::StatusOr<ExampleJob> job = MakeExampleJob(wide);
    if (!job.ok()) {
      fprintf(stderr, "the 48 TiB model was refused: %s\n", job.status().ToString().c_str());
      return false;
    }
    const absl::Status fits = controller::CheckWholeModelFits(
        job->step, {.name = "1 TiB", .free_bytes = int64_t{1} << 40}, controller::WholeModel::kParameters);
    if (fits.code() != absl::StatusCode::kResourceExhausted ||
        !absl::StrContains(fits.message(), "this process would hold the whole model's parameters: 16368.3 GiB")) {
      fprintf(stderr, "expected the parameters not to fit: %s\n", fits.ToString().c_str());
      return false;
    }
    ExampleJobOptions long_sequences;
    long_sequences.seq = 65536;  // attention scores of 8 x 4 x 65536 x 65536 f32: 512 GiB, traced all the same
    long_sequences.layers = 1;
    absl::StatusOr<ExampleJob> long_job = MakeExampleJob(long_sequences);
    if (!long_job.ok()) fprintf(stderr, "the long sequences were refused: %s\n", long_job.status().ToString().c_str());
    return long_job.ok();
  });
}

TEST(ExampleJobLimits, LearningRatesMustBeNumbersAboveZero) {
  for (double lr : {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(), 0.0, -0.5}) {
    ExampleJobOptions options = Mlp();
    options.lr = lr;
    absl::StatusOr<ExampleJob> job = MakeExampleJob(options);
    EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument) << lr;
    EXPECT_THAT(job.status().message(), HasSubstr("is not a learning rate: it must be a finite number above 0"));
  }
  ExampleJobOptions options = Mlp();
  options.lr = 0.5;
  EXPECT_TRUE(MakeExampleJob(options).ok());
}

class DataFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) / absl::StrCat("tandem-data-test-", getpid());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& contents) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << contents;
    return path;
  }
  std::filesystem::path dir_;
};

TEST_F(DataFile, ABinaryFileIsRefusedNamingTheFileAndTheByte) {
  std::string text(2000, 'a');
  text[1500] = '\0';
  const std::string nul = Write("nul.bin", text);
  absl::StatusOr<CharCorpus> corpus = CharCorpus::Load(nul);
  EXPECT_EQ(corpus.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(corpus.status().message(), HasSubstr(nul + ": byte 1500 is a NUL byte: the data must be a UTF-8 text"));
  text[1500] = '\xff';
  const std::string latin = Write("ff.bin", text);
  EXPECT_THAT(CharCorpus::Load(latin).status().message(), HasSubstr(latin + ": byte 1500 is 0xff, not UTF-8"));
  ExampleJobOptions options;
  options.data = nul;
  EXPECT_THAT(MakeExampleJob(options).status().message(), HasSubstr("byte 1500 is a NUL byte"));
}

TEST_F(DataFile, MalformedUtf8SequencesAreFoundWhereTheyStart) {
  const std::string good(1100, 'a');
  // A lead byte without its continuation, an overlong '/', a surrogate.
  for (const std::string& bad : {std::string("\xc3"
                                             "a"),
                                 std::string("\xc0\xaf"), std::string("\xed\xa0\x80")}) {
    const std::string path = Write("bad.txt", good + bad);
    EXPECT_THAT(CharCorpus::Load(path).status().message(), HasSubstr(absl::StrCat(path, ": byte 1100 is 0x"))) << bad;
  }
  const std::string fine = Write("fine.txt", good + "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x99\x82");
  EXPECT_TRUE(CharCorpus::Load(fine).ok());
}

TEST_F(DataFile, ABinaryFileInADataDirectoryIsNamed) {
  Write("a.txt", std::string(2000, 'a'));
  const std::string binary = Write("b.bin", std::string("\x7f"
                                                        "ELF\x02\x01\x01",
                                                        7) +
                                                std::string(10, '\0'));
  absl::StatusOr<CharCorpus> corpus = CharCorpus::Load(dir_.string());
  EXPECT_THAT(corpus.status().message(), HasSubstr(binary + ": byte 7 is a NUL byte"));
}

}  // namespace
}  // namespace tandem::examples

namespace tandem::examples {
namespace {

// The stage of the forward node reading parameter `name`.
int32_t StageOfParameter(const ir::TrainStep& step, const std::string& name) {
  const ir::Graph& graph = step.microbatch;
  for (ir::ValueId id = 0; id < graph.size(); ++id) {
    const ir::Node& node = graph.node(id);
    if (node.op == ir::OpKind::kInput && node.attributes.GetString("name") == name) return node.stage;
  }
  return -1;
}

TEST(ExampleJobStages, APlannersLayerAssignmentPlacesEachBlockOnItsStage) {
  ExampleJobOptions options;
  options.model = "gpt";
  options.layers = 4;
  options.stages = 2;
  options.layer_stages = {0, 0, 0, 1};
  absl::StatusOr<ExampleJob> job = MakeExampleJob(options);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->step.num_stages, 2);
  EXPECT_EQ(StageOfParameter(job->step, "h2.attn.qkv.w"), 0);
  EXPECT_EQ(StageOfParameter(job->step, "h3.attn.qkv.w"), 1);
  EXPECT_EQ(StageOfParameter(job->step, "head.w"), 1);
  // The even split puts h2 on stage 1.
  options.layer_stages.clear();
  absl::StatusOr<ExampleJob> even = MakeExampleJob(options);
  ASSERT_TRUE(even.ok());
  EXPECT_EQ(StageOfParameter(even->step, "h2.attn.qkv.w"), 1);
}

TEST(ExampleJobStages, AnAssignmentThatIsNotContiguousOrMissesAStageIsRefused) {
  ExampleJobOptions options;
  options.model = "mlp";
  options.layers = 4;
  options.stages = 2;
  options.layer_stages = {0, 1, 0, 1};
  EXPECT_THAT(MakeExampleJob(options).status().message(), HasSubstr("mlp: layer 2 is assigned to stage 0"));
  options.layer_stages = {0, 0, 0, 0};
  EXPECT_THAT(MakeExampleJob(options).status().message(), HasSubstr("fills 1 of 2 stages"));
  options.layer_stages = {0, 1};
  EXPECT_THAT(MakeExampleJob(options).status().message(), HasSubstr("names 2 layers, but the model has 4"));
  options.layer_stages = {1, 1, 1, 1};
  EXPECT_THAT(MakeExampleJob(options).status().message(), HasSubstr("layer 0 is assigned to stage 1"));
}

TEST(ExampleJobStages, ATwoTowersLayerAssignmentWithTowersOnStagesOfTheirOwnTracesBranches) {
  ExampleJobOptions options;
  options.model = "two-tower";
  options.towers = {2, 2};
  options.layers = 2;  // the head's
  options.stages = 4;
  // Left tower on stage 0, right on 1 and 2, head on 3.
  options.layer_stages = {0, 0, 1, 2, 3, 3};
  absl::StatusOr<ExampleJob> job = MakeExampleJob(options);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(ir::FormatStageEdges(job->step.stage_graph().Edges()), "0->3 1->2 2->3");
  EXPECT_EQ(StageOfParameter(job->step, "right.fc1.w"), 2);
  EXPECT_EQ(StageOfParameter(job->step, "head.fc1.w"), 3);
  // Every layer a stage, as the planner profiles it.
  options.stages = 6;
  options.layer_stages = {0, 1, 2, 3, 4, 5};
  job = MakeExampleJob(options);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(ir::FormatStageEdges(job->step.stage_graph().Edges()), "0->1 1->4 2->3 3->4 4->5");
}

TEST(ExampleJobStages, ATwoTowerAssignmentWhereTheTowersShareAStageIsAChain) {
  ExampleJobOptions options;
  options.model = "two-tower";
  options.towers = {2, 2};
  options.layers = 2;
  options.stages = 3;
  // The left tower's last layer shares stage 1 with the right tower.
  options.layer_stages = {0, 1, 1, 1, 2, 2};
  absl::StatusOr<ExampleJob> job = MakeExampleJob(options);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_TRUE(job->step.stage_graph().IsChain());
  EXPECT_EQ(StageOfParameter(job->step, "left.fc1.w"), 1);
  EXPECT_EQ(StageOfParameter(job->step, "right.fc0.w"), 1);
  // The head sharing the right tower's last stage: a chain too.
  options.stages = 2;
  options.layer_stages = {0, 0, 1, 1, 1, 1};
  job = MakeExampleJob(options);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_TRUE(job->step.stage_graph().IsChain());
  EXPECT_EQ(StageOfParameter(job->step, "right.fc0.w"), 1);
  options.layer_stages = {0, 0, 1, 1};
  EXPECT_THAT(MakeExampleJob(options).status().message(),
              HasSubstr("two-tower: the stage assignment names 4 layers, but the model has 6"));
}

TEST(ExampleJobStages, TheVocabularyWidensTheHeadButNeverBelowTheCorpus) {
  ExampleJobOptions options;
  options.model = "gpt";
  options.vocab = 1000;
  absl::StatusOr<ExampleJob> job = MakeExampleJob(options);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_THAT(job->description, HasSubstr("vocab 1000"));
  options.vocab = 3;
  EXPECT_THAT(MakeExampleJob(options).status().message(), HasSubstr("vocab 3 is smaller than the"));
}

}  // namespace
}  // namespace tandem::examples

namespace tandem::examples {
namespace {

ExampleJobOptions Llama() {
  ExampleJobOptions options;
  options.model = "llama";
  options.layers = 2;
  options.dim = 32;
  options.heads = 4;
  return options;
}

TEST(LlamaJob, KvHeadsMustDivideTheHeadsAndApplyOnlyToLlama) {
  ExampleJobOptions three = Llama();
  three.kv_heads = 3;
  EXPECT_TRUE(Refused(three, "llama: 3 kv heads do not divide 4 heads"));
  ExampleJobOptions gpt;
  gpt.kv_heads = 2;
  EXPECT_TRUE(Refused(gpt, "kv heads apply to the llama model, not gpt"));
  ExampleJobOptions odd = Llama();
  odd.heads = 32;  // a head 1 wide: no rotary pair
  odd.kv_heads = 32;
  EXPECT_TRUE(Refused(odd, "a head's width 1 (model_dim / num_heads) must be even"));
}

TEST(LlamaJob, GroupedQueryAttentionSharesEachKvProjectionAmongItsHeads) {
  ExampleJobOptions options = Llama();
  options.kv_heads = 1;
  absl::StatusOr<ExampleJob> job = MakeExampleJob(options);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_THAT(job->description, HasSubstr("4 heads (1 kv), mlp 96"));
  const ir::StateSpec* k = job->step.FindState("model.layers.1.self_attn.k_proj.weight");
  const ir::StateSpec* q = job->step.FindState("model.layers.1.self_attn.q_proj.weight");
  ASSERT_NE(k, nullptr);
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->type.shape, (ir::Shape{32, 32}));  // [out, in], as nn.Linear
  EXPECT_EQ(k->type.shape, (ir::Shape{8, 32}));   // one head of width 8
  EXPECT_NE(job->step.FindState("lm_head.weight"), nullptr);
  options.tied = true;
  job = MakeExampleJob(options);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->step.FindState("lm_head.weight"), nullptr);
}

}  // namespace
}  // namespace tandem::examples

namespace tandem::examples {
namespace {

// GPT-2's width and vocabulary on 4 layers: the head and the loss cost
// about as much as 5 blocks, so the last stage of 2 gets 1 layer.
TEST(CostBalancedLayerStages, AWideHeadLeavesTheLastStageFewerLayers) {
  ExampleJobOptions options;
  options.model = "gpt";
  options.preset = "gpt2-small";
  options.layers = 4;
  options.seq = 64;
  options.batch = 2;
  absl::StatusOr<std::vector<int32_t>> stages = CostBalancedLayerStages(options, 2);
  ASSERT_TRUE(stages.ok()) << stages.status();
  EXPECT_THAT(*stages, ::testing::ElementsAre(0, 0, 0, 1));
}

TEST(CostBalancedLayerStages, LayersOfEqualCostWithASmallHeadSplitEvenly) {
  ExampleJobOptions options;
  options.model = "llama";
  options.layers = 4;
  options.dim = 64;
  options.heads = 4;
  options.vocab = 86;
  absl::StatusOr<std::vector<int32_t>> stages = CostBalancedLayerStages(options, 4);
  ASSERT_TRUE(stages.ok()) << stages.status();
  EXPECT_THAT(*stages, ::testing::ElementsAre(0, 1, 2, 3));
  stages = CostBalancedLayerStages(options, 2);
  ASSERT_TRUE(stages.ok()) << stages.status();
  EXPECT_THAT(*stages, ::testing::ElementsAre(0, 0, 1, 1));
}

TEST(CostBalancedLayerStages, FewerLayersThanStagesOrAnotherModelIsRefused) {
  ExampleJobOptions options;
  options.model = "gpt";
  options.layers = 2;
  EXPECT_THAT(CostBalancedLayerStages(options, 3).status().message(),
              ::testing::HasSubstr("2 layers cannot fill 3 stages"));
  options.model = "mlp";
  EXPECT_THAT(CostBalancedLayerStages(options, 2).status().message(),
              ::testing::HasSubstr("a cost-balanced split is for gpt and llama, not mlp"));
}

}  // namespace
}  // namespace tandem::examples
