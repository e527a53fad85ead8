#include "actor/shm_transport.h"

#include <linux/futex.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "actor/data_plane_frame.h"
#include "actor/socket_io.h"

namespace tandem::actor {
namespace {

constexpr uint64_t kRegionMagic = 0x54444d52494e4731;  // "TDMRING1"
constexpr uint64_t kControlBytes = 4096;
// Longest single futex sleep: waits re-check abort and deadline this often.
constexpr absl::Duration kWaitSlice = absl::Milliseconds(50);

// The first page of a region. Written once by the creator, then head and
// data_seq only by the sender, tail and space_seq only by the receiver.
struct RingControl {
  uint64_t magic;
  uint64_t capacity;  // ring bytes after this page
  int32_t sender;
  int32_t receiver;
  alignas(64) std::atomic<uint64_t> head;
  alignas(64) std::atomic<uint64_t> tail;
  alignas(64) std::atomic<uint32_t> data_seq;   // futex: bumped after head moves
  alignas(64) std::atomic<uint32_t> space_seq;  // futex: bumped after tail moves
};
static_assert(sizeof(RingControl) <= kControlBytes);
static_assert(std::atomic<uint32_t>::is_always_lock_free && sizeof(std::atomic<uint32_t>) == 4);

uint32_t* FutexWord(std::atomic<uint32_t>& word) { return reinterpret_cast<uint32_t*>(&word); }

// Sleeps while *word == expected, at most `timeout` (shared, not private:
// the word lives in memory mapped by two processes).
void FutexWait(std::atomic<uint32_t>& word, uint32_t expected, absl::Duration timeout) {
  if (timeout <= absl::ZeroDuration()) return;
  timespec ts = absl::ToTimespec(timeout);
  syscall(SYS_futex, FutexWord(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void FutexWakeAll(std::atomic<uint32_t>& word) {
  syscall(SYS_futex, FutexWord(word), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

using socket_io::Errno;

}  // namespace

// One mapped region: owns the descriptor and the mapping.
class ShmTransport::Region {
 public:
  Region(int fd, std::byte* base, uint64_t size) : fd_(fd), base_(base), size_(size) {}
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;
  ~Region() {
    munmap(base_, size_);
    close(fd_);
  }
  int fd() const { return fd_; }
  RingControl& control() { return *reinterpret_cast<RingControl*>(base_); }
  std::byte* ring() { return base_ + kControlBytes; }
  uint64_t capacity() { return control().capacity; }

 private:
  int fd_;
  std::byte* base_;
  uint64_t size_;
};

// Named, not anonymous: a nested class of the header's class holds one, and
// in a unity batch (this file not the main one) GCC refuses a field of an
// anonymous namespace's type there (-Wsubobject-linkage).
namespace shm_receiver {

// Receiver-side slot bookkeeping, shared by the Inbound and every borrowed
// tensor (through SlotLease), so releases work after the transport is gone.
struct ReleaseState {
  explicit ReleaseState(std::unique_ptr<ShmTransport::Region> r) : region(std::move(r)) {}
  absl::Mutex mu;
  std::map<uint64_t, uint64_t> released ABSL_GUARDED_BY(mu);  // start -> end, past the tail
  std::unique_ptr<ShmTransport::Region> region;

  void Release(uint64_t start, uint64_t end) {
    absl::MutexLock lock(&mu);
    RingControl& control = region->control();
    uint64_t tail = control.tail.load(std::memory_order_relaxed);
    released.emplace(start, end);
    bool moved = false;
    for (auto it = released.find(tail); it != released.end(); it = released.find(tail)) {
      tail = it->second;
      released.erase(it);
      moved = true;
    }
    if (!moved) return;
    control.tail.store(tail, std::memory_order_release);
    control.space_seq.fetch_add(1, std::memory_order_release);
    FutexWakeAll(control.space_seq);
  }
};

}  // namespace shm_receiver

namespace {

using shm_receiver::ReleaseState;

// Keeps one slot until the last tensor viewing it dies.
class SlotLease {
 public:
  SlotLease(std::shared_ptr<ReleaseState> state, uint64_t start, uint64_t end)
      : state_(std::move(state)), start_(start), end_(end) {}
  SlotLease(const SlotLease&) = delete;
  SlotLease& operator=(const SlotLease&) = delete;
  ~SlotLease() { state_->Release(start_, end_); }

 private:
  std::shared_ptr<ReleaseState> state_;
  uint64_t start_, end_;
};

absl::StatusOr<std::unique_ptr<ShmTransport::Region>> MapRegion(int fd, uint64_t size) {
  void* base = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    absl::Status status = Errno("mmap of a shared-memory region");
    close(fd);
    return absl::ResourceExhaustedError(status.message());
  }
  return std::make_unique<ShmTransport::Region>(fd, static_cast<std::byte*>(base), size);
}

}  // namespace

struct ShmTransport::Outbound {
  std::unique_ptr<Region> region;
  struct Message {
    FrameLayout layout;
    std::vector<ir::HostTensor> tensors;
  };
  std::deque<Message> queue;  // written in order once space frees

  // Reserves `bytes` (plus a filler to wrap around) and returns the ring
  // offset to write at, or -1 when the ring lacks room now.
  int64_t Reserve(uint64_t bytes, uint64_t* new_head) {
    RingControl& control = region->control();
    const uint64_t capacity = control.capacity;
    const uint64_t head = control.head.load(std::memory_order_relaxed);
    const uint64_t tail = control.tail.load(std::memory_order_acquire);
    const uint64_t offset = head % capacity;
    const uint64_t filler = capacity - offset < bytes ? capacity - offset : 0;
    if (head + filler + bytes - tail > capacity) return -1;
    if (filler > 0) {
      FrameHeader pad;
      pad.magic = kPaddingMagic;
      pad.frame_bytes = filler;
      std::memcpy(region->ring() + offset, &pad, sizeof(pad));
    }
    *new_head = head + filler + bytes;
    return static_cast<int64_t>((head + filler) % capacity);
  }
  void Publish(uint64_t new_head) {
    RingControl& control = region->control();
    control.head.store(new_head, std::memory_order_release);
    control.data_seq.fetch_add(1, std::memory_order_release);
    FutexWakeAll(control.data_seq);
  }
  bool TryWrite(const Message& message) {
    uint64_t new_head = 0;
    const int64_t offset = Reserve(message.layout.header.frame_bytes, &new_head);
    if (offset < 0) return false;
    std::byte* frame = region->ring() + offset;
    WriteFrameHead(message.layout, frame);
    for (size_t i = 0; i < message.tensors.size(); ++i) {
      std::memcpy(frame + message.layout.descriptors[i].offset, message.tensors[i].data(),
                  message.layout.descriptors[i].bytes);
    }
    Publish(new_head);
    return true;
  }
};

struct ShmTransport::Inbound {
  std::shared_ptr<ReleaseState> state;
  uint64_t read = 0;  // next unparsed position
};

absl::Status SendFd(int socket, int fd) {
  char byte = 'F';
  iovec io{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr message{};
  message.msg_iov = &io;
  message.msg_iovlen = 1;
  message.msg_control = control;
  message.msg_controllen = sizeof(control);
  cmsghdr* header = CMSG_FIRSTHDR(&message);
  header->cmsg_level = SOL_SOCKET;
  header->cmsg_type = SCM_RIGHTS;
  header->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(header), &fd, sizeof(int));
  while (sendmsg(socket, &message, MSG_NOSIGNAL) < 0) {
    if (errno != EINTR) return Errno("sending a descriptor");
  }
  return absl::OkStatus();
}

absl::StatusOr<int> ReceiveFd(int socket, absl::Time deadline) {
  while (true) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return absl::DeadlineExceededError("no descriptor arrived before the deadline");
    pollfd p{socket, POLLIN, 0};
    const int ready = poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(std::min(left, absl::Seconds(1))) + 1));
    if (ready < 0 && errno != EINTR) return Errno("waiting for a descriptor");
    if (ready > 0) break;
  }
  char byte = 0;
  iovec io{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr message{};
  message.msg_iov = &io;
  message.msg_iovlen = 1;
  message.msg_control = control;
  message.msg_controllen = sizeof(control);
  ssize_t n;
  while ((n = recvmsg(socket, &message, MSG_CMSG_CLOEXEC)) < 0) {
    if (errno != EINTR) return Errno("receiving a descriptor");
  }
  if (n == 0) return absl::UnavailableError("socket closed before a descriptor arrived");
  cmsghdr* header = CMSG_FIRSTHDR(&message);
  if (header == nullptr || header->cmsg_level != SOL_SOCKET || header->cmsg_type != SCM_RIGHTS ||
      header->cmsg_len != CMSG_LEN(sizeof(int))) {
    return absl::DataLossError("message without a descriptor");
  }
  int fd;
  std::memcpy(&fd, CMSG_DATA(header), sizeof(int));
  return fd;
}

ShmTransport::ShmTransport(int32_t actor, int32_t num_actors, Options options)
    : actor_(actor), num_actors_(num_actors), options_(options), mailbox_(num_actors) {}

absl::StatusOr<std::unique_ptr<ShmTransport>> ShmTransport::Create(int32_t actor, int32_t num_actors,
                                                                   Options options) {
  if (absl::Status status = CheckActor(actor, num_actors); !status.ok()) return status;
  const uint64_t capacity = (static_cast<uint64_t>(std::max<int64_t>(options.ring_bytes, 4096)) + 4095) / 4096 * 4096;
  std::unique_ptr<ShmTransport> transport(new ShmTransport(actor, num_actors, options));
  absl::MutexLock lock(&transport->send_mu_);
  transport->outbound_.resize(num_actors);
  transport->outbound_fds_.assign(num_actors, -1);
  for (int32_t peer = 0; peer < num_actors; ++peer) {
    if (peer == actor) continue;
    const std::string name = absl::StrCat("tandem-", actor, "-to-", peer);
    const int fd = memfd_create(name.c_str(), MFD_CLOEXEC);
    if (fd < 0) return Errno("memfd_create");
    if (ftruncate(fd, static_cast<off_t>(kControlBytes + capacity)) != 0) {
      absl::Status status = Errno("ftruncate of a shared-memory region");
      close(fd);
      return status;
    }
    absl::StatusOr<std::unique_ptr<Region>> region = MapRegion(fd, kControlBytes + capacity);
    if (!region.ok()) return region.status();
    RingControl& control = (*region)->control();
    control.magic = kRegionMagic;
    control.capacity = capacity;
    control.sender = actor;
    control.receiver = peer;
    control.head.store(0);
    control.tail.store(0);
    transport->outbound_fds_[peer] = fd;
    transport->outbound_[peer] = std::make_unique<Outbound>();
    transport->outbound_[peer]->region = std::move(*region);
  }
  {
    absl::MutexLock receive_lock(&transport->receive_mu_);
    transport->inbound_.resize(num_actors);
  }
  transport->flusher_ = std::thread([t = transport.get()] { t->FlusherLoop(); });
  return transport;
}

ShmTransport::~ShmTransport() {
  {
    absl::MutexLock lock(&send_mu_);
    stopping_ = true;
    pending_.SignalAll();
  }
  if (flusher_.joinable()) flusher_.join();
}

int ShmTransport::OutboundFd(int32_t peer) const {
  if (peer < 0 || peer >= num_actors_) return -1;
  return outbound_fds_[peer];
}

absl::Status ShmTransport::AttachInbound(int32_t peer, int fd) {
  if (absl::Status status = CheckPeer(actor_, num_actors_, peer); !status.ok()) {
    close(fd);
    return status;
  }
  struct stat info;
  if (fstat(fd, &info) != 0 || info.st_size < static_cast<off_t>(kControlBytes + 4096)) {
    close(fd);
    return absl::DataLossError(absl::StrCat("actor ", actor_, ": the region from actor ", peer, " is too small"));
  }
  absl::StatusOr<std::unique_ptr<Region>> region = MapRegion(fd, static_cast<uint64_t>(info.st_size));
  if (!region.ok()) return region.status();
  RingControl& control = (*region)->control();
  if (control.magic != kRegionMagic || control.sender != peer || control.receiver != actor_ ||
      control.capacity + kControlBytes != static_cast<uint64_t>(info.st_size) || control.capacity % 64 != 0) {
    return absl::DataLossError(
        absl::StrCat("actor ", actor_, ": the region handed over for actor ", peer, " is not a ring from actor ",
                     peer, " to actor ", actor_));
  }
  auto inbound = std::make_unique<Inbound>();
  inbound->read = control.tail.load(std::memory_order_acquire);
  inbound->state = std::make_shared<ReleaseState>(std::move(*region));
  absl::MutexLock lock(&receive_mu_);
  if (inbound_[peer] != nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("actor ", actor_, ": a region from actor ", peer, " is already attached"));
  }
  inbound_[peer] = std::move(inbound);
  return absl::OkStatus();
}

absl::Status ShmTransport::Flush(absl::Time deadline) {
  absl::MutexLock lock(&send_mu_);
  while (AnyPendingLocked()) {
    if (absl::Now() >= deadline) {
      std::string peers;
      for (int32_t peer = 0; peer < num_actors_; ++peer) {
        if (outbound_[peer] != nullptr && !outbound_[peer]->queue.empty()) absl::StrAppend(&peers, " ", peer);
      }
      return absl::DeadlineExceededError(
          absl::StrCat("actor ", actor_, ": messages still queued for actors", peers));
    }
    send_mu_.AwaitWithDeadline(absl::Condition(+[](ShmTransport* t) ABSL_NO_THREAD_SAFETY_ANALYSIS {
      return !t->AnyPendingLocked();
    }, this), std::min(deadline, absl::Now() + absl::Milliseconds(10)));
  }
  return absl::OkStatus();
}

absl::Status ShmTransport::Send(int32_t peer, uint64_t tag, std::vector<ir::HostTensor> tensors) {
  if (absl::Status status = CheckPeer(actor_, num_actors_, peer); !status.ok()) return status;
  {
    absl::MutexLock lock(&receive_mu_);
    if (!mailbox_.abort_status().ok()) return mailbox_.abort_status();
  }
  absl::StatusOr<FrameLayout> layout = PlanFrame(actor_, peer, tag, tensors);
  if (!layout.ok()) return layout.status();
  absl::MutexLock lock(&send_mu_);
  Outbound& out = *outbound_[peer];
  if (layout->header.frame_bytes > out.region->capacity()) {
    return absl::ResourceExhaustedError(absl::StrCat("actor ", actor_, " -> actor ", peer, " tag ", tag, ": ",
                                                     layout->header.frame_bytes, " bytes exceed the ring of ",
                                                     out.region->capacity()));
  }
  Outbound::Message message{*std::move(layout), std::move(tensors)};
  if (out.queue.empty() && out.TryWrite(message)) return absl::OkStatus();
  out.queue.push_back(std::move(message));
  pending_.SignalAll();
  return absl::OkStatus();
}

void ShmTransport::FlushLocked(int32_t peer) {
  Outbound& out = *outbound_[peer];
  while (!out.queue.empty() && out.TryWrite(out.queue.front())) out.queue.pop_front();
}

bool ShmTransport::AnyPendingLocked() const {
  for (const auto& out : outbound_) {
    if (out != nullptr && !out->queue.empty()) return true;
  }
  return false;
}

void ShmTransport::FlusherLoop() {
  while (true) {
    std::atomic<uint32_t>* word = nullptr;
    uint32_t seen = 0;
    {
      absl::MutexLock lock(&send_mu_);
      while (!stopping_ && !AnyPendingLocked()) pending_.WaitWithTimeout(&send_mu_, absl::Milliseconds(100));
      if (stopping_) return;
      for (int32_t peer = 0; peer < num_actors_; ++peer) {
        if (outbound_[peer] == nullptr || outbound_[peer]->queue.empty()) continue;
        RingControl& control = outbound_[peer]->region->control();
        const uint32_t seq = control.space_seq.load(std::memory_order_acquire);
        FlushLocked(peer);
        if (!outbound_[peer]->queue.empty() && word == nullptr) {
          word = &control.space_seq;
          seen = seq;
        }
      }
    }
    // The region outlives this wait: outbound regions die with the transport,
    // after this thread is joined.
    if (word != nullptr) FutexWait(*word, seen, absl::Milliseconds(10));
  }
}

absl::Status ShmTransport::DrainLocked(int32_t peer) {
  Inbound& in = *inbound_[peer];
  if (!mailbox_.peer_error(peer).ok()) return mailbox_.peer_error(peer);
  Region& region = *in.state->region;
  RingControl& control = region.control();
  const uint64_t capacity = region.capacity();
  const uint64_t head = control.head.load(std::memory_order_acquire);
  auto fail = [&](absl::Status status) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    absl::Status error(status.code(), absl::StrCat("actor ", actor_, ": ", status.message()));
    mailbox_.FailPeer(peer, error);
    return error;
  };
  if (head - in.read > capacity || head < in.read) {
    return fail(absl::DataLossError(absl::StrCat("the ring from actor ", peer, " has an impossible head ", head)));
  }
  while (in.read < head) {
    const uint64_t offset = in.read % capacity;
    const uint64_t available = std::min(head - in.read, capacity - offset);
    FrameHeader header;
    if (available < sizeof(header) || offset % kFrameAlignment != 0) {
      return fail(absl::DataLossError(absl::StrCat("malformed frame from actor ", peer, ": truncated header")));
    }
    std::memcpy(&header, region.ring() + offset, sizeof(header));
    if (header.magic == kPaddingMagic) {
      if (header.frame_bytes != capacity - offset || header.frame_bytes > available) {
        return fail(absl::DataLossError(absl::StrCat("malformed frame from actor ", peer, ": bad filler")));
      }
      in.state->Release(in.read, in.read + header.frame_bytes);
      in.read += header.frame_bytes;
      continue;
    }
    if (absl::Status status = ValidateFrameHeader(header, peer, actor_, available); !status.ok()) return fail(status);
    const std::byte* frame = region.ring() + offset;
    absl::StatusOr<std::vector<FrameTensor>> parsed =
        ParseFrameTensors(header, reinterpret_cast<const TensorDescriptor*>(frame + sizeof(FrameHeader)), peer);
    if (!parsed.ok()) return fail(parsed.status());
    auto lease = std::make_shared<SlotLease>(in.state, in.read, in.read + header.frame_bytes);
    in.read += header.frame_bytes;
    std::vector<ir::HostTensor> tensors;
    tensors.reserve(parsed->size());
    for (FrameTensor& t : *parsed) {
      std::byte* bytes = const_cast<std::byte*>(frame) + t.offset;
      if (options_.receive_mode == ReceiveMode::kBorrow) {
        tensors.push_back(ir::HostTensor::Borrow(std::move(t.type), std::shared_ptr<std::byte[]>(lease, bytes)));
      } else {
        absl::StatusOr<ir::HostTensor> copy = ir::HostTensor::Allocate(std::move(t.type));
        if (!copy.ok()) return fail(copy.status());
        std::memcpy(copy->data(), bytes, t.bytes);
        tensors.push_back(*std::move(copy));
      }
    }
    if (absl::Status filed = mailbox_.File(peer, header.tag, std::move(tensors)); !filed.ok()) return fail(filed);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<ir::HostTensor>> ShmTransport::Receive(int32_t peer, uint64_t tag, absl::Time deadline) {
  if (absl::Status status = CheckPeer(actor_, num_actors_, peer); !status.ok()) return status;
  const absl::Time start = absl::Now();
  while (true) {
    std::atomic<uint32_t>* word;
    uint32_t seen;
    {
      absl::MutexLock lock(&receive_mu_);
      if (!mailbox_.abort_status().ok()) return mailbox_.abort_status();
      if (inbound_[peer] == nullptr) {
        return absl::FailedPreconditionError(
            absl::StrCat("actor ", actor_, ": no region attached for actor ", peer));
      }
      word = &inbound_[peer]->state->region->control().data_seq;
      seen = word->load(std::memory_order_acquire);
      DrainLocked(peer).IgnoreError();  // a corrupt ring is the peer's error, which TryClaim answers
      if (std::optional<absl::StatusOr<std::vector<ir::HostTensor>>> answer = mailbox_.TryClaim(peer, tag);
          answer.has_value()) {
        return *std::move(answer);
      }
    }
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      return ReceiveDeadlineError(peer, tag, now - start);
    }
    // Inbound entries are never replaced while the transport lives, so the
    // word stays mapped during the sleep.
    FutexWait(*word, seen, std::min(deadline - now, kWaitSlice));
  }
}

void ShmTransport::Abort(absl::Status status) {
  absl::MutexLock lock(&receive_mu_);
  if (!mailbox_.Abort(std::move(status))) return;
  for (const auto& in : inbound_) {
    if (in == nullptr) continue;
    std::atomic<uint32_t>& word = in->state->region->control().data_seq;
    word.fetch_add(1, std::memory_order_release);
    FutexWakeAll(word);
  }
}

absl::Status ShmTransport::SendRawForTesting(int32_t peer, const std::vector<std::byte>& bytes) {
  if (absl::Status status = CheckPeer(actor_, num_actors_, peer); !status.ok()) return status;
  absl::MutexLock lock(&send_mu_);
  Outbound& out = *outbound_[peer];
  uint64_t new_head = 0;
  const int64_t offset = out.Reserve(AlignFrame(bytes.size()), &new_head);
  if (offset < 0) return absl::ResourceExhaustedError("ring full");
  std::memcpy(out.region->ring() + offset, bytes.data(), bytes.size());
  out.Publish(new_head);
  return absl::OkStatus();
}

}  // namespace tandem::actor
