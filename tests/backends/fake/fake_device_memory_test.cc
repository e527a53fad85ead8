// FakeDeviceMemory, the stand-in for CUDA that the IPC protocol is tested
// on: memory and interprocess events exported by one process and imported
// by a forked child, event ordering across processes with a slowed stream,
// and the errors for handles that are stale, foreign or of a process that
// exited. Every child is reaped (killed when it overstays).
#include "backends/fake/fake_device_memory.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "backends/device_memory.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/actor/ipc_test_util.h"

namespace tandem::fake {
namespace {

using ::testing::HasSubstr;
using ::tandem::actor::testing::ChildFailure;
using ::tandem::actor::testing::ForkedChild;
using ::tandem::actor::testing::In;
using ::tandem::actor::testing::Pattern;
using ::tandem::actor::testing::ReadAll;
using ::tandem::actor::testing::Upload;
using ::tandem::actor::testing::WriteAll;

// A copy slow enough that a test sees it still running however loaded the
// machine is, and that a wait which wrongly waits for it shows.
constexpr absl::Duration kSlowCopy = absl::Seconds(2);

TEST(FakeDeviceMemory, MemoryExportedByOneProcessIsSharedWithAnother) {
  constexpr int64_t kElements = 50000;
  ForkedChild child([](int socket) {
    absl::StatusOr<std::unique_ptr<FakeDeviceMemory>> memory = FakeDeviceMemory::Create({});
    if (!memory.ok()) return ChildFailure(1, std::string(memory.status().message()));
    backends::IpcMemHandle handle;
    if (!ReadAll(socket, handle.bytes.data(), handle.bytes.size())) return ChildFailure(2, "no handle");
    absl::StatusOr<backends::DeviceAddress> address = (*memory)->ImportMemory(handle);
    if (!address.ok()) return ChildFailure(3, std::string(address.status().message()));
    ir::HostTensor seen = Pattern(0, kElements);
    if (!(*memory)->CopyToHostSync(seen.data(), *address, seen.num_bytes(), In(absl::Seconds(5))).ok() ||
        !seen.BitwiseEquals(Pattern(1, kElements))) {
      return ChildFailure(4, "the parent's bytes did not arrive");
    }
    const ir::HostTensor reply = Pattern(2, kElements);
    if (!(*memory)->CopyFromHostSync(*address, reply.data(), reply.num_bytes(), In(absl::Seconds(5))).ok()) {
      return ChildFailure(5, "write failed");
    }
    if (!(*memory)->CloseImported(*address).ok()) return ChildFailure(6, "close failed");
    const char done = 'D';
    return WriteAll(socket, &done, 1) ? 0 : 7;
  });
  absl::StatusOr<std::unique_ptr<FakeDeviceMemory>> memory = FakeDeviceMemory::Create({});
  ASSERT_TRUE(memory.ok()) << memory.status();
  absl::StatusOr<backends::DeviceAddress> base = (*memory)->Allocate(kElements * 4, backends::Sharing::kExportable);
  ASSERT_TRUE(base.ok()) << base.status();
  const ir::HostTensor mine = Pattern(1, kElements);
  ASSERT_TRUE((*memory)->CopyFromHostSync(*base, mine.data(), mine.num_bytes(), In(absl::Seconds(5))).ok());
  absl::StatusOr<backends::IpcMemHandle> handle = (*memory)->ExportMemory(*base);
  ASSERT_TRUE(handle.ok()) << handle.status();
  ASSERT_TRUE(WriteAll(child.socket(), handle->bytes.data(), handle->bytes.size()));
  char done = 0;
  ASSERT_TRUE(ReadAll(child.socket(), &done, 1));
  ir::HostTensor seen = Pattern(0, kElements);
  ASSERT_TRUE((*memory)->CopyToHostSync(seen.data(), *base, seen.num_bytes(), In(absl::Seconds(5))).ok());
  EXPECT_TRUE(seen.BitwiseEquals(Pattern(2, kElements)));
  EXPECT_EQ(child.Wait(absl::Seconds(10)), 0);
  // Only an allocation base can be exported; only imports can be closed.
  EXPECT_EQ((*memory)->ExportMemory(*base + 256).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*memory)->CloseImported(*base).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE((*memory)->Free(*base).ok());
  EXPECT_EQ((*memory)->Free(*base).code(), absl::StatusCode::kInvalidArgument);
}

// Process 1 copies (slowly) into memory process 0 exported and records an
// event; process 0's stream waits for that event before reading: it must
// see the new bytes, never the old ones.
TEST(FakeDeviceMemory, InterprocessEventOrdersAnotherProcessesCopy) {
  constexpr int64_t kElements = 4096;
  ForkedChild child([](int socket) {
    absl::StatusOr<std::unique_ptr<FakeDeviceMemory>> memory =
        FakeDeviceMemory::Create({.copy_delay = kSlowCopy});
    if (!memory.ok()) return ChildFailure(1, std::string(memory.status().message()));
    backends::IpcMemHandle memory_handle;
    backends::IpcEventHandle event_handle;
    if (!ReadAll(socket, memory_handle.bytes.data(), backends::kIpcHandleBytes) ||
        !ReadAll(socket, event_handle.bytes.data(), backends::kIpcHandleBytes)) {
      return ChildFailure(2, "no handles");
    }
    absl::StatusOr<backends::DeviceAddress> shared = (*memory)->ImportMemory(memory_handle);
    absl::StatusOr<backends::DeviceEvent> event = (*memory)->ImportEvent(event_handle);
    if (!shared.ok() || !event.ok()) return ChildFailure(3, "import failed");
    absl::StatusOr<std::vector<backends::DeviceTensor>> source = Upload(**memory, {Pattern(7, kElements)});
    if (!source.ok()) return ChildFailure(4, std::string(source.status().message()));
    if (!(*memory)->CopyAsync(*shared, (*source)[0].address(), kElements * 4).ok() ||
        !(*memory)->RecordEvent(*event).ok()) {
      return ChildFailure(5, "enqueue failed");
    }
    const char recorded = 'R';
    if (!WriteAll(socket, &recorded, 1)) return 6;
    if (!(*memory)->SynchronizeStream(In(absl::Seconds(5))).ok()) return ChildFailure(7, "sync failed");
    char done = 0;
    if (!ReadAll(socket, &done, 1)) return 8;  // the parent has read the result
    return 0;
  });
  absl::StatusOr<std::unique_ptr<FakeDeviceMemory>> memory = FakeDeviceMemory::Create({});
  ASSERT_TRUE(memory.ok()) << memory.status();
  FakeDeviceMemory& m = **memory;
  absl::StatusOr<backends::DeviceAddress> shared = m.Allocate(kElements * 4, backends::Sharing::kExportable);
  ASSERT_TRUE(shared.ok());
  const ir::HostTensor old_bytes = Pattern(1, kElements);
  ASSERT_TRUE(m.CopyFromHostSync(*shared, old_bytes.data(), old_bytes.num_bytes(), In(absl::Seconds(5))).ok());
  absl::StatusOr<backends::DeviceEvent> event = m.CreateIpcEvent();
  ASSERT_TRUE(event.ok());
  EXPECT_TRUE(*m.QueryEvent(*event));  // never recorded: complete
  absl::StatusOr<backends::IpcMemHandle> memory_handle = m.ExportMemory(*shared);
  absl::StatusOr<backends::IpcEventHandle> event_handle = m.ExportEvent(*event);
  ASSERT_TRUE(memory_handle.ok() && event_handle.ok());
  ASSERT_TRUE(WriteAll(child.socket(), memory_handle->bytes.data(), backends::kIpcHandleBytes));
  ASSERT_TRUE(WriteAll(child.socket(), event_handle->bytes.data(), backends::kIpcHandleBytes));
  char recorded = 0;
  ASSERT_TRUE(ReadAll(child.socket(), &recorded, 1));
  EXPECT_FALSE(*m.QueryEvent(*event));  // the child's copy is still sleeping
  absl::StatusOr<backends::DeviceTensor> copy =
      backends::AllocateDeviceTensor(m, ir::TensorType{ir::DType::kI32, {kElements}});
  ASSERT_TRUE(copy.ok());
  ASSERT_TRUE(m.StreamWaitEvent(*event).ok());
  ASSERT_TRUE(m.CopyAsync(copy->address(), *shared, kElements * 4).ok());
  absl::StatusOr<ir::HostTensor> seen = backends::CopyToHost(m, *copy, In(absl::Seconds(5)));
  ASSERT_TRUE(seen.ok()) << seen.status();
  EXPECT_TRUE(seen->BitwiseEquals(Pattern(7, kElements)));
  EXPECT_TRUE(*m.QueryEvent(*event));
  ASSERT_TRUE(WriteAll(child.socket(), "D", 1));
  EXPECT_EQ(child.Wait(absl::Seconds(10)), 0);
}

// CUDA's rule: a wait concerns the most recent record made before it.
TEST(FakeDeviceMemory, StreamWaitConcernsOnlyRecordsMadeBeforeIt) {
  absl::StatusOr<std::unique_ptr<FakeDeviceMemory>> slow =
      FakeDeviceMemory::Create({.copy_delay = kSlowCopy});
  absl::StatusOr<std::unique_ptr<FakeDeviceMemory>> fast = FakeDeviceMemory::Create({});
  ASSERT_TRUE(slow.ok() && fast.ok());
  absl::StatusOr<backends::DeviceEvent> event = (*slow)->CreateIpcEvent();
  ASSERT_TRUE(event.ok());
  absl::StatusOr<backends::DeviceEvent> imported = (*fast)->ImportEvent(*(*slow)->ExportEvent(*event));
  ASSERT_TRUE(imported.ok()) << imported.status();
  absl::StatusOr<backends::DeviceAddress> a = (*slow)->Allocate(64, backends::Sharing::kExportable);
  absl::StatusOr<backends::DeviceAddress> b = (*slow)->Allocate(64, backends::Sharing::kExportable);
  ASSERT_TRUE(a.ok() && b.ok());

  // A wait enqueued before the record does not wait for it.
  ASSERT_TRUE((*fast)->StreamWaitEvent(*imported).ok());
  ASSERT_TRUE((*slow)->CopyAsync(*a, *b, 64).ok());
  ASSERT_TRUE((*slow)->RecordEvent(*event).ok());
  EXPECT_TRUE((*fast)->SynchronizeStream(In(kSlowCopy / 2)).ok());

  // A wait enqueued after it does; the host does not.
  const absl::Time start = absl::Now();
  ASSERT_TRUE((*fast)->StreamWaitEvent(*imported).ok());
  EXPECT_LT(absl::Now() - start, kSlowCopy / 2);
  EXPECT_FALSE(*(*fast)->QueryEvent(*imported));
  const absl::Status early = (*fast)->SynchronizeStream(In(absl::Milliseconds(50)));
  EXPECT_EQ(early.code(), absl::StatusCode::kDeadlineExceeded) << early;
  EXPECT_TRUE((*fast)->SynchronizeStream(In(absl::Seconds(10))).ok());
  EXPECT_TRUE(*(*slow)->QueryEvent(*event));
  EXPECT_TRUE((*fast)->DestroyEvent(*imported).ok());
  EXPECT_EQ((*fast)->QueryEvent(*imported).status().code(), absl::StatusCode::kInvalidArgument);
}

// Side streams run beside the main stream, ordered with it by events only.
TEST(FakeDeviceMemory, ASideStreamRunsBesideTheMainStreamAndEventsOrderThem) {
  absl::StatusOr<std::unique_ptr<FakeDeviceMemory>> memory =
      FakeDeviceMemory::Create({.copy_delay = absl::Milliseconds(200)});
  ASSERT_TRUE(memory.ok());
  FakeDeviceMemory& m = **memory;
  absl::StatusOr<backends::StreamId> side = m.CreateSideStream();
  ASSERT_TRUE(side.ok());
  EXPECT_EQ(*side, 1);
  const backends::DeviceEvent copied = *m.CreateIpcEvent(), released = *m.CreateIpcEvent();

  // The side stream waits for the main stream's (slow) copy.
  const backends::DeviceAddress source = *m.Allocate(64, backends::Sharing::kPrivate);
  const backends::DeviceAddress target = *m.Allocate(64, backends::Sharing::kPrivate);
  std::vector<int32_t> pattern(16);
  for (int i = 0; i < 16; ++i) pattern[i] = 7 * i + 1;
  ASSERT_TRUE(m.CopyFromHostSync(source, pattern.data(), 64, In(absl::Seconds(10))).ok());
  ASSERT_TRUE(m.CopyAsync(target, source, 64).ok());
  ASSERT_TRUE(m.RecordEvent(copied).ok());
  ASSERT_TRUE(m.StreamWaitEventOn(*side, copied).ok());
  std::vector<int32_t> seen(16, 0);
  ASSERT_TRUE(m.EnqueueHostWork(*side, [&] { std::memcpy(seen.data(), reinterpret_cast<void*>(target), 64); }).ok());

  // The main stream waits for the side stream, whose work runs while the
  // main stream is stuck: it goes on only once that work lets it.
  absl::Notification release;
  ASSERT_TRUE(m.EnqueueHostWork(*side, [&] { release.WaitForNotificationWithTimeout(absl::Seconds(10)); }).ok());
  ASSERT_TRUE(m.RecordEventOn(*side, released).ok());
  ASSERT_TRUE(m.StreamWaitEvent(released).ok());
  EXPECT_EQ(m.SynchronizeStream(In(absl::Milliseconds(400))).code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(seen, pattern);  // the side stream ran after the copy, before the release
  release.Notify();
  EXPECT_TRUE(m.SynchronizeStream(In(absl::Seconds(10))).ok());
  EXPECT_TRUE(*m.QueryEvent(released));

  // The main stream is not a side stream, and unknown ones are refused.
  EXPECT_EQ(m.RecordEventOn(0, copied).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m.StreamWaitEventOn(7, copied).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m.EnqueueHostWork(7, [] {}).code(), absl::StatusCode::kInvalidArgument);
}

TEST(FakeDeviceMemory, HandleOfAnExitedProcessIsUnavailableNamingThePid) {
  ForkedChild child([](int socket) {
    absl::StatusOr<std::unique_ptr<FakeDeviceMemory>> memory = FakeDeviceMemory::Create({});
    if (!memory.ok()) return 1;
    absl::StatusOr<backends::DeviceAddress> base = (*memory)->Allocate(4096, backends::Sharing::kExportable);
    absl::StatusOr<backends::DeviceEvent> event = (*memory)->CreateIpcEvent();
    if (!base.ok() || !event.ok()) return 2;
    absl::StatusOr<backends::IpcMemHandle> memory_handle = (*memory)->ExportMemory(*base);
    absl::StatusOr<backends::IpcEventHandle> event_handle = (*memory)->ExportEvent(*event);
    if (!memory_handle.ok() || !event_handle.ok()) return 3;
    if (!WriteAll(socket, memory_handle->bytes.data(), backends::kIpcHandleBytes) ||
        !WriteAll(socket, event_handle->bytes.data(), backends::kIpcHandleBytes)) {
      return 4;
    }
    return 0;
  });
  backends::IpcMemHandle memory_handle;
  backends::IpcEventHandle event_handle;
  ASSERT_TRUE(ReadAll(child.socket(), memory_handle.bytes.data(), backends::kIpcHandleBytes));
  ASSERT_TRUE(ReadAll(child.socket(), event_handle.bytes.data(), backends::kIpcHandleBytes));
  const pid_t pid = child.pid();
  ASSERT_EQ(child.Wait(absl::Seconds(10)), 0);
  absl::StatusOr<std::unique_ptr<FakeDeviceMemory>> memory = FakeDeviceMemory::Create({});
  ASSERT_TRUE(memory.ok());
  absl::StatusOr<backends::DeviceAddress> address = (*memory)->ImportMemory(memory_handle);
  EXPECT_EQ(address.status().code(), absl::StatusCode::kUnavailable) << address.status();
  EXPECT_NE(address.status().message().find(absl::StrCat("process ", pid)), absl::string_view::npos)
      << address.status();
  absl::StatusOr<backends::DeviceEvent> event = (*memory)->ImportEvent(event_handle);
  EXPECT_EQ(event.status().code(), absl::StatusCode::kUnavailable) << event.status();
  EXPECT_EQ((*memory)->LiveObjectsForTesting(), 0);
}

TEST(FakeDeviceMemory, APrivateAllocationCannotBeExported) {
  absl::StatusOr<std::unique_ptr<FakeDeviceMemory>> memory = FakeDeviceMemory::Create({});
  ASSERT_TRUE(memory.ok());
  absl::StatusOr<backends::DeviceAddress> base = (*memory)->Allocate(256, backends::Sharing::kPrivate);
  ASSERT_TRUE(base.ok()) << base.status();
  absl::StatusOr<backends::IpcMemHandle> handle = (*memory)->ExportMemory(*base);
  ASSERT_FALSE(handle.ok());
  EXPECT_EQ(handle.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(handle.status().message(), HasSubstr("a private allocation"));
  EXPECT_TRUE((*memory)->Free(*base).ok());
}

TEST(FakeDeviceMemory, RejectsFreedHandlesForeignHandlesAndStrayRanges) {
  absl::StatusOr<std::unique_ptr<FakeDeviceMemory>> memory = FakeDeviceMemory::Create({});
  ASSERT_TRUE(memory.ok());
  FakeDeviceMemory& m = **memory;
  absl::StatusOr<backends::DeviceAddress> base = m.Allocate(1000, backends::Sharing::kExportable);
  ASSERT_TRUE(base.ok());
  absl::StatusOr<backends::IpcMemHandle> handle = m.ExportMemory(*base);
  ASSERT_TRUE(handle.ok());
  // Within one process, too.
  absl::StatusOr<backends::DeviceAddress> again = m.ImportMemory(*handle);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(m.CloseImported(*again).ok());

  EXPECT_EQ(m.CopyAsync(*base, *base + 512, 1000).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m.CopyAsync(*base + 4096, *base, 8).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(m.CopyAsync(*base, *base + 500, 500).ok());

  ASSERT_TRUE(m.Free(*base).ok());
  ASSERT_TRUE(m.SynchronizeStream(In(absl::Seconds(5))).ok());  // the deferred unmap has run
  absl::StatusOr<backends::DeviceAddress> freed = m.ImportMemory(*handle);
  EXPECT_EQ(freed.status().code(), absl::StatusCode::kDataLoss) << freed.status();
  EXPECT_NE(freed.status().message().find("freed"), absl::string_view::npos) << freed.status();

  backends::IpcMemHandle garbage;
  garbage.bytes.fill(std::byte{0x5A});
  EXPECT_EQ(m.ImportMemory(garbage).status().code(), absl::StatusCode::kInvalidArgument);
  backends::IpcEventHandle not_an_event;
  std::memcpy(not_an_event.bytes.data(), handle->bytes.data(), backends::kIpcHandleBytes);
  EXPECT_EQ(m.ImportEvent(not_an_event).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m.LiveObjectsForTesting(), 0);
}

// ==== IpcTransport between two processes.

}  // namespace
}  // namespace tandem::fake
