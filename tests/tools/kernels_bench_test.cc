// `tandem bench kernels`: every node of the step is one run of one listed
// kernel (the test traces the same step and counts), a kernel's flops and
// bytes are its cost rule's at its shapes, the rows are sorted by time per
// step, and the emulated GPU is refused.
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "examples/example_job.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/graph.h"
#include "nlohmann/json.hpp"
#include "tests/tools/cli_process.h"

namespace tandem::cli {
namespace {

using ::testing::HasSubstr;

const std::vector<std::string> kTinyGpt = {"--model", "gpt",     "--dim",   "32", "--layers",       "2",
                                           "--heads", "2",       "--seq",   "8",  "--batch",        "2",
                                           "--microbatches", "4"};

CliRun Bench(std::vector<std::string> model, const std::vector<std::string>& args) {
  std::vector<std::string> command = {"bench", "kernels", "--repeats", "1", "--threads", "1"};
  command.insert(command.end(), model.begin(), model.end());
  command.insert(command.end(), args.begin(), args.end());
  return RunCli(command);
}

// The options of a tiny model: d=32, seq 8, batch 2, as the command lines
// here give them.
examples::ExampleJobOptions TinyOptions(const std::string& model, int64_t layers, int64_t heads,
                                        int32_t microbatches) {
  examples::ExampleJobOptions options;
  options.model = model;
  options.dim = 32;
  options.layers = layers;
  options.heads = heads;
  options.seq = 8;
  options.batch = 2;
  options.microbatches = microbatches;
  return options;
}

nlohmann::json Json(const CliRun& run) {
  nlohmann::json json = nlohmann::json::parse(run.out, nullptr, /*allow_exceptions=*/false);
  EXPECT_TRUE(json.is_object()) << run.out << run.err;
  return json;
}

int64_t NodesBut(const ir::Graph& graph) {
  int64_t n = 0;
  for (const ir::Node& node : graph.nodes()) n += node.op == ir::OpKind::kInput ? 0 : 1;
  return n;
}

// Every node of `job`'s step as the reference runs it: the microbatch graph
// per microbatch, an accumulation per gradient after the first, the norm
// and the update once.
int64_t NodesPerStep(const examples::ExampleJob& job) {
  const int64_t microbatches = job.step.num_microbatches * job.step.num_replicas;
  return microbatches * NodesBut(job.step.microbatch) +
         (microbatches - 1) * static_cast<int64_t>(job.step.accumulators.size()) + NodesBut(job.step.norm) +
         NodesBut(job.step.update);
}

void ExpectEveryNodeCountedOnce(const nlohmann::json& json, const examples::ExampleJob& job) {
  const int64_t expected = NodesPerStep(job);
  EXPECT_EQ(json["nodes_per_step"].get<int64_t>(), expected);
  int64_t counted = 0;
  double shares = 0;
  double previous = 1e300;
  std::set<std::string> seen;
  for (const nlohmann::json& kernel : json["kernels"]) {
    counted += kernel["count"].get<int64_t>();
    shares += kernel["share"].get<double>();
    EXPECT_GT(kernel["ms"].get<double>(), 0.0) << kernel.dump();
    EXPECT_LE(kernel["step_ms"].get<double>(), previous) << "not sorted by time per step: " << kernel.dump();
    previous = kernel["step_ms"].get<double>();
    EXPECT_TRUE(seen.insert(kernel["op"].get<std::string>() + " " + kernel["signature"].get<std::string>()).second)
        << "listed twice: " << kernel.dump();
  }
  EXPECT_EQ(counted, expected);
  EXPECT_NEAR(shares, 1.0, 1e-9);
}

TEST(KernelsBench, EveryNodeOfTheGptStepIsOneRunOfOneListedKernel) {
  CliRun run = Bench(kTinyGpt, {"--json"});
  ASSERT_EQ(run.code, 0) << run.err;
  const nlohmann::json json = Json(run);
  absl::StatusOr<examples::ExampleJob> job = examples::MakeExampleJob(TinyOptions("gpt", 2, 2, 4));
  ASSERT_TRUE(job.ok()) << job.status();
  ExpectEveryNodeCountedOnce(json, *job);
  EXPECT_EQ(json["device"], "cpu");
  EXPECT_TRUE(json["peak"].is_null());
  bool accumulated = false;
  for (const nlohmann::json& kernel : json["kernels"]) {
    EXPECT_TRUE(kernel["cpu_ms"].is_null());
    accumulated = accumulated || kernel["where"].get<std::string>().find('A') != std::string::npos;
  }
  EXPECT_TRUE(accumulated) << "4 microbatches accumulate their gradients";
}

TEST(KernelsBench, TheLlamaStepWithItsNormGraphIsCountedToo) {
  const std::vector<std::string> llama = {"--model", "llama", "--dim",   "32", "--layers",       "1", "--heads",
                                          "4",       "--kv-heads", "2",  "--seq",   "8",  "--batch", "2",
                                          "--microbatches", "2", "--clip-grad-norm", "1"};
  CliRun run = Bench(llama, {"--json"});
  ASSERT_EQ(run.code, 0) << run.err;
  examples::ExampleJobOptions options = TinyOptions("llama", 1, 4, 2);
  options.kv_heads = 2;
  options.clip_grad_norm = 1.0;
  absl::StatusOr<examples::ExampleJob> job = examples::MakeExampleJob(options);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_GT(NodesBut(job->step.norm), 0) << "clipping by the global norm has a norm graph";
  ExpectEveryNodeCountedOnce(Json(run), *job);
}

// The table's rate: FLOP/s for a matmul and for fused attention (whose
// products never leave the chip), bytes a second for the others. Every row
// shown (--top): which ones lead depends on the timings.
TEST(KernelsBench, MatmulsAndAttentionAreRatedInFlopsTheOthersInBytes) {
  CliRun run = Bench(kTinyGpt, {"--top", "1000"});
  ASSERT_EQ(run.code, 0) << run.err;
  int rows = 0;
  for (absl::string_view line : absl::StrSplit(run.out, '\n')) {
    const bool flops = absl::StrContains(line, "FLOP/s");
    if (!flops && !absl::StrContains(line, "B/s")) continue;  // not a kernel's row
    const bool products = absl::StrContains(line, " matmul ") || absl::StrContains(line, " attention {") ||
                          absl::StrContains(line, " attention_grad {");
    EXPECT_EQ(flops, products) << line;
    rows += products ? 1 : 0;
  }
  EXPECT_GE(rows, 3) << run.out;
}

TEST(KernelsBench, AKernelsFlopsAndBytesAreItsCostRulesAtItsShapes) {
  CliRun run = Bench(kTinyGpt, {"--json"});
  ASSERT_EQ(run.code, 0) << run.err;
  const nlohmann::json json = Json(run);
  bool found = false;
  for (const nlohmann::json& kernel : json["kernels"]) {
    // The MLP's first projection: [2,8,32] x [32,128], 2 * 16 * 128 * 32 flops.
    if (kernel["op"] == "matmul" && kernel["signature"] == "f32[2,8,32], f32[32,128] -> f32[2,8,128]") {
      found = true;
      EXPECT_EQ(kernel["flops"].get<double>(), 2.0 * 16 * 128 * 32);
      EXPECT_EQ(kernel["bytes"].get<double>(), 4.0 * (16 * 32 + 32 * 128 + 16 * 128));
      EXPECT_EQ(kernel["count"].get<int64_t>(), 2 * 4) << "2 layers, 4 microbatches";
      EXPECT_EQ(kernel["where"], "F");
      EXPECT_NEAR(kernel["flops_per_second"].get<double>(), 2.0 * 16 * 128 * 32 / (kernel["ms"].get<double>() / 1e3),
                  1.0);
    }
    if (kernel["op"] == "gelu") {
      EXPECT_EQ(kernel["bytes"].get<double>(), 2.0 * 4 * 2 * 8 * 128) << "read once, written once";
      EXPECT_GT(kernel["transcendentals"].get<double>(), 0.0) << "a tanh per element";
    }
  }
  EXPECT_TRUE(found) << json.dump(1);
}

TEST(KernelsBench, TheTableShowsTheSlowestKernelsFirstAndCountsTheRest) {
  CliRun run = Bench(kTinyGpt, {"--top", "5"});
  ASSERT_EQ(run.code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("every kernel of one training step, each alone at the model's shapes, on cpu"));
  EXPECT_THAT(run.out, HasSubstr("ms/step"));
  EXPECT_THAT(run.out, HasSubstr("sum of the kernels' times per step:"));
  EXPECT_THAT(run.out, ::testing::ContainsRegex("\\.\\.\\. [0-9]+ more kernels, [0-9.]+% of the sum"));
}

TEST(KernelsBench, TheEmulatedGpuIsRefusedNamingWhatToTimeInstead) {
  CliRun run = Bench(kTinyGpt, {"--device", "fake-cuda"});
  EXPECT_EQ(run.code, 2);
  EXPECT_THAT(run.err, HasSubstr("the emulated GPU runs the reference kernels; time them with --device cpu"));
}

TEST(KernelsBench, AModelThatCannotBeBuiltIsAUsageError) {
  CliRun run = Bench({"--model", "gpt", "--dim", "30", "--heads", "4"}, {});
  EXPECT_EQ(run.code, 2);
  EXPECT_THAT(run.err, HasSubstr("tandem bench kernels: "));
}

}  // namespace
}  // namespace tandem::cli
