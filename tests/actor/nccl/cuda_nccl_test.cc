// NCCL itself as the data plane's table (actor/nccl/cuda_nccl.h): the
// arguments it refuses (one GPU), and the device-to-device transport between
// two GPUs of this process (actor/nccl_transport.h over CudaNccl, two
// threads). The binary carries the `gpu` label; each test skips without the
// GPUs it needs.
#include "actor/nccl/cuda_nccl.h"

#include <memory>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "actor/in_memory_transport.h"
#include "actor/nccl_transport.h"
#include "backends/cuda/cuda_device_memory.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/actor/ipc_test_util.h"
#include "tests/backends/cuda/probe_in_child.h"

namespace tandem::actor::nccl {
namespace {

using ::tandem::actor::testing::CheckTensors;
using ::tandem::actor::testing::In;
using ::tandem::actor::testing::Pattern;
using ::tandem::actor::testing::Upload;
using ::testing::HasSubstr;

TEST(CudaNccl, MakesIdsWithoutAGpuAndRefusesMalformedIdsAndRanks) {
  absl::StatusOr<std::string> id = NewNcclUniqueId();
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(id->size(), kNcclUniqueIdBytes);
  if (cuda::ProbeInChild().count < 1) GTEST_SKIP() << "no CUDA device";
  std::unique_ptr<cuda::CudaDeviceMemory> memory = *cuda::CudaDeviceMemory::Create(0);
  CudaNccl library(*memory);
  EXPECT_THAT(std::string(library.StartJoin("short", 2, 0).status().message()), HasSubstr("128 bytes, not 5"));
  EXPECT_THAT(std::string(library.StartJoin(*id, 2, 2).status().message()), HasSubstr("rank 2 of 2"));
}

TEST(CudaNccl, TwoGpusExchangeTensorsDeviceToDevice) {
  if (cuda::ProbeInChild().count < 2) GTEST_SKIP() << "needs two CUDA devices";
  InMemoryNetwork network(2);
  std::unique_ptr<cuda::CudaDeviceMemory> memory[2];
  std::unique_ptr<CudaNccl> library[2];
  std::unique_ptr<NcclTransport> transport[2];
  for (int32_t actor = 0; actor < 2; ++actor) {
    memory[actor] = *cuda::CudaDeviceMemory::Create(actor);
    library[actor] = std::make_unique<CudaNccl>(*memory[actor]);
    transport[actor] = *NcclTransport::Create(actor, 2, *library[actor], network.Endpoint(actor), {1 - actor});
  }
  absl::Status one;
  std::thread joiner([&] { one = transport[1]->Connect(In(absl::Seconds(60))); });
  const absl::Status zero = transport[0]->Connect(In(absl::Seconds(60)));
  joiner.join();
  ASSERT_TRUE(zero.ok()) << zero;
  ASSERT_TRUE(one.ok()) << one;
  // Both directions at once, 8 MiB each way.
  const ir::HostTensor forward = Pattern(3, 2 << 20), backward = Pattern(4, 2 << 20);
  ASSERT_TRUE(transport[0]->Send(1, 1, *Upload(*memory[0], {forward})).ok());
  ASSERT_TRUE(transport[1]->Send(0, 2, *Upload(*memory[1], {backward})).ok());
  absl::StatusOr<std::vector<backends::DeviceTensor>> at_one = transport[1]->Receive(0, 1, In(absl::Seconds(30)));
  absl::StatusOr<std::vector<backends::DeviceTensor>> at_zero = transport[0]->Receive(1, 2, In(absl::Seconds(30)));
  ASSERT_TRUE(at_one.ok()) << at_one.status();
  ASSERT_TRUE(at_zero.ok()) << at_zero.status();
  EXPECT_TRUE(CheckTensors(*memory[1], *at_one, {forward}).ok());
  EXPECT_TRUE(CheckTensors(*memory[0], *at_zero, {backward}).ok());
  for (int32_t actor = 0; actor < 2; ++actor) EXPECT_TRUE(transport[actor]->Flush(In(absl::Seconds(30))).ok());
  for (int32_t actor = 0; actor < 2; ++actor) transport[actor].reset();
}

}  // namespace
}  // namespace tandem::actor::nccl
