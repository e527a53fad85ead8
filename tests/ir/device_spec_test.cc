// Device names (ir/device_spec.h): every form parses and prints back,
// malformed names list the accepted forms, and which actors share a GPU.
#include "ir/device_spec.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::ir {
namespace {

using ::testing::HasSubstr;

TEST(DeviceSpec, ParsesEveryFormAndPrintsItBack) {
  for (const std::string name :
       {"cpu", "cuda", "cuda:0", "cuda:3", "cuda+bf16", "cuda:1+bf16", "cuda+tf32", "cuda:2+tf32", "fake-cuda",
        "fake-cuda/2", "fake-cuda/64"}) {
    absl::StatusOr<DeviceSpec> spec = ParseDeviceSpec(name);
    ASSERT_TRUE(spec.ok()) << name << ": " << spec.status();
    EXPECT_EQ(DeviceSpecName(*spec), name);
  }
  absl::StatusOr<DeviceSpec> spec = ParseDeviceSpec("cuda:2+bf16");
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->kind, DeviceSpec::Kind::kCuda);
  EXPECT_EQ(spec->index, 2);
  EXPECT_EQ(spec->precision, DeviceSpec::Precision::kBf16);
  EXPECT_EQ(ParseDeviceSpec("cuda:1+tf32")->precision, DeviceSpec::Precision::kTf32);
  EXPECT_EQ(ParseDeviceSpec("cuda")->precision, DeviceSpec::Precision::kF32);
  EXPECT_EQ(ParseDeviceSpec("cuda")->index, -1);
  EXPECT_EQ(ParseDeviceSpec("fake-cuda")->fake_gpus, 1);
  EXPECT_EQ(ParseDeviceSpec("fake-cuda/3")->fake_gpus, 3);
}

TEST(DeviceSpec, RefusesFakeGpuCountsOutsideOneTo64) {
  for (const std::string name : {"fake-cuda/", "fake-cuda/0", "fake-cuda/65", "fake-cuda/-1", "fake-cuda/+2",
                                 "fake-cuda/2x", "fake-cuda:2", "fake-cuda+bf16"}) {
    absl::StatusOr<DeviceSpec> spec = ParseDeviceSpec(name);
    ASSERT_FALSE(spec.ok()) << name;
    EXPECT_THAT(std::string(spec.status().message()), HasSubstr("fake-cuda/N (1 <= N <= 64")) << name;
  }
}

TEST(DeviceSpec, RejectsMalformedNamesListingTheAcceptedForms) {
  for (const std::string name : {"", "gpu", "tpu", "cuda:", "cuda:-1", "cuda:x", "cuda0", "cpu+bf16", "cuda:1+fp8",
                                 "cuda:+bf16", "CUDA", "cuda+tf32+bf16", "cuda+bf16+tf32", "cpu+tf32"}) {
    absl::StatusOr<DeviceSpec> spec = ParseDeviceSpec(name);
    ASSERT_FALSE(spec.ok()) << name;
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(spec.status().message(), HasSubstr("unknown device '" + name + "'"));
    EXPECT_THAT(spec.status().message(), HasSubstr("expected cpu, cuda or cuda:N (either with +tf32 or +bf16)"));
  }
}

// Under Slurm's GPU binding a task sees only its own GPU: node-local rank 1
// must then take device 0, not ask for device 1 of 1. Without binding, each
// rank takes its own GPU, wrapping around the visible ones.
TEST(GpuForRank, EveryRankTakesAGpuThisProcessSees) {
  EXPECT_EQ(GpuForRank(1, 1), 0);
  EXPECT_EQ(GpuForRank(7, 1), 0);
  EXPECT_EQ(GpuForRank(1, 8), 1);
  EXPECT_EQ(GpuForRank(9, 8), 1);
  for (int visible = 1; visible <= 8; ++visible) {
    for (int32_t rank = 0; rank < 32; ++rank) {
      EXPECT_LT(GpuForRank(rank, visible), visible) << rank << " of " << visible;
      EXPECT_GE(GpuForRank(rank, visible), 0);
    }
  }
}

// Which actors of one host exchange device tensors over CUDA IPC.
TEST(ActorsShareDevice, OnlyActorsOnTheSameGpu) {
  const DeviceSpec cpu{};
  const DeviceSpec fake{.kind = DeviceSpec::Kind::kFakeCuda};
  const DeviceSpec cuda{.kind = DeviceSpec::Kind::kCuda};
  const DeviceSpec cuda1{.kind = DeviceSpec::Kind::kCuda, .index = 1};
  EXPECT_FALSE(ActorsShareDevice(cpu, 0, 1, 0));
  EXPECT_TRUE(ActorsShareDevice(fake, 0, 3, 0));
  const DeviceSpec fake2{.kind = DeviceSpec::Kind::kFakeCuda, .fake_gpus = 2};
  EXPECT_FALSE(ActorsShareDevice(fake2, 0, 1, 0));  // emulated GPUs 0 and 1
  EXPECT_TRUE(ActorsShareDevice(fake2, 1, 3, 0));   // both on emulated GPU 1
  EXPECT_TRUE(ActorsShareDevice(cuda, 0, 1, 1));   // one GPU: everyone on it
  EXPECT_FALSE(ActorsShareDevice(cuda, 0, 1, 2));  // actor 1 takes GPU 1
  EXPECT_TRUE(ActorsShareDevice(cuda, 0, 2, 2));   // actor 2 wraps to GPU 0
  EXPECT_TRUE(ActorsShareDevice(cuda1, 0, 1, 4));  // everyone named GPU 1
}

}  // namespace
}  // namespace tandem::ir
