// Emitted results of a device-resident actor (actor/emit_staging.h): staged
// without the host waiting for the device, collected bit for bit at the
// step's end even when their device tensors are gone, with staging reused
// from step to step.
#include "actor/emit_staging.h"

#include <memory>
#include <vector>

#include "absl/time/clock.h"
#include "backends/fake/fake_device_memory.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/actor/ipc_test_util.h"

namespace tandem::actor {
namespace {

using ::tandem::actor::testing::In;
using ::tandem::actor::testing::Pattern;
using ::tandem::actor::testing::Upload;
using ::testing::HasSubstr;

constexpr absl::Duration kCopyDelay = absl::Milliseconds(100);

TEST(EmitStaging, StagingDoesNotWaitForTheDeviceAndCollectGivesTheBits) {
  std::unique_ptr<fake::FakeDeviceMemory> memory = *fake::FakeDeviceMemory::Create({.copy_delay = kCopyDelay});
  EmitStaging staging(*memory);
  const std::vector<ir::HostTensor> losses = {Pattern(1, 1), Pattern(2, 1), Pattern(3, 40000)};
  std::vector<backends::DeviceTensor> device = *Upload(*memory, losses);
  const absl::Time start = absl::Now();
  for (int32_t microbatch = 0; microbatch < 3; ++microbatch) {
    ASSERT_TRUE(staging.Stage("loss", microbatch, device[microbatch]).ok());
  }
  // Three copies of 100 ms each are queued, none waited for; the device
  // tensors go at once (their frees are ordered after the copies).
  EXPECT_LT(absl::Now() - start, kCopyDelay);
  device.clear();
  EXPECT_EQ(staging.staged(), 3);
  absl::StatusOr<std::vector<EmitStaging::Result>> results = staging.Collect(In(absl::Seconds(10)));
  ASSERT_TRUE(results.ok()) << results.status();
  ASSERT_EQ(results->size(), 3u);
  for (int32_t microbatch = 0; microbatch < 3; ++microbatch) {
    EXPECT_EQ((*results)[microbatch].result, "loss");
    EXPECT_EQ((*results)[microbatch].microbatch, microbatch);
    EXPECT_TRUE((*results)[microbatch].tensor.BitwiseEquals(losses[microbatch])) << microbatch;
  }
  EXPECT_EQ(staging.staged(), 0);
}

TEST(EmitStaging, StagingIsKeptFromStepToStepAndAResultTooBigForABlockGetsItsOwn) {
  std::unique_ptr<fake::FakeDeviceMemory> memory = *fake::FakeDeviceMemory::Create({});
  EmitStaging staging(*memory);
  const ir::HostTensor big = Pattern(9, EmitStaging::kBlockBytes / 4 + 1);  // one f32 past a block
  int64_t held = 0;
  for (int step = 0; step < 3; ++step) {
    for (int32_t microbatch = 0; microbatch < 8; ++microbatch) {
      ASSERT_TRUE(staging.Stage("loss", microbatch, (*Upload(*memory, {Pattern(microbatch, 1)}))[0]).ok());
    }
    ASSERT_TRUE(staging.Stage("logits", 0, (*Upload(*memory, {big}))[0]).ok());
    absl::StatusOr<std::vector<EmitStaging::Result>> results = staging.Collect(In(absl::Seconds(10)));
    ASSERT_TRUE(results.ok()) << results.status();
    ASSERT_EQ(results->size(), 9u);
    EXPECT_TRUE(results->back().tensor.BitwiseEquals(big));
    if (step == 0) held = staging.staging_bytes();
    EXPECT_EQ(staging.staging_bytes(), held) << "step " << step;  // nothing new after the first step
  }
  EXPECT_EQ(held, EmitStaging::kBlockBytes + (big.num_bytes() + 255) / 256 * 256);
}

TEST(EmitStaging, AResultStagedTwiceIsRefusedNamingIt) {
  std::unique_ptr<fake::FakeDeviceMemory> memory = *fake::FakeDeviceMemory::Create({});
  EmitStaging staging(*memory);
  const backends::DeviceTensor loss = (*Upload(*memory, {Pattern(1, 1)}))[0];
  ASSERT_TRUE(staging.Stage("loss", 2, loss).ok());
  absl::Status again = staging.Stage("loss", 2, loss);
  EXPECT_EQ(again.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(again.message()), HasSubstr("result 'loss' of microbatch 2 emitted twice"));
  // A failed step's staging is dropped.
  staging.Discard();
  EXPECT_EQ(staging.staged(), 0);
  EXPECT_TRUE(staging.Stage("loss", 2, loss).ok());
}

}  // namespace
}  // namespace tandem::actor
