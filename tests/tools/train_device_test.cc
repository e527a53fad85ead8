// `tandem train --device`: a device that is malformed or not there is a
// usage error before any actor starts; on a GPU (label gpu, skipped without
// one), pipelined runs with actors sharing the one GPU give the
// single-process GPU reference's bits for 1F1B and ZB-H1, and stay within
// 1e-4 of the CPU's losses.
#include <sys/wait.h>

#include <cmath>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/tools/cli_process.h"
#ifdef TANDEM_WITH_CUDA
#include "backends/cuda/cuda_runtime.h"
#endif

namespace tandem::cli {
namespace {

using ::testing::HasSubstr;

int GpuCount() {
#ifdef TANDEM_WITH_CUDA
  return cuda::ProbeDevices().count;
#else
  return 0;
#endif
}

// Runs `tandem train ARGS`.
CliRun Train(std::vector<std::string> args, absl::Duration timeout) {
  args.insert(args.begin(), "train");
  return RunCli(args, timeout);
}

const std::vector<std::string> kSmallGpt = {"--model", "gpt", "--microbatches", "4", "--steps", "2",
                                            "--eval-batches", "0"};

std::vector<std::string> With(std::vector<std::string> args, const std::vector<std::string>& more) {
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

TEST(TrainDevice, AMalformedDeviceIsAUsageError) {
  CliRun run = Train(With(kSmallGpt, {"--device", "tpu"}), absl::Seconds(30));
  EXPECT_EQ(run.code, 2) << run.err;
  EXPECT_THAT(run.err, HasSubstr("--device: unknown device 'tpu': expected cpu, cuda or cuda:N"));
}

TEST(TrainDevice, AGpuThatIsNotThereIsRefusedBeforeAnyActorStarts) {
  if (GpuCount() > 0) GTEST_SKIP() << "a CUDA device is visible";
  for (const std::string launcher : {"local", "threads", "reference"}) {
    CliRun run = Train(With(kSmallGpt, {"--device", "cuda", "--launcher", launcher}), absl::Seconds(30));
    EXPECT_EQ(run.code, 2) << launcher << ": " << run.err;
#ifdef TANDEM_WITH_CUDA
    EXPECT_THAT(run.err, HasSubstr("--device cuda: no CUDA device is visible (")) << launcher;
#else
    EXPECT_THAT(run.err, HasSubstr("no CUDA backend")) << launcher;
#endif
    EXPECT_THAT(run.err, ::testing::Not(HasSubstr("[actor"))) << launcher << ": an actor started";
  }
}

TEST(TrainDevice, AGpuOrdinalBeyondTheVisibleOnesIsRefused) {
  if (GpuCount() == 0) GTEST_SKIP() << "no CUDA device";
  CliRun run = Train(With(kSmallGpt, {"--device", "cuda:" + std::to_string(GpuCount())}), absl::Seconds(30));
  EXPECT_EQ(run.code, 2) << run.err;
  EXPECT_THAT(run.err, HasSubstr("CUDA device(s) visible"));
}

// Every microbatch loss of a --losses file ({"steps": [{"step": 1,
// "losses": [a, b, ...]}, ...]}), in order; empty (and a failure) when the
// file is not such JSON.
std::vector<double> ReadLosses(const std::string& path) {
  const std::string text = ReadFile(path);
  const nlohmann::json json = nlohmann::json::parse(text, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object() || !json.contains("steps") || !json["steps"].is_array()) {
    ADD_FAILURE() << path << " is not a losses file:\n" << text;
    return {};
  }
  std::vector<double> losses;
  for (const nlohmann::json& step : json["steps"]) {
    for (const nlohmann::json& loss : step.at("losses")) losses.push_back(loss.get<double>());
  }
  return losses;
}

class GpuParity : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(GpuParity, ActorsSharingOneGpuGiveTheGpuReferencesBits) {
  if (GpuCount() == 0) GTEST_SKIP() << "no CUDA device";
  const auto& [schedule, actors] = GetParam();
  const std::string tag = schedule + "-" + std::to_string(actors);
  const std::string gpu_losses = "/tmp/tandem-gpu-losses-" + tag;
  const std::string cpu_losses = "/tmp/tandem-cpu-losses-" + tag;
  const std::vector<std::string> job = With(kSmallGpt, {"--actors", std::to_string(actors), "--schedule", schedule});
  // All actors on GPU 0, as on a one-GPU machine.
  CliRun gpu = Train(With(job, {"--device", "cuda:0", "--verify", "--losses", gpu_losses}), absl::Minutes(5));
  ASSERT_EQ(gpu.code, 0) << gpu.out << gpu.err;
  EXPECT_THAT(gpu.out, HasSubstr("bit-identical to the reference"));
  CliRun cpu = Train(With(job, {"--device", "cpu", "--losses", cpu_losses}), absl::Minutes(5));
  ASSERT_EQ(cpu.code, 0) << cpu.err;
  const std::vector<double> on_gpu = ReadLosses(gpu_losses);
  const std::vector<double> on_cpu = ReadLosses(cpu_losses);
  ASSERT_EQ(on_gpu.size(), on_cpu.size());
  ASSERT_FALSE(on_gpu.empty());
  for (size_t i = 0; i < on_gpu.size(); ++i) {
    EXPECT_LE(std::abs(on_gpu[i] - on_cpu[i]), 1e-4 * std::abs(on_cpu[i]) + 1e-6) << "loss " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(SchedulesAndActors, GpuParity,
                         ::testing::Combine(::testing::Values("1f1b", "zb-h1"), ::testing::Values(2, 4)));

}  // namespace
}  // namespace tandem::cli
