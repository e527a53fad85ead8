#include "actor/nccl/fake_nccl.h"

#include <linux/futex.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "ir/process_stat.h"

namespace tandem::actor::nccl {
namespace {

constexpr uint64_t kIdMagic = 0x3144494e46464454;       // "TDFFNID1"
constexpr uint64_t kChannelMagic = 0x3148434e46464454;  // "TDFFNCH1"
constexpr int64_t kRingsAt = 256;                       // the rings follow the head
// Longest single sleep of a waiting transfer: it re-checks for an abort and
// for its peer's process this often.
constexpr absl::Duration kWaitSlice = absl::Milliseconds(10);

// What the unique id holds: the channel's IPC handle and its ring size.
struct IdFields {
  uint64_t magic;
  int64_t ring_bytes;
  backends::IpcMemHandle channel;
  std::byte reserved[kNcclUniqueIdBytes - 16 - sizeof(backends::IpcMemHandle)];
};
static_assert(sizeof(IdFields) == kNcclUniqueIdBytes);

}  // namespace

// Named, not anonymous: a nested class of the header's class holds one, and
// in a unity batch (this file not the main one) GCC refuses a field of an
// anonymous namespace's type there (-Wsubobject-linkage).
namespace fake_nccl_channel {

// The head of a channel: ring r carries the bytes rank r sends.
struct ChannelHead {
  uint64_t magic;
  int64_t ring_bytes;
  std::atomic<uint32_t> joined;   // bit r: rank r joined
  std::atomic<uint32_t> aborted;  // nonzero once either rank aborted
  std::atomic<int32_t> pid[2];    // each rank's process, once joined
  std::atomic<uint32_t> wake;     // futex word: bumped after every change
  std::atomic<uint64_t> written[2];
  std::atomic<uint64_t> taken[2];
};

}  // namespace fake_nccl_channel

namespace {

using fake_nccl_channel::ChannelHead;

static_assert(sizeof(ChannelHead) <= kRingsAt);
static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<uint32_t>::is_always_lock_free);

void FutexWait(std::atomic<uint32_t>& word, uint32_t expected, absl::Duration timeout) {
  timespec ts = absl::ToTimespec(timeout);
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void Bump(std::atomic<uint32_t>& word) {
  word.fetch_add(1, std::memory_order_acq_rel);
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

// True when process `pid` has exited (gone, or a zombie not yet reaped).
bool ProcessGone(int32_t pid) {
  if (pid <= 0 || pid == getpid()) return false;
  if (kill(pid, 0) != 0 && errno == ESRCH) return true;
  const std::optional<ir::ProcessStat> stat = ir::ReadProcessStat(pid);
  return !stat.has_value() || stat->exited();
}

ChannelHead& HeadAt(backends::DeviceAddress address) { return *reinterpret_cast<ChannelHead*>(address); }

}  // namespace

struct FakeNccl::Joined {
  Joined(fake::FakeDeviceMemory& memory, backends::DeviceAddress channel, backends::DeviceAddress made, int rank)
      : memory(memory), channel(channel), made(made), rank(rank), head(HeadAt(channel)) {}
  ~Joined() {
    // The last transfer has run (it held this object): the main stream may
    // unmap the channel.
    memory.CloseImported(channel).IgnoreError();
    if (made != 0) memory.Free(made).IgnoreError();
  }

  void Fail(absl::Status status) {
    absl::MutexLock lock(&mu);
    if (error.ok()) error = std::move(status);
  }
  absl::Status error_status() {
    absl::MutexLock lock(&mu);
    return error;
  }
  std::byte* Ring(int r) const {
    return reinterpret_cast<std::byte*>(channel) + kRingsAt + static_cast<int64_t>(r) * head.ring_bytes;
  }

  // Host work of the side stream: moves `bytes` bytes between `data` and the
  // ring of rank `from`, as room or bytes appear.
  void Run(bool send, std::byte* data, int64_t bytes, int peer) {
    const int from = send ? rank : peer;
    const int64_t ring_bytes = head.ring_bytes;
    std::byte* ring = Ring(from);
    int64_t done = 0;
    while (done < bytes) {
      const uint32_t seen = head.wake.load(std::memory_order_acquire);
      const uint64_t written = head.written[from].load(std::memory_order_acquire);
      const uint64_t taken = head.taken[from].load(std::memory_order_acquire);
      const uint64_t at = send ? written : taken;
      const int64_t ready = send ? ring_bytes - static_cast<int64_t>(written - taken) : static_cast<int64_t>(written - taken);
      int64_t n = std::min(ready, bytes - done);
      if (n > 0) {
        // At most two pieces: up to the ring's end, then from its start.
        const int64_t offset = static_cast<int64_t>(at % static_cast<uint64_t>(ring_bytes));
        const int64_t first = std::min(n, ring_bytes - offset);
        if (send) {
          std::memcpy(ring + offset, data + done, static_cast<size_t>(first));
          std::memcpy(ring, data + done + first, static_cast<size_t>(n - first));
          head.written[from].store(written + static_cast<uint64_t>(n), std::memory_order_release);
        } else {
          std::memcpy(data + done, ring + offset, static_cast<size_t>(first));
          std::memcpy(data + done + first, ring, static_cast<size_t>(n - first));
          head.taken[from].store(taken + static_cast<uint64_t>(n), std::memory_order_release);
        }
        done += n;
        Bump(head.wake);
        continue;
      }
      if (aborted.load(std::memory_order_acquire) || head.aborted.load(std::memory_order_acquire) != 0) {
        Fail(absl::AbortedError(absl::StrCat("fake-nccl: the communicator was aborted with ", bytes - done, " of ",
                                             bytes, " bytes to ", send ? "send" : "receive")));
        return;
      }
      const int32_t peer_pid = head.pid[peer].load(std::memory_order_acquire);
      if (ProcessGone(peer_pid)) {
        Fail(absl::UnavailableError(absl::StrCat("fake-nccl: rank ", peer, " (process ", peer_pid, ") is gone with ",
                                                 bytes - done, " of ", bytes, " bytes to ",
                                                 send ? "send" : "receive")));
        return;
      }
      FutexWait(head.wake, seen, kWaitSlice);
    }
  }

  fake::FakeDeviceMemory& memory;
  const backends::DeviceAddress channel;  // imported here
  const backends::DeviceAddress made;     // the allocation, when this process made it; 0 otherwise
  const int rank;
  ChannelHead& head;
  std::atomic<bool> aborted{false};
  absl::Mutex mu;
  absl::Status error ABSL_GUARDED_BY(mu);
};

FakeNccl::FakeNccl(fake::FakeDeviceMemory& memory, Options options) : memory_(memory), options_(options) {}

FakeNccl::~FakeNccl() {
  std::map<Comm, std::shared_ptr<Joined>> comms;
  std::map<std::string, backends::DeviceAddress> made;
  {
    absl::MutexLock lock(&mu_);
    comms.swap(comms_);
    made.swap(made_);
  }
  for (auto& [comm, joined] : comms) {
    joined->aborted.store(true, std::memory_order_release);
    Bump(joined->head.wake);
  }
  for (const auto& [id, base] : made) memory_.Free(base).IgnoreError();
}

absl::StatusOr<std::string> FakeNccl::DeviceId() {
  if (!options_.device_id.empty()) {
    if (options_.device_id.size() != kDeviceIdBytes) {
      return absl::InvalidArgumentError(absl::StrCat("fake-nccl: a device id of ", options_.device_id.size(),
                                                     " bytes (", kDeviceIdBytes, " expected)"));
    }
    return options_.device_id;
  }
  std::string id(kDeviceIdBytes, '\0');
  const int64_t pid = getpid();
  const auto memory = reinterpret_cast<uintptr_t>(&memory_);
  std::memcpy(id.data(), &pid, sizeof(pid));
  std::memcpy(id.data() + sizeof(pid), &memory, sizeof(memory));
  return id;
}

absl::StatusOr<std::string> FakeNccl::NewUniqueId() {
  if (options_.ring_bytes <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("fake-nccl: a ring of ", options_.ring_bytes, " bytes"));
  }
  absl::StatusOr<backends::DeviceAddress> base =
      memory_.Allocate(kRingsAt + 2 * options_.ring_bytes, backends::Sharing::kExportable);
  if (!base.ok()) return base.status();
  ChannelHead& head = HeadAt(*base);  // the fake's memory is zeroed host memory
  head.magic = kChannelMagic;
  head.ring_bytes = options_.ring_bytes;
  absl::StatusOr<backends::IpcMemHandle> handle = memory_.ExportMemory(*base);
  if (!handle.ok()) {
    memory_.Free(*base).IgnoreError();
    return handle.status();
  }
  IdFields fields{};
  fields.magic = kIdMagic;
  fields.ring_bytes = options_.ring_bytes;
  fields.channel = *handle;
  std::string id(reinterpret_cast<const char*>(&fields), sizeof(fields));
  absl::MutexLock lock(&mu_);
  made_.emplace(id, *base);
  return id;
}

absl::StatusOr<NcclLibrary::Comm> FakeNccl::StartJoin(absl::string_view unique_id, int ranks, int rank) {
  if (unique_id.size() != kNcclUniqueIdBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("fake-nccl: a unique id of ", unique_id.size(), " bytes (", kNcclUniqueIdBytes, " expected)"));
  }
  if (ranks != 2 || rank < 0 || rank >= ranks) {
    return absl::InvalidArgumentError(
        absl::StrCat("fake-nccl: rank ", rank, " of ", ranks, " (the fake joins communicators of 2 ranks)"));
  }
  IdFields fields;
  std::memcpy(&fields, unique_id.data(), sizeof(fields));
  if (fields.magic != kIdMagic) return absl::InvalidArgumentError("fake-nccl: not a fake NCCL unique id");
  absl::StatusOr<backends::DeviceAddress> channel = memory_.ImportMemory(fields.channel);
  if (!channel.ok()) {
    return absl::Status(channel.status().code(),
                        absl::StrCat("fake-nccl: joining a communicator: ", channel.status().message()));
  }
  ChannelHead& head = HeadAt(*channel);
  if (head.magic != kChannelMagic || head.ring_bytes != fields.ring_bytes) {
    memory_.CloseImported(*channel).IgnoreError();
    return absl::DataLossError("fake-nccl: the unique id names memory that is not a channel");
  }
  if ((head.joined.load(std::memory_order_acquire) & (1u << rank)) != 0) {
    memory_.CloseImported(*channel).IgnoreError();
    return absl::InvalidArgumentError(absl::StrCat("fake-nccl: rank ", rank, " joined this communicator already"));
  }
  head.pid[rank].store(getpid(), std::memory_order_release);
  head.joined.fetch_or(1u << rank, std::memory_order_acq_rel);
  Bump(head.wake);
  absl::MutexLock lock(&mu_);
  // The channel's maker frees it once its own communicator is released.
  backends::DeviceAddress made = 0;
  if (auto it = made_.find(std::string(unique_id)); it != made_.end()) {
    made = it->second;
    made_.erase(it);
  }
  const Comm comm = next_comm_++;
  comms_.emplace(comm, std::make_shared<Joined>(memory_, *channel, made, rank));
  return comm;
}

absl::StatusOr<std::shared_ptr<FakeNccl::Joined>> FakeNccl::Find(Comm comm) const {
  absl::MutexLock lock(&mu_);
  auto it = comms_.find(comm);
  if (it == comms_.end()) return absl::InvalidArgumentError(absl::StrCat("fake-nccl: no communicator ", comm));
  return it->second;
}

absl::StatusOr<bool> FakeNccl::State(Comm comm) {
  absl::StatusOr<std::shared_ptr<Joined>> joined = Find(comm);
  if (!joined.ok()) return joined.status();
  if (absl::Status error = (*joined)->error_status(); !error.ok()) return error;
  if ((*joined)->head.aborted.load(std::memory_order_acquire) != 0) {
    return absl::AbortedError("fake-nccl: the peer aborted the communicator");
  }
  return (*joined)->head.joined.load(std::memory_order_acquire) == 3u;
}

absl::Status FakeNccl::Transfer(bool send, Comm comm, backends::DeviceAddress data, int64_t bytes, int peer,
                                backends::StreamId stream) {
  absl::StatusOr<std::shared_ptr<Joined>> joined = Find(comm);
  if (!joined.ok()) return joined.status();
  if (peer < 0 || peer > 1 || peer == (*joined)->rank) {
    return absl::InvalidArgumentError(
        absl::StrCat("fake-nccl: rank ", (*joined)->rank, " ", send ? "sending to" : "receiving from", " rank ", peer));
  }
  if (bytes < 0) return absl::InvalidArgumentError(absl::StrCat("fake-nccl: a transfer of ", bytes, " bytes"));
  return memory_.EnqueueHostWork(stream, [joined = *std::move(joined), send, data, bytes, peer] {
    joined->Run(send, reinterpret_cast<std::byte*>(data), bytes, peer);
  });
}

void FakeNccl::Abort(Comm comm) {
  std::shared_ptr<Joined> joined;
  {
    absl::MutexLock lock(&mu_);
    auto it = comms_.find(comm);
    if (it == comms_.end()) return;
    joined = std::move(it->second);
    comms_.erase(it);
  }
  joined->aborted.store(true, std::memory_order_release);
  joined->head.aborted.store(1, std::memory_order_release);
  Bump(joined->head.wake);
}

absl::Status FakeNccl::Destroy(Comm comm) {
  absl::MutexLock lock(&mu_);
  auto it = comms_.find(comm);
  if (it == comms_.end()) return absl::InvalidArgumentError(absl::StrCat("fake-nccl: no communicator ", comm));
  comms_.erase(it);  // the channel goes with the last transfer that holds it
  return absl::OkStatus();
}

}  // namespace tandem::actor::nccl
