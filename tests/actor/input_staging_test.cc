// A device-resident actor's step inputs (actor/input_staging.h): uploaded
// without the host waiting for the device, carried bit for bit even when the
// caller's tensors change at once, never rewritten in staging while a copy
// out of it is still queued, and staged in blocks kept from step to step.
#include "actor/input_staging.h"

#include <cstring>
#include <memory>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "backends/fake/fake_device_memory.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/actor/ipc_test_util.h"

namespace tandem::actor {
namespace {

using ::tandem::actor::testing::CheckTensors;
using ::tandem::actor::testing::In;
using ::tandem::actor::testing::IpcTestTensors;
using ::tandem::actor::testing::Pattern;
using ::testing::HasSubstr;

// Holds the fake device's main stream until Open() (or destruction): host
// work on a side stream that the main stream waits for, as a long kernel
// would hold a GPU's stream.
class StreamGate {
 public:
  explicit StreamGate(fake::FakeDeviceMemory& memory) {
    const backends::StreamId side = *memory.CreateSideStream();
    const backends::DeviceEvent passed = *memory.CreateIpcEvent();
    EXPECT_TRUE(
        memory.EnqueueHostWork(side, [open = open_] { open->WaitForNotificationWithTimeout(absl::Seconds(30)); }).ok());
    EXPECT_TRUE(memory.RecordEventOn(side, passed).ok());
    EXPECT_TRUE(memory.StreamWaitEvent(passed).ok());
  }
  StreamGate(const StreamGate&) = delete;
  StreamGate& operator=(const StreamGate&) = delete;
  ~StreamGate() { Open(); }
  void Open() {
    if (!open_->HasBeenNotified()) open_->Notify();
  }

 private:
  std::shared_ptr<absl::Notification> open_ = std::make_shared<absl::Notification>();
};

std::vector<const ir::HostTensor*> Pointers(const std::vector<ir::HostTensor>& tensors) {
  std::vector<const ir::HostTensor*> pointers;
  for (const ir::HostTensor& tensor : tensors) pointers.push_back(&tensor);
  return pointers;
}

TEST(InputStaging, UploadDoesNotWaitForTheDeviceAndCarriesTheBitsTheCallerGave) {
  std::unique_ptr<fake::FakeDeviceMemory> memory = *fake::FakeDeviceMemory::Create({});
  InputStaging staging(*memory);
  std::vector<ir::HostTensor> inputs = IpcTestTensors(3);
  const std::vector<ir::HostTensor> expected = IpcTestTensors(3);  // the same tensors, made anew
  StreamGate gate(*memory);
  // The stream is held: an upload that waited for it would run out its
  // deadline.
  absl::StatusOr<std::vector<backends::DeviceTensor>> uploaded = staging.Upload(Pointers(inputs), In(absl::Seconds(5)));
  ASSERT_TRUE(uploaded.ok()) << uploaded.status();
  ASSERT_EQ(uploaded->size(), inputs.size());
  // The caller's tensors are its own again at once.
  for (ir::HostTensor& input : inputs) std::memset(input.data(), 0xA5, static_cast<size_t>(input.num_bytes()));
  gate.Open();
  EXPECT_TRUE(CheckTensors(*memory, *uploaded, expected).ok());
}

TEST(InputStaging, ABlockIsRewrittenOnlyAfterTheCopiesOutOfItHaveRun) {
  std::unique_ptr<fake::FakeDeviceMemory> memory = *fake::FakeDeviceMemory::Create({});
  InputStaging staging(*memory);
  const std::vector<std::vector<ir::HostTensor>> steps = {IpcTestTensors(1), IpcTestTensors(2), IpcTestTensors(3)};
  StreamGate gate(*memory);
  std::vector<std::vector<backends::DeviceTensor>> uploaded;
  for (int step = 0; step < 2; ++step) {
    absl::StatusOr<std::vector<backends::DeviceTensor>> device =
        staging.Upload(Pointers(steps[step]), In(absl::Seconds(5)));
    ASSERT_TRUE(device.ok()) << device.status();
    uploaded.push_back(*std::move(device));
  }
  // The third step needs the first step's block, whose copies still wait
  // behind the held stream.
  absl::StatusOr<std::vector<backends::DeviceTensor>> late =
      staging.Upload(Pointers(steps[2]), In(absl::Milliseconds(100)));
  EXPECT_EQ(late.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(late.status().message()), HasSubstr("more than a step behind the host"));
  gate.Open();
  absl::StatusOr<std::vector<backends::DeviceTensor>> third = staging.Upload(Pointers(steps[2]), In(absl::Seconds(10)));
  ASSERT_TRUE(third.ok()) << third.status();
  uploaded.push_back(*std::move(third));
  for (int step = 0; step < 3; ++step) {
    absl::Status bits = CheckTensors(*memory, uploaded[step], steps[step]);
    EXPECT_TRUE(bits.ok()) << "step " << step << ": " << bits;
  }
}

TEST(InputStaging, StagingIsKeptFromStepToStepAndGrowsForLargerInputs) {
  std::unique_ptr<fake::FakeDeviceMemory> memory = *fake::FakeDeviceMemory::Create({});
  InputStaging staging(*memory);
  const std::vector<ir::HostTensor> small = {Pattern(1, 100), Pattern(2, 7)};
  const std::vector<ir::HostTensor> large = {Pattern(3, 100000)};
  int64_t held = 0;
  for (int step = 0; step < 4; ++step) {
    absl::StatusOr<std::vector<backends::DeviceTensor>> device = staging.Upload(Pointers(small), In(absl::Seconds(10)));
    ASSERT_TRUE(device.ok()) << device.status();
    EXPECT_TRUE(CheckTensors(*memory, *device, small).ok());
    if (step == 1) held = staging.staging_bytes();
    if (step > 1) {
      EXPECT_EQ(staging.staging_bytes(), held) << "step " << step;  // both blocks made, none since
    }
  }
  EXPECT_EQ(held, 2 * (512 + 256));  // two blocks of 400 and 28 bytes, each aligned to 256
  absl::StatusOr<std::vector<backends::DeviceTensor>> device = staging.Upload(Pointers(large), In(absl::Seconds(10)));
  ASSERT_TRUE(device.ok()) << device.status();
  EXPECT_TRUE(CheckTensors(*memory, *device, large).ok());
  EXPECT_EQ(staging.staging_bytes(), 768 + 400128);
  EXPECT_TRUE(staging.Upload({}, In(absl::Seconds(1)))->empty());
}

}  // namespace
}  // namespace tandem::actor
