// ShmTransport: the data plane between actor processes on one host, through
// shared memory.
//
// Per ordered pair (sender -> receiver) the sender creates one region
// (memfd_create + ftruncate + mmap MAP_SHARED) and hands it to the receiver
// ONCE as a file descriptor (OutboundFd / AttachInbound; SendFd / ReceiveFd
// move it over a Unix socket). The region is a single-producer
// single-consumer ring of variable-size slots, one frame per message
// (data_plane_frame.h), with monotonic head (sender) and tail (receiver)
// positions and two futex words for wake-ups (data published, space freed).
//
// Copies: Send writes the tensor bytes straight into the ring (one copy).
// In ReceiveMode::kBorrow (the default) Receive returns tensors that view
// the ring in place (zero copies); the slot is released when the last
// reference to the last tensor of the message dies, on whatever thread drops
// it. Slots may be released in any order; the tail advances past the oldest
// released run. In ReceiveMode::kCopy Receive copies into fresh tensors and
// releases the slot at once. Borrowing is the default because it measured
// fastest (`tandem bench dataplane`, 2-core VM, 16 MiB messages: borrow
// 4.9 GB/s = 0.93x memcpy; copy 1.2 GB/s, paying a fresh zeroed, faulted-in
// allocation per message); the cost is that received tensors a
// program holds (stashed activations) keep ring space: the ring must be
// sized for the bytes a receiver holds at once (Options::ring_bytes; memfd
// pages are only allocated when touched).
//
// Who completes what:
//  - Send (actor thread) never blocks: it writes the frame when the ring has
//    room and no earlier message to that peer waits; otherwise it queues the
//    tensors (shared handles, no copy) and the transport's flusher thread
//    writes them, in order, as the receiver frees space. A message larger
//    than the ring is refused with ResourceExhausted.
//  - Receive (actor thread) parses newly published frames into a mailbox
//    keyed by (peer, tag), returns the one asked for, and otherwise sleeps on
//    the region's futex with the deadline. Frames for other tags stay in the
//    mailbox until asked for.
//  - Abort (any thread) wakes the waiting Receive; later calls return it.
// On disconnect: shared memory cannot tell that a peer died, so a Receive
// from a dead peer ends in DeadlineExceeded (the controller's control
// connection reports the death). A malformed frame (bad magic, wrong
// sender/receiver, bad size) is DataLoss naming the peer; the region is
// then unusable and every later Receive from that peer returns the error.
//
// Ownership: the transport owns its outbound regions, its inbound mappings
// (shared with borrowed tensors, which keep a mapping alive after the
// transport is gone) and the flusher thread, which the destructor joins
// (queued, unwritten messages are dropped). Thread-safety: Send and Receive
// from one actor thread; Abort and tensor releases from any thread.
#ifndef TANDEM_ACTOR_SHM_TRANSPORT_H_
#define TANDEM_ACTOR_SHM_TRANSPORT_H_

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "actor/peer_mailbox.h"
#include "actor/transport.h"
#include "ir/host_tensor.h"

namespace tandem::actor {

// Sends `fd` over the connected Unix socket `socket` (SCM_RIGHTS). The
// caller keeps its own `fd`. Unavailable on a socket error.
absl::Status SendFd(int socket, int fd);
// Receives one descriptor sent by SendFd; the caller owns it. Waits at most
// until `deadline`. DeadlineExceeded, Unavailable (EOF/error) or DataLoss
// (a message without a descriptor).
absl::StatusOr<int> ReceiveFd(int socket, absl::Time deadline = absl::InfiniteFuture());

class ShmTransport final : public Transport {
 public:
  enum class ReceiveMode { kBorrow, kCopy };
  struct Options {
    int64_t ring_bytes = int64_t{256} << 20;  // per ordered pair; rounded up to 4 KiB
    ReceiveMode receive_mode = ReceiveMode::kBorrow;
  };

  // Creates the transport of `actor` among `num_actors`, with one outbound
  // region per peer. Inbound regions come later through AttachInbound.
  static absl::StatusOr<std::unique_ptr<ShmTransport>> Create(int32_t actor, int32_t num_actors,
                                                              Options options);
  ShmTransport(const ShmTransport&) = delete;
  ShmTransport& operator=(const ShmTransport&) = delete;
  ~ShmTransport() override;

  // The descriptor of the region this actor writes to `peer` (owned by the
  // transport; hand it over once, e.g. with SendFd). -1 for a bad peer.
  int OutboundFd(int32_t peer) const;
  // Maps the region `peer` writes to this actor, from `fd` (which the
  // transport takes over and closes). Validates the region's header:
  // DataLoss naming the peer when it is not a region from `peer` to us.
  // FailedPrecondition when a region from `peer` is already attached.
  absl::Status AttachInbound(int32_t peer, int fd);

  // Waits until every queued Send is written into its ring (which needs the
  // receivers to free space), at most until `deadline`: DeadlineExceeded
  // naming the peers still pending. Call before exiting a process whose
  // last messages must arrive; the destructor drops what is queued.
  absl::Status Flush(absl::Time deadline);

  int32_t actor() const override { return actor_; }
  absl::Status Send(int32_t peer, uint64_t tag, std::vector<ir::HostTensor> tensors) override;
  absl::StatusOr<std::vector<ir::HostTensor>> Receive(int32_t peer, uint64_t tag, absl::Time deadline) override;
  void Abort(absl::Status status) override;

  // For tests: publishes `bytes` as one slot of the ring to `peer`, as is.
  absl::Status SendRawForTesting(int32_t peer, const std::vector<std::byte>& bytes);

  class Region;  // one mapped ring; defined in the .cc

 private:
  struct Outbound;
  struct Inbound;

  ShmTransport(int32_t actor, int32_t num_actors, Options options);
  // Writes as many queued messages to `peer` as fit, in order.
  void FlushLocked(int32_t peer) ABSL_EXCLUSIVE_LOCKS_REQUIRED(send_mu_);
  bool AnyPendingLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(send_mu_);
  void FlusherLoop();
  // Parses every published frame from `peer` into its mailbox.
  absl::Status DrainLocked(int32_t peer) ABSL_EXCLUSIVE_LOCKS_REQUIRED(receive_mu_);

  const int32_t actor_;
  const int32_t num_actors_;
  const Options options_;

  mutable absl::Mutex send_mu_;
  std::vector<std::unique_ptr<Outbound>> outbound_ ABSL_GUARDED_BY(send_mu_);  // by peer; null for self
  std::vector<int> outbound_fds_;  // by peer; immutable after Create
  bool stopping_ ABSL_GUARDED_BY(send_mu_) = false;
  absl::CondVar pending_;

  absl::Mutex receive_mu_;
  std::vector<std::unique_ptr<Inbound>> inbound_ ABSL_GUARDED_BY(receive_mu_);  // by peer
  // Frames parsed and not yet received, each peer's error (its ring is
  // corrupt once set), the abort status.
  PeerMailbox<std::vector<ir::HostTensor>> mailbox_ ABSL_GUARDED_BY(receive_mu_);
  std::thread flusher_;
};

}  // namespace tandem::actor

#endif  // TANDEM_ACTOR_SHM_TRANSPORT_H_
