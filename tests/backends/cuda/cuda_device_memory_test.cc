// CudaDeviceMemory and IpcTransport on a real GPU: two forked processes
// share GPU 0 through CUDA IPC, the protocol ipc_transport_test.cc checks on
// the fake device.
//
// CUDA cannot be used in a child forked after the parent initialized it, so
// the test process never calls CUDA itself: even the device probe runs in a
// forked child, and both actors of every test are forked children that talk
// over a socketpair (host channel: ShmTransport). Every wait is bounded and
// both children are always reaped (killed when they overstay). Without a
// GPU every test skips.
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "actor/ipc_transport.h"
#include "actor/shm_transport.h"
#include "backends/cuda/cuda_device_memory.h"
#include "backends/cuda/cuda_runtime.h"
#include "backends/device_memory.h"
#include "gtest/gtest.h"
#include "tests/actor/ipc_test_util.h"
#include "tests/backends/cuda/probe_in_child.h"

namespace tandem::cuda {
namespace {

using ::tandem::actor::testing::CheckTensors;
using ::tandem::actor::testing::ChildFailure;
using ::tandem::actor::testing::In;
using ::tandem::actor::testing::IpcTestTensors;
using ::tandem::actor::testing::Pattern;
using ::tandem::actor::testing::ReadAll;
using ::tandem::actor::testing::Upload;
using ::tandem::actor::testing::WriteAll;


#define SKIP_WITHOUT_GPU()                                              \
  if (const DeviceProbe& probe = ProbeInChild(); probe.count == 0) {    \
    GTEST_SKIP() << "no CUDA device: " << probe.why;                    \
  }

// Runs `actor0(socket)` and `actor1(socket)` in two forked children joined by
// a socketpair; returns their exit codes (-1 when killed at the deadline).
std::pair<int, int> RunPair(const std::function<int(int)>& actor0, const std::function<int(int)>& actor1,
                            absl::Duration timeout = absl::Seconds(60)) {
  int sockets[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sockets) != 0) return {-2, -2};
  std::fflush(nullptr);
  const pid_t first = fork();
  if (first == 0) {
    close(sockets[1]);
    _exit(actor0(sockets[0]));
  }
  const pid_t second = fork();
  if (second == 0) {
    close(sockets[0]);
    _exit(actor1(sockets[1]));
  }
  close(sockets[0]);
  close(sockets[1]);
  const absl::Time deadline = In(timeout);
  const int code0 = Reap(first, deadline);
  const int code1 = Reap(second, deadline);
  return {code0, code1};
}

// One actor's side: host channel, GPU 0, IPC transport.
struct Side {
  std::unique_ptr<actor::ShmTransport> host;
  std::unique_ptr<CudaDeviceMemory> memory;
  std::unique_ptr<actor::IpcTransport> ipc;
};

struct SideOptions {
  int64_t ring_bytes = int64_t{16} << 20;
  int32_t slots = 8;
};

// Sets up actor `actor` of two, runs `body`, closes. An exit code.
int RunActor(int32_t actor, int socket, const SideOptions& options, const std::function<int(Side&)>& body) {
  const int32_t peer = 1 - actor;
  Side side;
  absl::StatusOr<std::unique_ptr<actor::ShmTransport>> host =
      actor::ShmTransport::Create(actor, 2, {.ring_bytes = 1 << 20});
  if (!host.ok()) return ChildFailure(20, host.status().message());
  side.host = *std::move(host);
  if (!actor::SendFd(socket, side.host->OutboundFd(peer)).ok()) return ChildFailure(21, "SendFd");
  absl::StatusOr<int> fd = actor::ReceiveFd(socket, In(absl::Seconds(20)));
  if (!fd.ok() || !side.host->AttachInbound(peer, *fd).ok()) return ChildFailure(22, "host channel");
  absl::StatusOr<std::unique_ptr<CudaDeviceMemory>> memory = CudaDeviceMemory::Create(0);
  if (!memory.ok()) return ChildFailure(23, memory.status().message());
  side.memory = *std::move(memory);
  absl::StatusOr<std::unique_ptr<actor::IpcTransport>> ipc = actor::IpcTransport::Create(
      actor, 2, *side.memory, *side.host, {.ring_bytes = options.ring_bytes, .slots = options.slots});
  if (!ipc.ok()) return ChildFailure(24, ipc.status().message());
  side.ipc = *std::move(ipc);
  if (absl::Status status = side.ipc->Connect(In(absl::Seconds(30))); !status.ok()) {
    return ChildFailure(25, status.message());
  }
  const int code = body(side);
  if (code != 0) return code;
  if (absl::Status status = side.ipc->Close(In(absl::Seconds(20))); !status.ok()) {
    return ChildFailure(26, status.message());
  }
  if (!side.host->Flush(In(absl::Seconds(10))).ok()) return ChildFailure(27, "host flush");
  return 0;
}

std::pair<int, int> RunTransportPair(const std::function<int(Side&)>& actor0, const std::function<int(Side&)>& actor1,
                                     SideOptions options = {}) {
  return RunPair([&](int socket) { return RunActor(0, socket, options, actor0); },
                 [&](int socket) { return RunActor(1, socket, options, actor1); });
}

TEST(CudaDeviceMemory, CreateFailsWithoutThatDevice) {
  SKIP_WITHOUT_GPU();
  auto [code, unused] = RunPair(
      [](int) {
        absl::StatusOr<std::unique_ptr<CudaDeviceMemory>> memory = CudaDeviceMemory::Create(1 << 20);
        return memory.status().code() == absl::StatusCode::kFailedPrecondition ? 0 : 1;
      },
      [](int) { return 0; });
  EXPECT_EQ(code, 0);
}

// An emitted result's path (an asynchronous copy into pinned staging,
// waited for once) and side streams ordered by events.
TEST(CudaDeviceMemory, CopiesIntoPinnedStagingAndSideStreamsFollowEvents) {
  SKIP_WITHOUT_GPU();
  auto [code, unused] = RunPair(
      [](int) {
        absl::StatusOr<std::unique_ptr<CudaDeviceMemory>> memory = CudaDeviceMemory::Create(0);
        if (!memory.ok()) return 1;
        const ir::HostTensor values = Pattern(5, 1 << 18);
        absl::StatusOr<std::vector<backends::DeviceTensor>> device = Upload(**memory, {values});
        absl::StatusOr<void*> staging = (*memory)->AllocateHostStaging(values.num_bytes());
        absl::StatusOr<backends::StreamId> side = (*memory)->CreateSideStream();
        absl::StatusOr<backends::DeviceEvent> made = (*memory)->CreateIpcEvent();
        absl::StatusOr<backends::DeviceEvent> passed = (*memory)->CreateIpcEvent();
        if (!device.ok() || !staging.ok() || !side.ok() || !made.ok() || !passed.ok()) return 2;
        if (!(*memory)->CopyToHostAsync(*staging, (*device)[0].address(), values.num_bytes()).ok()) return 3;
        if (!(*memory)->RecordEvent(*made).ok() || !(*memory)->StreamWaitEventOn(*side, *made).ok() ||
            !(*memory)->RecordEventOn(*side, *passed).ok()) {
          return 4;
        }
        if (!(*memory)->SynchronizeStream(In(absl::Seconds(30))).ok()) return 5;
        if (std::memcmp(*staging, values.data(), static_cast<size_t>(values.num_bytes())) != 0) return 6;
        const absl::Time deadline = In(absl::Seconds(30));
        while (!*(*memory)->QueryEvent(*passed)) {
          if (absl::Now() > deadline) return 7;
        }
        (*memory)->FreeHostStaging(*staging);
        return (*memory)->RecordEventOn(99, *passed).code() == absl::StatusCode::kInvalidArgument ? 0 : 8;
      },
      [](int) { return 0; });
  EXPECT_EQ(code, 0);
}

// A step input's path (copied into pinned staging, then asynchronously to
// the device), read back in stream order.
TEST(CudaDeviceMemory, CopiesFromPinnedStagingInStreamOrder) {
  SKIP_WITHOUT_GPU();
  auto [code, unused] = RunPair(
      [](int) {
        absl::StatusOr<std::unique_ptr<CudaDeviceMemory>> memory = CudaDeviceMemory::Create(0);
        if (!memory.ok()) return 1;
        const ir::HostTensor values = Pattern(6, 1 << 18);
        absl::StatusOr<void*> staging = (*memory)->AllocateHostStaging(values.num_bytes());
        absl::StatusOr<backends::DeviceTensor> device = backends::AllocateDeviceTensor(**memory, values.type());
        if (!staging.ok() || !device.ok()) return 2;
        std::memcpy(*staging, values.data(), static_cast<size_t>(values.num_bytes()));
        if (!(*memory)->CopyFromHostAsync(device->address(), *staging, values.num_bytes()).ok()) return 3;
        absl::StatusOr<ir::HostTensor> back = backends::CopyToHost(**memory, *device, In(absl::Seconds(30)));
        if (!back.ok() || !back->BitwiseEquals(values)) return 4;
        (*memory)->FreeHostStaging(*staging);
        return (*memory)->CopyFromHostAsync(device->address(), values.data(), -1).code() ==
                       absl::StatusCode::kInvalidArgument
                   ? 0
                   : 5;
      },
      [](int) { return 0; });
  EXPECT_EQ(code, 0);
}

// Process 0 fills memory, records an event after the copy and exports both;
// process 1 waits for the event on its stream and reads the bytes, then
// writes a reply that process 0 reads.
TEST(CudaDeviceMemory, MemoryAndEventsAreSharedBetweenProcesses) {
  SKIP_WITHOUT_GPU();
  constexpr int64_t kElements = 8 << 20;  // 32 MiB
  auto exporter = [](int socket) {
    absl::StatusOr<std::unique_ptr<CudaDeviceMemory>> memory = CudaDeviceMemory::Create(0);
    if (!memory.ok()) return ChildFailure(1, memory.status().message());
    CudaDeviceMemory& m = **memory;
    absl::StatusOr<backends::DeviceAddress> shared = m.Allocate(kElements * 4, backends::Sharing::kExportable);
    absl::StatusOr<backends::DeviceEvent> event = m.CreateIpcEvent();
    if (!shared.ok() || !event.ok()) return ChildFailure(2, "allocate");
    absl::StatusOr<std::vector<backends::DeviceTensor>> source = Upload(m, {Pattern(7, kElements)});
    if (!source.ok()) return ChildFailure(3, source.status().message());
    if (!m.CopyAsync(*shared, (*source)[0].address(), kElements * 4).ok() || !m.RecordEvent(*event).ok()) {
      return ChildFailure(4, "enqueue");
    }
    absl::StatusOr<backends::IpcMemHandle> memory_handle = m.ExportMemory(*shared);
    absl::StatusOr<backends::IpcEventHandle> event_handle = m.ExportEvent(*event);
    if (!memory_handle.ok() || !event_handle.ok()) return ChildFailure(5, "export");
    if (!WriteAll(socket, memory_handle->bytes.data(), backends::kIpcHandleBytes) ||
        !WriteAll(socket, event_handle->bytes.data(), backends::kIpcHandleBytes)) {
      return 6;
    }
    char done = 0;
    if (!ReadAll(socket, &done, 1)) return ChildFailure(7, "no reply");  // the importer closed everything
    ir::HostTensor seen = Pattern(0, kElements);
    if (!m.CopyToHostSync(seen.data(), *shared, seen.num_bytes(), In(absl::Seconds(10))).ok() ||
        !seen.BitwiseEquals(Pattern(8, kElements))) {
      return ChildFailure(8, "the reply did not arrive");
    }
    return m.Free(*shared).ok() && m.DestroyEvent(*event).ok() ? 0 : 9;
  };
  auto importer = [](int socket) {
    absl::StatusOr<std::unique_ptr<CudaDeviceMemory>> memory = CudaDeviceMemory::Create(0);
    if (!memory.ok()) return ChildFailure(11, memory.status().message());
    CudaDeviceMemory& m = **memory;
    backends::IpcMemHandle memory_handle;
    backends::IpcEventHandle event_handle;
    if (!ReadAll(socket, memory_handle.bytes.data(), backends::kIpcHandleBytes) ||
        !ReadAll(socket, event_handle.bytes.data(), backends::kIpcHandleBytes)) {
      return ChildFailure(12, "no handles");
    }
    absl::StatusOr<backends::DeviceAddress> shared = m.ImportMemory(memory_handle);
    if (!shared.ok()) return ChildFailure(13, shared.status().message());
    absl::StatusOr<backends::DeviceEvent> event = m.ImportEvent(event_handle);
    if (!event.ok()) return ChildFailure(14, event.status().message());
    absl::StatusOr<backends::DeviceTensor> copy =
        backends::AllocateDeviceTensor(m, ir::TensorType{ir::DType::kI32, {kElements}});
    if (!copy.ok()) return ChildFailure(15, "allocate");
    if (!m.StreamWaitEvent(*event).ok() || !m.CopyAsync(copy->address(), *shared, kElements * 4).ok()) {
      return ChildFailure(16, "enqueue");
    }
    absl::StatusOr<ir::HostTensor> seen = backends::CopyToHost(m, *copy, In(absl::Seconds(10)));
    if (!seen.ok() || !seen->BitwiseEquals(Pattern(7, kElements))) return ChildFailure(17, "wrong bytes");
    absl::StatusOr<bool> done = m.QueryEvent(*event);
    if (!done.ok() || !*done) return ChildFailure(18, "event not complete");
    const ir::HostTensor reply = Pattern(8, kElements);
    if (!m.CopyFromHostSync(*shared, reply.data(), reply.num_bytes(), In(absl::Seconds(10))).ok()) {
      return ChildFailure(19, "reply");
    }
    // Close before the exporter frees.
    if (!m.DestroyEvent(*event).ok() || !m.CloseImported(*shared).ok()) return ChildFailure(20, "close");
    return WriteAll(socket, "D", 1) ? 0 : 21;
  };
  auto [code0, code1] = RunPair(exporter, importer);
  EXPECT_EQ(code0, 0);
  EXPECT_EQ(code1, 0);
}

TEST(CudaIpcTransport, RoundTripsTensorsBitExact) {
  SKIP_WITHOUT_GPU();
  auto [code0, code1] = RunTransportPair(
      [](Side& side) {
        absl::StatusOr<std::vector<backends::DeviceTensor>> tensors = Upload(*side.memory, IpcTestTensors(3));
        if (!tensors.ok()) return ChildFailure(1, tensors.status().message());
        if (!side.ipc->Send(1, 1, *std::move(tensors)).ok()) return ChildFailure(2, "send");
        absl::StatusOr<std::vector<backends::DeviceTensor>> echo = side.ipc->Receive(1, 2, In(absl::Seconds(20)));
        if (!echo.ok()) return ChildFailure(3, echo.status().message());
        absl::Status status = CheckTensors(*side.memory, *echo, IpcTestTensors(3));
        return status.ok() ? 0 : ChildFailure(4, status.message());
      },
      [](Side& side) {
        absl::StatusOr<std::vector<backends::DeviceTensor>> got = side.ipc->Receive(0, 1, In(absl::Seconds(20)));
        if (!got.ok()) return ChildFailure(11, got.status().message());
        absl::Status status = CheckTensors(*side.memory, *got, IpcTestTensors(3));
        if (!status.ok()) return ChildFailure(12, status.message());
        return side.ipc->Send(0, 2, *std::move(got)).ok() ? 0 : 13;
      });
  EXPECT_EQ(code0, 0);
  EXPECT_EQ(code1, 0);
}

// 200 messages of up to 3 MiB through a 12 MiB ring with 6 slots, received
// in reverse within groups of two: the ring wraps, slots recycle, Sends
// queue, and every range is reused behind the consumed events.
TEST(CudaIpcTransport, ManyMessagesMatchedByTagThroughASmallRing) {
  SKIP_WITHOUT_GPU();
  constexpr int kMessages = 200;
  auto message = [](int i) {
    std::vector<ir::HostTensor> tensors{Pattern(i, (static_cast<int64_t>(i) * 7919) % (768 << 10))};
    if (i % 3 == 0) tensors.push_back(Pattern(i + 100000, i % 50));
    return tensors;
  };
  auto [code0, code1] = RunTransportPair(
      [&](Side& side) {
        for (int i = 0; i < kMessages; ++i) {
          absl::StatusOr<std::vector<backends::DeviceTensor>> tensors = Upload(*side.memory, message(i));
          if (!tensors.ok()) return ChildFailure(1, tensors.status().message());
          if (absl::Status status = side.ipc->Send(1, i, *std::move(tensors)); !status.ok()) {
            return ChildFailure(2, status.message());
          }
        }
        absl::StatusOr<std::vector<backends::DeviceTensor>> done = side.ipc->Receive(1, 1000000, In(absl::Seconds(30)));
        return done.ok() ? 0 : ChildFailure(3, done.status().message());
      },
      [&](Side& side) {
        for (int group = 0; group < kMessages; group += 2) {
          for (int i = group + 1; i >= group; --i) {
            absl::StatusOr<std::vector<backends::DeviceTensor>> got = side.ipc->Receive(0, i, In(absl::Seconds(20)));
            if (!got.ok()) return ChildFailure(11, got.status().message());
            if (absl::Status status = CheckTensors(*side.memory, *got, message(i)); !status.ok()) {
              return ChildFailure(12, absl::StrCat("message ", i, ": ", status.message()));
            }
          }
        }
        return side.ipc->Send(0, 1000000, {}).ok() ? 0 : 13;
      },
      {.ring_bytes = 12 << 20, .slots = 6});
  EXPECT_EQ(code0, 0);
  EXPECT_EQ(code1, 0);
}

TEST(CudaIpcTransport, ErrorsNamePeerAndTag) {
  SKIP_WITHOUT_GPU();
  auto [code0, code1] = RunTransportPair(
      [](Side& side) {
        absl::StatusOr<std::vector<backends::DeviceTensor>> big = Upload(*side.memory, {Pattern(1, 1 << 20)});  // 4 MiB
        if (!big.ok()) return ChildFailure(1, big.status().message());
        absl::Status too_large = side.ipc->Send(1, 4, *big);
        if (too_large.code() != absl::StatusCode::kResourceExhausted) return ChildFailure(2, too_large.ToString());
        const absl::Time start = absl::Now();
        absl::StatusOr<std::vector<backends::DeviceTensor>> missing =
            side.ipc->Receive(1, 99, start + absl::Milliseconds(200));
        if (missing.status().code() != absl::StatusCode::kDeadlineExceeded ||
            missing.status().message().find("actor 1 with tag 99") == absl::string_view::npos ||
            absl::Now() - start > absl::Seconds(3)) {
          return ChildFailure(3, missing.status().ToString());
        }
        return side.ipc->Send(1, 5, {}).ok() ? 0 : 4;
      },
      [](Side& side) { return side.ipc->Receive(0, 5, In(absl::Seconds(20))).ok() ? 0 : 11; },
      {.ring_bytes = 1 << 20, .slots = 4});
  EXPECT_EQ(code0, 0);
  EXPECT_EQ(code1, 0);
}

}  // namespace
}  // namespace tandem::cuda
