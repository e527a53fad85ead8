// NCCL pair communicators: the bootstrap from a controller-made unique id,
// bad arguments, the clear error without a GPU, and (with two GPUs) a real
// transfer between two processes. The two-GPU test carries the `gpu` label
// with the rest of this binary and skips with fewer than two devices.
#include "actor/nccl/nccl_communicator.h"

#include <cuda_runtime.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "backends/cuda/cuda_runtime.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/backends/cuda/probe_in_child.h"

namespace tandem::actor::nccl {
namespace {

using ::testing::HasSubstr;

TEST(NcclPairCommunicator, RefusesAMalformedIdOrRank) {
  absl::StatusOr<std::unique_ptr<NcclPairCommunicator>> joined =
      NcclPairCommunicator::Join(std::string(12, 'x'), 0, 0, absl::Now() + absl::Seconds(1));
  ASSERT_FALSE(joined.ok());
  EXPECT_EQ(joined.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(joined.status().message(), HasSubstr("128 bytes, not 12"));
  joined = NcclPairCommunicator::Join(std::string(kNcclUniqueIdBytes, 'x'), 2, 0, absl::Now() + absl::Seconds(1));
  ASSERT_FALSE(joined.ok());
  EXPECT_THAT(joined.status().message(), HasSubstr("ranks 0 and 1, not 2"));
}

TEST(NcclPairCommunicator, JoiningWithoutAGpuFailsAtOnceWithTheReason) {
  if (cuda::ProbeInChild().count > 0) GTEST_SKIP() << "a CUDA device is visible";
  absl::StatusOr<std::string> id = NewNcclUniqueId();
  ASSERT_TRUE(id.ok()) << id.status();
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<NcclPairCommunicator>> joined =
      NcclPairCommunicator::Join(*id, 0, 0, absl::Now() + absl::Seconds(30));
  ASSERT_FALSE(joined.ok());
  EXPECT_EQ(joined.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(joined.status().message(), HasSubstr("no CUDA device 0"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));  // it did not wait for a peer
}

// Runs `body` in a child process; returns its exit code (-1 when it died
// by a signal or had to be killed after `timeout`).
int RunChild(const std::function<int()>& body, absl::Duration timeout) {
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) _exit(body());
  return cuda::Reap(pid, absl::Now() + timeout);
}

TEST(NcclPairCommunicator, TwoGpusExchangeBytesThroughAControllerMadeId) {
  if (cuda::ProbeInChild().count < 2) GTEST_SKIP() << "needs two CUDA devices";
  absl::StatusOr<std::string> id = NewNcclUniqueId();
  ASSERT_TRUE(id.ok()) << id.status();
  constexpr int64_t kBytes = int64_t{8} << 20;
  auto side = [&](int rank) {
    return [&, rank]() -> int {
      absl::StatusOr<std::unique_ptr<NcclPairCommunicator>> comm =
          NcclPairCommunicator::Join(*id, rank, rank, absl::Now() + absl::Seconds(60));
      if (!comm.ok()) return 10;
      void* data = nullptr;
      cudaStream_t stream = nullptr;
      if (cudaMalloc(&data, kBytes) != cudaSuccess || cudaStreamCreate(&stream) != cudaSuccess) return 11;
      std::vector<unsigned char> host(kBytes);
      for (int64_t i = 0; i < kBytes; ++i) host[i] = static_cast<unsigned char>((i * 7 + 3) % 251);
      if (rank == 0) {
        if (cudaMemcpy(data, host.data(), kBytes, cudaMemcpyHostToDevice) != cudaSuccess) return 12;
        if (!(*comm)->Send(data, kBytes, stream, absl::Now() + absl::Seconds(30)).ok()) return 13;
        return 0;
      }
      if (cudaMemset(data, 0, kBytes) != cudaSuccess) return 12;
      if (!(*comm)->Receive(data, kBytes, stream, absl::Now() + absl::Seconds(30)).ok()) return 13;
      std::vector<unsigned char> got(kBytes);
      if (cudaMemcpy(got.data(), data, kBytes, cudaMemcpyDeviceToHost) != cudaSuccess) return 14;
      return got == host ? 0 : 15;
    };
  };
  int codes[2] = {-1, -1};
  std::thread receiver([&] { codes[1] = RunChild(side(1), absl::Seconds(120)); });
  codes[0] = RunChild(side(0), absl::Seconds(120));
  receiver.join();
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(codes[1], 0);
}

}  // namespace
}  // namespace tandem::actor::nccl
