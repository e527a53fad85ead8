// FakeDeviceMemory: a DeviceMemory (device_memory.h) made of host shared
// memory, so the CUDA IPC protocol of ipc_transport.h can be tested across
// real processes on a machine without a GPU.
//
// Memory: every allocation is its own memfd (memfd_create + ftruncate +
// mmap MAP_SHARED); the DeviceAddress is the address of the mapping in this
// process. An IpcMemHandle names (magic, pid, descriptor number, size,
// inode); ImportMemory opens /proc/<pid>/fd/<fd> and maps it, which works
// between processes of one user and within one process. A handle whose
// exporting process is gone is Unavailable naming the pid; one whose
// descriptor is closed (the exporter freed it) or now names another file is
// DataLoss. Copies check that both ranges lie inside an allocation or import
// of this object (InvalidArgument otherwise), so a protocol that copies from
// a closed import fails loudly instead of reading freed memory.
//
// The stream is real asynchrony: a worker thread runs the enqueued copies,
// records and waits in order, after Options::copy_delay per copy, so a
// protocol that forgets an event wait or reuses memory too early reads stale
// or overwritten bytes in tests. Each side stream is another such worker;
// EnqueueHostWork runs a function in a side stream's order (what the fake
// NCCL's transfers are, actor/nccl/fake_nccl.h).
//
// Events: each interprocess event is a small shared page (its own memfd)
// holding a recorded generation and a completed generation. RecordEvent
// takes the next recorded generation at call time and the worker publishes
// it as completed when it gets there; StreamWaitEvent reads the recorded
// generation at call time and the worker waits (futex on the shared page)
// until the completed one reaches it; QueryEvent compares the two. This is
// CUDA's rule: a wait or query concerns the most recent record made before
// it. Event handles work like memory handles.
//
// Faults: Poison() plays a kernel that faulted (CUDA's sticky errors, such
// as an illegal address): the work still queued is dropped, and from then on
// every stream call and Allocate fails with Internal "fake device: the
// stream is poisoned: <why>" (Free, imports' closing and the destructor still
// release what they hold).
//
// Ownership and threading: owns its worker thread, allocations, imports and
// events; the destructor drops stream work not yet run (a wait on an event
// that never completes does not keep it), joins the worker and unmaps
// everything. Every method is thread-safe.
#ifndef TANDEM_BACKENDS_FAKE_FAKE_DEVICE_MEMORY_H_
#define TANDEM_BACKENDS_FAKE_FAKE_DEVICE_MEMORY_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "backends/device_memory.h"

namespace tandem::fake {

class FakeDeviceMemory final : public backends::DeviceMemory {
 public:
  struct Options {
    // The worker sleeps this long before each copy: makes races visible.
    absl::Duration copy_delay = absl::ZeroDuration();
  };

  static absl::StatusOr<std::unique_ptr<FakeDeviceMemory>> Create(Options options);
  FakeDeviceMemory(const FakeDeviceMemory&) = delete;
  FakeDeviceMemory& operator=(const FakeDeviceMemory&) = delete;
  ~FakeDeviceMemory() override;

  std::string name() const override { return "fake"; }

  absl::StatusOr<backends::DeviceAddress> Allocate(int64_t bytes, backends::Sharing sharing) override;
  absl::Status Free(backends::DeviceAddress base) override;
  absl::StatusOr<backends::IpcMemHandle> ExportMemory(backends::DeviceAddress base) override;
  absl::StatusOr<backends::DeviceAddress> ImportMemory(const backends::IpcMemHandle& handle) override;
  absl::Status CloseImported(backends::DeviceAddress address) override;
  int64_t allocated_bytes() const override;

  absl::Status CopyAsync(backends::DeviceAddress destination, backends::DeviceAddress source, int64_t bytes) override;
  absl::Status RecordEvent(backends::DeviceEvent event) override;
  absl::Status StreamWaitEvent(backends::DeviceEvent event) override;

  absl::StatusOr<backends::StreamId> CreateSideStream() override;
  absl::Status RecordEventOn(backends::StreamId stream, backends::DeviceEvent event) override;
  absl::Status StreamWaitEventOn(backends::StreamId stream, backends::DeviceEvent event) override;
  // Runs `work` on side stream `stream`'s worker, in that stream's order, as
  // a kernel would run there. `work` may block (a transfer waiting for its
  // peer) but must return by itself: the destructor waits for it.
  absl::Status EnqueueHostWork(backends::StreamId stream, std::function<void()> work);

  absl::Status SynchronizeStream(absl::Time deadline) override;
  absl::Status CopyToHostSync(void* destination, backends::DeviceAddress source, int64_t bytes,
                              absl::Time deadline) override;
  absl::Status CopyFromHostSync(backends::DeviceAddress destination, const void* source, int64_t bytes,
                                absl::Time deadline) override;

  absl::Status CopyToHostAsync(void* destination, backends::DeviceAddress source, int64_t bytes) override;
  absl::Status CopyFromHostAsync(backends::DeviceAddress destination, const void* source, int64_t bytes) override;
  absl::StatusOr<void*> AllocateHostStaging(int64_t bytes) override;
  void FreeHostStaging(void* staging) override;

  absl::StatusOr<backends::DeviceEvent> CreateIpcEvent() override;
  absl::StatusOr<backends::IpcEventHandle> ExportEvent(backends::DeviceEvent event) override;
  absl::StatusOr<backends::DeviceEvent> ImportEvent(const backends::IpcEventHandle& handle) override;
  absl::Status DestroyEvent(backends::DeviceEvent event) override;
  absl::StatusOr<bool> QueryEvent(backends::DeviceEvent event) override;

  // Poisons the stream with `why` (see above); the first poison wins.
  void Poison(absl::Status why);

  // For tests: live allocations, imports and events of this object.
  int64_t LiveObjectsForTesting() const;

  class Mapping;  // one mapped memfd; defined in the .cc

 private:
  // One piece of stream work, run by the worker thread.
  struct StreamOp {
    enum class Kind : uint8_t { kCopy, kRecord, kWait, kRelease, kHost };
    Kind kind = Kind::kCopy;
    std::byte* destination = nullptr;  // kCopy
    const std::byte* source = nullptr;
    int64_t bytes = 0;
    std::shared_ptr<Mapping> mapping;  // kRecord/kWait: the event page; kRelease: what to unmap
    uint64_t generation = 0;           // kRecord: to publish; kWait: to wait for
    std::function<void()> work;        // kHost
  };
  // One stream: its queue and the worker that runs it (lanes_[0] is the
  // main stream).
  struct Lane {
    std::deque<StreamOp> queue;
    bool running_op = false;  // the worker is executing one op
    std::thread worker;
  };
  struct Event {
    std::shared_ptr<Mapping> page;
    bool imported = false;
  };

  explicit FakeDeviceMemory(Options options);
  // OK when [address, address + bytes) lies in one allocation or import.
  absl::Status CheckRange(backends::DeviceAddress address, int64_t bytes, const char* what) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  absl::StatusOr<std::shared_ptr<Mapping>> FindEvent(backends::DeviceEvent event) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  void Enqueue(StreamOp op, backends::StreamId stream = 0) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The three asynchronous copies' one path: checks `bytes` and the ends
  // on the device (each must lie in one allocation or import), then
  // enqueues the copy on the main stream.
  absl::Status EnqueueCopy(std::byte* destination, bool destination_on_device, const std::byte* source,
                           bool source_on_device, int64_t bytes);
  // A new stream with its worker; its index in lanes_.
  backends::StreamId AddLane() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The side stream `stream`, or InvalidArgument.
  absl::Status CheckSideStream(backends::StreamId stream) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  absl::Status Record(backends::StreamId stream, backends::DeviceEvent event);
  absl::Status Wait(backends::StreamId stream, backends::DeviceEvent event);
  // Waits until the stream is idle (no queued or running work) or poisoned.
  absl::Status AwaitIdleLocked(absl::Time deadline, const char* why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void WorkerLoop(Lane* lane);

  const Options options_;
  mutable absl::Mutex mu_;
  std::map<backends::DeviceAddress, std::shared_ptr<Mapping>> allocations_ ABSL_GUARDED_BY(mu_);  // by base
  std::set<backends::DeviceAddress> exportable_ ABSL_GUARDED_BY(mu_);  // bases of exportable allocations
  std::map<backends::DeviceAddress, std::shared_ptr<Mapping>> imports_ ABSL_GUARDED_BY(mu_);  // by address
  std::map<uint64_t, Event> events_ ABSL_GUARDED_BY(mu_);                                     // by id
  int64_t allocated_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // as asked, of allocations_
  absl::Status poison_ ABSL_GUARDED_BY(mu_);
  uint64_t next_event_id_ ABSL_GUARDED_BY(mu_) = 1;
  // The streams; the vector grows (CreateSideStream), a Lane never moves.
  std::vector<std::unique_ptr<Lane>> lanes_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace tandem::fake

#endif  // TANDEM_BACKENDS_FAKE_FAKE_DEVICE_MEMORY_H_
