#include "backends/fake/fake_device_memory.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "ir/errno_status.h"
#include "ir/process_stat.h"

namespace tandem::fake {
namespace {

constexpr uint64_t kMemoryHandleMagic = 0x314d454d4b464454;  // "TDFKMEM1"
constexpr uint64_t kEventHandleMagic = 0x3154564546464454;   // "TDFFEVT1"
constexpr uint64_t kEventPageMagic = 0x3150564546464454;     // "TDFFEVP1"
constexpr uint64_t kPageBytes = 4096;
// Longest single futex sleep of the worker: it re-checks for shutdown this
// often while waiting for an event.
constexpr absl::Duration kWaitSlice = absl::Milliseconds(10);

// The shared page of one interprocess event.
struct EventPage {
  uint64_t magic;
  std::atomic<uint64_t> recorded;   // generation of the latest RecordEvent call
  std::atomic<uint64_t> completed;  // highest generation the streams reached
  std::atomic<uint32_t> wake_seq;   // futex word: bumped after `completed` moves
};
static_assert(sizeof(EventPage) <= kPageBytes);
static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<uint32_t>::is_always_lock_free);

// What a fake handle holds, memory or event alike.
struct HandleFields {
  uint64_t magic;
  int32_t pid;
  int32_t fd;
  uint64_t bytes;  // the allocation's size (memory) or the page's (event)
  uint64_t inode;
  uint64_t device;
  uint64_t reserved[3];
};
static_assert(sizeof(HandleFields) == backends::kIpcHandleBytes);

absl::Status Errno(absl::string_view what) {
  return ir::ErrnoStatus(absl::StatusCode::kInternal, absl::StrCat("fake device: ", what));
}

uint64_t RoundToPages(uint64_t bytes) { return std::max<uint64_t>(kPageBytes, (bytes + kPageBytes - 1) / kPageBytes * kPageBytes); }

// True when process `pid` has exited (gone, or a zombie not yet reaped).
bool ProcessGone(int32_t pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH) return true;
  const std::optional<ir::ProcessStat> stat = ir::ReadProcessStat(pid);
  return !stat.has_value() || stat->exited();
}

}  // namespace

// One mapped memfd. Exported objects keep their descriptor open (that is
// what /proc/<pid>/fd/<fd> finds); imports close it once mapped.
class FakeDeviceMemory::Mapping {
 public:
  Mapping(int fd, std::byte* base, uint64_t bytes, uint64_t mapped_bytes)
      : fd_(fd), base_(base), bytes_(bytes), mapped_bytes_(mapped_bytes) {}
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() {
    munmap(base_, mapped_bytes_);
    if (fd_ >= 0) close(fd_);
  }
  int fd() const { return fd_; }
  std::byte* base() const { return base_; }
  uint64_t bytes() const { return bytes_; }
  EventPage& event() const { return *reinterpret_cast<EventPage*>(base_); }

 private:
  int fd_;
  std::byte* base_;
  uint64_t bytes_;
  uint64_t mapped_bytes_;
};

namespace {

using Mapping = FakeDeviceMemory::Mapping;

absl::StatusOr<std::shared_ptr<Mapping>> CreateShared(const char* name, uint64_t bytes) {
  const int fd = memfd_create(name, MFD_CLOEXEC);
  if (fd < 0) return Errno("memfd_create");
  const uint64_t mapped = RoundToPages(bytes);
  if (ftruncate(fd, static_cast<off_t>(mapped)) != 0) {
    absl::Status status =
        ir::ErrnoStatus(absl::StatusCode::kResourceExhausted, absl::StrCat("fake device: cannot allocate ", bytes, " bytes"));
    close(fd);
    return status;
  }
  void* base = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    absl::Status status =
        ir::ErrnoStatus(absl::StatusCode::kResourceExhausted, absl::StrCat("fake device: cannot map ", bytes, " bytes"));
    close(fd);
    return status;
  }
  return std::make_shared<Mapping>(fd, static_cast<std::byte*>(base), bytes, mapped);
}

template <typename Handle>
Handle MakeHandle(uint64_t magic, const Mapping& mapping) {
  struct stat info;
  HandleFields fields{};
  fields.magic = magic;
  fields.pid = getpid();
  fields.fd = mapping.fd();
  fields.bytes = mapping.bytes();
  if (fstat(mapping.fd(), &info) == 0) {
    fields.inode = info.st_ino;
    fields.device = info.st_dev;
  }
  Handle handle;
  std::memcpy(handle.bytes.data(), &fields, sizeof(fields));
  return handle;
}

// Opens and maps what a handle names, checking that it is still the object
// that was exported.
absl::StatusOr<std::shared_ptr<Mapping>> OpenHandle(const std::array<std::byte, backends::kIpcHandleBytes>& bytes,
                                                    uint64_t magic, const char* what) {
  HandleFields fields;
  std::memcpy(&fields, bytes.data(), sizeof(fields));
  if (fields.magic != magic || fields.pid <= 0 || fields.fd < 0) {
    return absl::InvalidArgumentError(absl::StrCat("fake device: not a fake ", what, " handle"));
  }
  const std::string path = absl::StrCat("/proc/", fields.pid, "/fd/", fields.fd);
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    const int error = errno;
    if (ProcessGone(fields.pid)) {
      return absl::UnavailableError(absl::StrCat("fake device: the process ", fields.pid, " that exported this ",
                                                 what, " is gone"));
    }
    if (error == ENOENT) {
      return absl::DataLossError(absl::StrCat("fake device: the ", what, " exported by process ", fields.pid,
                                              " was freed (descriptor ", fields.fd, " is closed)"));
    }
    return ir::ErrnoStatus(absl::StatusCode::kUnavailable,
                           absl::StrCat("fake device: cannot open the ", what, " exported by process ", fields.pid,
                                        " (", path, ")"),
                           error);
  }
  struct stat info;
  const uint64_t mapped = RoundToPages(fields.bytes);
  if (fstat(fd, &info) != 0 || info.st_ino != fields.inode || info.st_dev != fields.device ||
      static_cast<uint64_t>(info.st_size) != mapped) {
    close(fd);
    return absl::DataLossError(absl::StrCat("fake device: the ", what, " exported by process ", fields.pid,
                                            " was freed (descriptor ", fields.fd, " now names another file)"));
  }
  void* base = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) return Errno(absl::StrCat("mmap of an imported ", what));
  return std::make_shared<Mapping>(-1, static_cast<std::byte*>(base), fields.bytes, mapped);
}

void FutexWait(std::atomic<uint32_t>& word, uint32_t expected, absl::Duration timeout) {
  timespec ts = absl::ToTimespec(timeout);
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void FutexWakeAll(std::atomic<uint32_t>& word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

}  // namespace

FakeDeviceMemory::FakeDeviceMemory(Options options) : options_(options) {}

absl::StatusOr<std::unique_ptr<FakeDeviceMemory>> FakeDeviceMemory::Create(Options options) {
  std::unique_ptr<FakeDeviceMemory> memory(new FakeDeviceMemory(options));
  {
    absl::MutexLock lock(&memory->mu_);
    memory->AddLane();  // lanes_[0]: the main stream
  }
  return memory;
}

FakeDeviceMemory::~FakeDeviceMemory() {
  std::vector<Lane*> lanes;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    for (const std::unique_ptr<Lane>& lane : lanes_) lanes.push_back(lane.get());
  }
  for (Lane* lane : lanes) {
    if (lane->worker.joinable()) lane->worker.join();
  }
}

backends::StreamId FakeDeviceMemory::AddLane() {
  lanes_.push_back(std::make_unique<Lane>());
  Lane* lane = lanes_.back().get();
  lane->worker = std::thread([this, lane] { WorkerLoop(lane); });
  return static_cast<backends::StreamId>(lanes_.size() - 1);
}

absl::StatusOr<backends::StreamId> FakeDeviceMemory::CreateSideStream() {
  absl::MutexLock lock(&mu_);
  if (stopping_) return absl::FailedPreconditionError("fake device: a stream created during teardown");
  return AddLane();
}

absl::Status FakeDeviceMemory::CheckSideStream(backends::StreamId stream) const {
  if (stream <= 0 || stream >= static_cast<backends::StreamId>(lanes_.size())) {
    return absl::InvalidArgumentError(absl::StrCat("fake device: no side stream ", stream));
  }
  return absl::OkStatus();
}

absl::Status FakeDeviceMemory::EnqueueHostWork(backends::StreamId stream, std::function<void()> work) {
  absl::MutexLock lock(&mu_);
  if (!poison_.ok()) return poison_;
  if (absl::Status status = CheckSideStream(stream); !status.ok()) return status;
  Enqueue({.kind = StreamOp::Kind::kHost, .work = std::move(work)}, stream);
  return absl::OkStatus();
}

int64_t FakeDeviceMemory::LiveObjectsForTesting() const {
  absl::ReaderMutexLock lock(&mu_);
  return static_cast<int64_t>(allocations_.size() + imports_.size() + events_.size());
}

int64_t FakeDeviceMemory::allocated_bytes() const {
  absl::ReaderMutexLock lock(&mu_);
  return allocated_bytes_;
}

void FakeDeviceMemory::Poison(absl::Status why) {
  std::deque<StreamOp> dropped;  // released outside the lock
  absl::MutexLock lock(&mu_);
  if (!poison_.ok()) return;
  poison_ = absl::InternalError(absl::StrCat("fake device: the stream is poisoned: ", why.message()));
  for (const std::unique_ptr<Lane>& lane : lanes_) {
    while (!lane->queue.empty()) {
      dropped.push_back(std::move(lane->queue.front()));
      lane->queue.pop_front();
    }
  }
}

absl::StatusOr<backends::DeviceAddress> FakeDeviceMemory::Allocate(int64_t bytes, backends::Sharing sharing) {
  if (bytes < 0) return absl::InvalidArgumentError(absl::StrCat("fake device: cannot allocate ", bytes, " bytes"));
  {
    absl::ReaderMutexLock lock(&mu_);
    if (!poison_.ok()) return poison_;
  }
  absl::StatusOr<std::shared_ptr<Mapping>> mapping = CreateShared("tandem-fake-device", static_cast<uint64_t>(bytes));
  if (!mapping.ok()) return mapping.status();
  const backends::DeviceAddress address = reinterpret_cast<backends::DeviceAddress>((*mapping)->base());
  absl::MutexLock lock(&mu_);
  allocations_.emplace(address, *std::move(mapping));
  if (sharing == backends::Sharing::kExportable) exportable_.insert(address);
  allocated_bytes_ += bytes;
  return address;
}

absl::Status FakeDeviceMemory::Free(backends::DeviceAddress base) {
  absl::MutexLock lock(&mu_);
  auto it = allocations_.find(base);
  if (it == allocations_.end()) {
    return absl::InvalidArgumentError(absl::StrCat("fake device: free of ", absl::Hex(base), ", not an allocation"));
  }
  // Unmapped once the stream has run the work enqueued before, as cudaFree
  // waits for the device.
  allocated_bytes_ -= static_cast<int64_t>(it->second->bytes());
  Enqueue({.kind = StreamOp::Kind::kRelease, .mapping = std::move(it->second)});
  allocations_.erase(it);
  exportable_.erase(base);
  return absl::OkStatus();
}

absl::StatusOr<backends::IpcMemHandle> FakeDeviceMemory::ExportMemory(backends::DeviceAddress base) {
  absl::ReaderMutexLock lock(&mu_);
  auto it = allocations_.find(base);
  if (it == allocations_.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("fake device: export of ", absl::Hex(base), ", not the base of an allocation"));
  }
  if (!exportable_.contains(base)) {
    return absl::InvalidArgumentError(absl::StrCat("fake device: export of ", absl::Hex(base),
                                                   ", a private allocation (allocate it exportable)"));
  }
  return MakeHandle<backends::IpcMemHandle>(kMemoryHandleMagic, *it->second);
}

absl::StatusOr<backends::DeviceAddress> FakeDeviceMemory::ImportMemory(const backends::IpcMemHandle& handle) {
  absl::StatusOr<std::shared_ptr<Mapping>> mapping = OpenHandle(handle.bytes, kMemoryHandleMagic, "memory");
  if (!mapping.ok()) return mapping.status();
  const backends::DeviceAddress address = reinterpret_cast<backends::DeviceAddress>((*mapping)->base());
  absl::MutexLock lock(&mu_);
  imports_.emplace(address, *std::move(mapping));
  return address;
}

absl::Status FakeDeviceMemory::CloseImported(backends::DeviceAddress address) {
  absl::MutexLock lock(&mu_);
  auto it = imports_.find(address);
  if (it == imports_.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("fake device: close of ", absl::Hex(address), ", not an imported allocation"));
  }
  Enqueue({.kind = StreamOp::Kind::kRelease, .mapping = std::move(it->second)});
  imports_.erase(it);
  return absl::OkStatus();
}

absl::Status FakeDeviceMemory::CheckRange(backends::DeviceAddress address, int64_t bytes, const char* what) const {
  for (const auto* map : {&allocations_, &imports_}) {
    auto it = map->upper_bound(address);
    if (it == map->begin()) continue;
    --it;
    if (address >= it->first && address - it->first + static_cast<uint64_t>(bytes) <= it->second->bytes()) {
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError(absl::StrCat("fake device: the ", what, " range [", absl::Hex(address), ", +",
                                                 bytes, ") is not inside a live allocation or import"));
}

absl::StatusOr<std::shared_ptr<Mapping>> FakeDeviceMemory::FindEvent(backends::DeviceEvent event) const {
  auto it = events_.find(event.id);
  if (it == events_.end()) {
    return absl::InvalidArgumentError(absl::StrCat("fake device: no event ", event.id));
  }
  return it->second.page;
}

void FakeDeviceMemory::Enqueue(StreamOp op, backends::StreamId stream) {
  // A poisoned stream runs nothing: a release happens at once (when `op`
  // goes), other work is dropped (its caller returned the poison).
  if (poison_.ok()) lanes_[static_cast<size_t>(stream)]->queue.push_back(std::move(op));
}

absl::Status FakeDeviceMemory::EnqueueCopy(std::byte* destination, bool destination_on_device, const std::byte* source,
                                           bool source_on_device, int64_t bytes) {
  if (bytes < 0) return absl::InvalidArgumentError(absl::StrCat("fake device: copy of ", bytes, " bytes"));
  if (bytes == 0) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  if (!poison_.ok()) return poison_;
  if (destination_on_device) {
    if (absl::Status status = CheckRange(reinterpret_cast<backends::DeviceAddress>(destination), bytes, "destination");
        !status.ok()) {
      return status;
    }
  }
  if (source_on_device) {
    if (absl::Status status = CheckRange(reinterpret_cast<backends::DeviceAddress>(source), bytes, "source");
        !status.ok()) {
      return status;
    }
  }
  Enqueue({.kind = StreamOp::Kind::kCopy, .destination = destination, .source = source, .bytes = bytes});
  return absl::OkStatus();
}

absl::Status FakeDeviceMemory::CopyAsync(backends::DeviceAddress destination, backends::DeviceAddress source,
                                         int64_t bytes) {
  return EnqueueCopy(reinterpret_cast<std::byte*>(destination), /*destination_on_device=*/true,
                     reinterpret_cast<const std::byte*>(source), /*source_on_device=*/true, bytes);
}

absl::Status FakeDeviceMemory::Record(backends::StreamId stream, backends::DeviceEvent event) {
  absl::MutexLock lock(&mu_);
  if (!poison_.ok()) return poison_;
  if (stream != 0) {
    if (absl::Status status = CheckSideStream(stream); !status.ok()) return status;
  }
  absl::StatusOr<std::shared_ptr<Mapping>> page = FindEvent(event);
  if (!page.ok()) return page.status();
  const uint64_t generation = (*page)->event().recorded.fetch_add(1, std::memory_order_acq_rel) + 1;
  Enqueue({.kind = StreamOp::Kind::kRecord, .mapping = *std::move(page), .generation = generation}, stream);
  return absl::OkStatus();
}

absl::Status FakeDeviceMemory::Wait(backends::StreamId stream, backends::DeviceEvent event) {
  absl::MutexLock lock(&mu_);
  if (!poison_.ok()) return poison_;
  if (stream != 0) {
    if (absl::Status status = CheckSideStream(stream); !status.ok()) return status;
  }
  absl::StatusOr<std::shared_ptr<Mapping>> page = FindEvent(event);
  if (!page.ok()) return page.status();
  const uint64_t target = (*page)->event().recorded.load(std::memory_order_acquire);
  Enqueue({.kind = StreamOp::Kind::kWait, .mapping = *std::move(page), .generation = target}, stream);
  return absl::OkStatus();
}

absl::Status FakeDeviceMemory::RecordEvent(backends::DeviceEvent event) { return Record(0, event); }
absl::Status FakeDeviceMemory::StreamWaitEvent(backends::DeviceEvent event) { return Wait(0, event); }

absl::Status FakeDeviceMemory::RecordEventOn(backends::StreamId stream, backends::DeviceEvent event) {
  if (stream == 0) return absl::InvalidArgumentError("fake device: side stream 0 (the main stream's events are RecordEvent's)");
  return Record(stream, event);
}

absl::Status FakeDeviceMemory::StreamWaitEventOn(backends::StreamId stream, backends::DeviceEvent event) {
  if (stream == 0) return absl::InvalidArgumentError("fake device: side stream 0 (the main stream waits with StreamWaitEvent)");
  return Wait(stream, event);
}

absl::Status FakeDeviceMemory::AwaitIdleLocked(absl::Time deadline, const char* why) {
  const Lane& main = *lanes_[0];
  auto idle = [this, &main]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return !poison_.ok() || (main.queue.empty() && !main.running_op);
  };
  if (!mu_.AwaitWithDeadline(absl::Condition(&idle), deadline)) {
    return absl::DeadlineExceededError(absl::StrCat("fake device: ", why, ": the stream still has ",
                                                    main.queue.size() + (main.running_op ? 1 : 0),
                                                    " operations pending at the deadline"));
  }
  return poison_;
}

absl::Status FakeDeviceMemory::SynchronizeStream(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  return AwaitIdleLocked(deadline, "stream synchronize");
}

absl::Status FakeDeviceMemory::CopyToHostSync(void* destination, backends::DeviceAddress source, int64_t bytes,
                                              absl::Time deadline) {
  if (bytes < 0) return absl::InvalidArgumentError(absl::StrCat("fake device: copy of ", bytes, " bytes"));
  absl::MutexLock lock(&mu_);
  if (bytes > 0) {
    if (absl::Status status = CheckRange(source, bytes, "source"); !status.ok()) return status;
  }
  if (absl::Status status = AwaitIdleLocked(deadline, "copy to host"); !status.ok()) return status;
  // The worker cannot start anything while the lock is held.
  if (bytes > 0) std::memcpy(destination, reinterpret_cast<const void*>(source), static_cast<size_t>(bytes));
  return absl::OkStatus();
}

absl::Status FakeDeviceMemory::CopyFromHostSync(backends::DeviceAddress destination, const void* source, int64_t bytes,
                                                absl::Time deadline) {
  if (bytes < 0) return absl::InvalidArgumentError(absl::StrCat("fake device: copy of ", bytes, " bytes"));
  absl::MutexLock lock(&mu_);
  if (bytes > 0) {
    if (absl::Status status = CheckRange(destination, bytes, "destination"); !status.ok()) return status;
  }
  if (absl::Status status = AwaitIdleLocked(deadline, "copy from host"); !status.ok()) return status;
  if (bytes > 0) std::memcpy(reinterpret_cast<void*>(destination), source, static_cast<size_t>(bytes));
  return absl::OkStatus();
}

absl::Status FakeDeviceMemory::CopyToHostAsync(void* destination, backends::DeviceAddress source, int64_t bytes) {
  return EnqueueCopy(static_cast<std::byte*>(destination), /*destination_on_device=*/false,
                     reinterpret_cast<const std::byte*>(source), /*source_on_device=*/true, bytes);
}

absl::Status FakeDeviceMemory::CopyFromHostAsync(backends::DeviceAddress destination, const void* source,
                                                 int64_t bytes) {
  return EnqueueCopy(reinterpret_cast<std::byte*>(destination), /*destination_on_device=*/true,
                     static_cast<const std::byte*>(source), /*source_on_device=*/false, bytes);
}

absl::StatusOr<void*> FakeDeviceMemory::AllocateHostStaging(int64_t bytes) {
  if (bytes < 0) return absl::InvalidArgumentError(absl::StrCat("fake device: host staging of ", bytes, " bytes"));
  void* staging = std::aligned_alloc(256, static_cast<size_t>((std::max<int64_t>(bytes, 1) + 255) / 256 * 256));
  if (staging == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("fake device: no host staging of ", bytes, " bytes"));
  }
  return staging;
}

void FakeDeviceMemory::FreeHostStaging(void* staging) { std::free(staging); }

absl::StatusOr<backends::DeviceEvent> FakeDeviceMemory::CreateIpcEvent() {
  absl::StatusOr<std::shared_ptr<Mapping>> page = CreateShared("tandem-fake-event", kPageBytes);
  if (!page.ok()) return page.status();
  EventPage& event = (*page)->event();
  event.magic = kEventPageMagic;
  event.recorded.store(0);
  event.completed.store(0);
  event.wake_seq.store(0);
  absl::MutexLock lock(&mu_);
  const uint64_t id = next_event_id_++;
  events_.emplace(id, Event{*std::move(page), /*imported=*/false});
  return backends::DeviceEvent{id};
}

absl::StatusOr<backends::IpcEventHandle> FakeDeviceMemory::ExportEvent(backends::DeviceEvent event) {
  absl::ReaderMutexLock lock(&mu_);
  auto it = events_.find(event.id);
  if (it == events_.end() || it->second.imported) {
    return absl::InvalidArgumentError(absl::StrCat("fake device: export of event ", event.id,
                                                   ", not an event created here"));
  }
  return MakeHandle<backends::IpcEventHandle>(kEventHandleMagic, *it->second.page);
}

absl::StatusOr<backends::DeviceEvent> FakeDeviceMemory::ImportEvent(const backends::IpcEventHandle& handle) {
  absl::StatusOr<std::shared_ptr<Mapping>> page = OpenHandle(handle.bytes, kEventHandleMagic, "event");
  if (!page.ok()) return page.status();
  if ((*page)->event().magic != kEventPageMagic) {
    return absl::DataLossError("fake device: an imported event page has a bad magic");
  }
  absl::MutexLock lock(&mu_);
  const uint64_t id = next_event_id_++;
  events_.emplace(id, Event{*std::move(page), /*imported=*/true});
  return backends::DeviceEvent{id};
}

absl::Status FakeDeviceMemory::DestroyEvent(backends::DeviceEvent event) {
  absl::MutexLock lock(&mu_);
  auto it = events_.find(event.id);
  if (it == events_.end()) return absl::InvalidArgumentError(absl::StrCat("fake device: no event ", event.id));
  // Queued records and waits hold the page until they have run.
  events_.erase(it);
  return absl::OkStatus();
}

absl::StatusOr<bool> FakeDeviceMemory::QueryEvent(backends::DeviceEvent event) {
  absl::ReaderMutexLock lock(&mu_);
  absl::StatusOr<std::shared_ptr<Mapping>> page = FindEvent(event);
  if (!page.ok()) return page.status();
  EventPage& state = (*page)->event();
  const uint64_t recorded = state.recorded.load(std::memory_order_acquire);
  return state.completed.load(std::memory_order_acquire) >= recorded;
}

void FakeDeviceMemory::WorkerLoop(Lane* lane) {
  while (true) {
    StreamOp op;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this, lane]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return stopping_ || !lane->queue.empty(); };
      mu_.Await(absl::Condition(&ready));
      if (stopping_) return;
      op = std::move(lane->queue.front());
      lane->queue.pop_front();
      lane->running_op = true;
    }
    switch (op.kind) {
      case StreamOp::Kind::kCopy:
        if (options_.copy_delay > absl::ZeroDuration()) absl::SleepFor(options_.copy_delay);
        std::memmove(op.destination, op.source, static_cast<size_t>(op.bytes));
        break;
      case StreamOp::Kind::kRecord: {
        EventPage& event = op.mapping->event();
        uint64_t completed = event.completed.load(std::memory_order_acquire);
        while (completed < op.generation &&
               !event.completed.compare_exchange_weak(completed, op.generation, std::memory_order_acq_rel)) {
        }
        event.wake_seq.fetch_add(1, std::memory_order_acq_rel);
        FutexWakeAll(event.wake_seq);
        break;
      }
      case StreamOp::Kind::kWait: {
        EventPage& event = op.mapping->event();
        while (true) {
          const uint32_t seen = event.wake_seq.load(std::memory_order_acquire);
          if (event.completed.load(std::memory_order_acquire) >= op.generation) break;
          {
            absl::MutexLock lock(&mu_);
            if (stopping_) return;
            if (!poison_.ok()) break;
          }
          FutexWait(event.wake_seq, seen, kWaitSlice);
        }
        break;
      }
      case StreamOp::Kind::kRelease:
        break;  // `op` drops the mapping below
      case StreamOp::Kind::kHost:
        op.work();
        break;
    }
    op.mapping.reset();
    op.work = nullptr;
    absl::MutexLock lock(&mu_);
    lane->running_op = false;
  }
}

}  // namespace tandem::fake
