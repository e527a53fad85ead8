// NcclTransport: the data plane between device-resident actors on different
// GPUs, carrying DeviceTensors device to device through NCCL (an
// NcclLibrary: NCCL itself, or FakeNccl on the emulated GPU; nccl/), matched
// by (sender, tag) with the semantics of the host Transport (transport.h):
// Send never blocks, Receive waits until its deadline, Abort wakes everyone.
//
// Per ordered pair (sender -> receiver) one two-rank communicator, the
// sender rank 0, with a side stream of its own at each end (device_memory.h):
// the two directions of a pair never wait for each other, so a 1F1B
// exchange, where both actors send before they receive, cannot deadlock, and
// transfers overlap the main stream's compute.
//  - Send records an event on the main stream (the tensors are ready there),
//    makes the pair's send stream wait for it, enqueues an ncclSend per
//    tensor there and records a "sent" event after them; then it publishes a
//    record (the message's tag and tensor types) on the host channel. The
//    tensors stay referenced until their sent event completes (QueryEvent,
//    checked at every call), never freed under a transfer.
//  - Receive takes the pair's records in the order they were published;
//    for each (the one asked for, or one it meets first, kept for later) it
//    allocates the tensors, makes the receive stream wait for the main
//    stream (the allocations are ordered there), enqueues an ncclRecv per
//    tensor and records a "received" event. The tensors it returns are ready
//    in the main stream's order (it waits for that event, the host does
//    not). Every receive is enqueued in the sender's order, as NCCL matches
//    transfers (no tags), whatever order the receiver asks in.
//
// On GPUs this runs two communicators per pair at once. NCCL's guide warns
// that communicators used concurrently can hang when their kernels cannot
// all be resident or are launched in different orders across ranks; a
// pair's kernels here are point-to-point on two distinct communicators,
// each direction in one order on both ranks, and small (a few blocks). It
// has not yet run on GPUs: CudaNccl.TwoGpusExchangeTensorsDeviceToDevice
// (label gpu) runs both directions at once, the case to watch.
//
// The host channel: a host Transport, used by this transport alone and only
// with tags at or above kNcclHostTagBase; each direction of each pair is one
// numbered sequence (the setup record with the communicator's unique id,
// then the message records).
//
// Setup: Connect sends each peer the unique id of the communicator it sends
// on and its device's id, receives the peer's, starts joining both
// (non-blocking) and waits until every communicator is ready, bounded by
// its deadline. A peer on this actor's own device (which the launcher could
// not tell: srun tasks picking their GPUs) gets no communicators, since
// NCCL refuses two ranks on one GPU: Reaches says so, and the device
// transport stages that pair through the host.
//
// Errors: a communicator's error (NCCL's asynchronous error: a peer gone, an
// aborted transfer) fails every later call naming the peer; DeadlineExceeded
// for a Receive whose record has not come; DataLoss for a malformed record;
// the abort status after Abort. Abort aborts every communicator (transfers
// in progress end) and the host channel.
//
// Ownership and threading: owns its communicators; borrows the library and
// the host channel, which must outlive it (and the library's memory the
// tensors received). Connect, Send, Receive and Flush from one actor
// thread; Abort from any thread.
#ifndef TANDEM_ACTOR_NCCL_TRANSPORT_H_
#define TANDEM_ACTOR_NCCL_TRANSPORT_H_

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "actor/ipc_transport.h"  // kIpcHostTagBase
#include "actor/nccl/nccl_library.h"
#include "actor/transport.h"
#include "backends/device_memory.h"

namespace tandem::actor {

// Host tags at and above this one belong to NcclTransport (IpcTransport's
// sequences, from kIpcHostTagBase, never reach it).
inline constexpr uint64_t kNcclHostTagBase = kIpcHostTagBase | (uint64_t{1} << 62);

class NcclTransport {
 public:
  // The transport of actor `actor` among `num_actors` to `peers` (other
  // actors, each once). InvalidArgument for a bad peer list.
  static absl::StatusOr<std::unique_ptr<NcclTransport>> Create(int32_t actor, int32_t num_actors,
                                                               nccl::NcclLibrary& nccl, Transport& host_channel,
                                                               std::vector<int32_t> peers);
  NcclTransport(const NcclTransport&) = delete;
  NcclTransport& operator=(const NcclTransport&) = delete;
  // Destroys the communicators whose transfers are done and aborts the rest.
  ~NcclTransport();

  absl::Status Connect(absl::Time deadline);
  // After Connect: whether `peer` is reached through NCCL (false for a peer
  // on this actor's own device, or not a peer).
  bool Reaches(int32_t peer) const;
  absl::Status Send(int32_t peer, uint64_t tag, std::vector<backends::DeviceTensor> tensors);
  absl::StatusOr<std::vector<backends::DeviceTensor>> Receive(int32_t peer, uint64_t tag, absl::Time deadline);
  // Waits until every message sent so far has been received by its peer's
  // device (its sent event completed), and releases its tensors.
  absl::Status Flush(absl::Time deadline);
  void Abort(absl::Status status);

  // Messages whose tensors this transport still holds (sent, not yet known
  // to be received).
  int64_t sends_in_flight() const;

 private:
  struct Sent {
    std::vector<backends::DeviceTensor> tensors;
    backends::DeviceEvent done;
  };
  struct Arrived {
    std::vector<backends::DeviceTensor> tensors;
    backends::DeviceEvent done;
  };
  struct Link {
    int32_t peer = 0;
    bool same_device = false;               // the peer is on this actor's device: no communicators
    nccl::NcclLibrary::Comm send_comm = 0;  // rank 0: this actor's sends
    nccl::NcclLibrary::Comm recv_comm = 0;  // rank 1: the peer's sends
    backends::StreamId send_stream = 0;
    backends::StreamId recv_stream = 0;
    uint64_t next_send_seq = 1;  // host sequence numbers; 0 is the setup record
    uint64_t next_recv_seq = 1;
    std::deque<Sent> sent;                // oldest first
    std::map<uint64_t, Arrived> arrived;  // by tag: receives enqueued, not yet claimed
  };

  NcclTransport(int32_t actor, int32_t num_actors, nccl::NcclLibrary& nccl, Transport& host_channel);
  absl::StatusOr<Link*> LinkTo(int32_t peer) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The abort status, or the error of `link`'s communicators.
  absl::Status Health(const Link& link) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Releases the tensors of sends whose sent event completed.
  absl::Status Reap(Link& link) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<backends::DeviceEvent> TakeEvent() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Later work on side stream `side` waits for what the main stream has
  // enqueued so far.
  absl::Status FollowMainStream(backends::StreamId side) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Enqueues the receive of the message `words` describes (the next one of
  // `link`) and files it under its tag.
  absl::Status Accept(Link& link, const std::vector<int32_t>& words) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int32_t actor_;
  const int32_t num_actors_;
  nccl::NcclLibrary& nccl_;
  backends::DeviceMemory& memory_;
  Transport& host_;

  mutable absl::Mutex mu_;
  absl::Status abort_ ABSL_GUARDED_BY(mu_);
  bool connected_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::unique_ptr<Link>> links_ ABSL_GUARDED_BY(mu_);
  std::vector<Link*> link_of_ ABSL_GUARDED_BY(mu_);  // by actor; null for actors not linked
  // Events, created on demand and reused once complete (sent events) or
  // waited for (received events).
  std::vector<backends::DeviceEvent> free_events_ ABSL_GUARDED_BY(mu_);
  std::vector<backends::DeviceEvent> all_events_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tandem::actor

#endif  // TANDEM_ACTOR_NCCL_TRANSPORT_H_
