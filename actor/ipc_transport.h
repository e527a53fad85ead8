// IpcTransport: the data plane between actor processes that share one GPU,
// carrying DeviceTensors through CUDA IPC (device_memory.h), matched by
// (sender, tag) with the semantics of the host Transport (transport.h):
// Send never blocks, Receive waits until its deadline, Abort wakes everyone.
//
// Per ordered pair (sender -> receiver):
//  - the sender owns a staging ring in device memory (one allocation,
//    Options::ring_bytes) and `slots` interprocess "ready" events; the
//    receiver owns `slots` interprocess "consumed" events. Each side exports
//    its handles ONCE, in Connect, and imports the other side's.
//  - Send enqueues, on the sender's stream, a device-to-device copy of each
//    tensor into a free range of the ring, records the ready event of a free
//    slot, and publishes a small frame (tag, sequence number, slot, tensor
//    types and ring offsets) on the host channel.
//  - Receive, once the frame is there, makes the receiver's stream wait for
//    the slot's ready event, copies each tensor out of the imported ring into
//    a fresh allocation of its own, records the slot's consumed event and
//    publishes a release for the frame on the host channel.
//  - The sender reuses a ring range and a slot only after the release for
//    the message that held them arrived, and only behind the consumed event:
//    if the event has not completed yet (QueryEvent), its stream waits for it
//    (StreamWaitEvent) before the next copy into that range. A release is
//    published only after the consumed event was recorded, and a slot is
//    reused only after its release, so each wait concerns exactly the record
//    it means (CUDA waits for the most recent record at the time of the
//    call). Ranges are reclaimed lazily, oldest first, when space is needed:
//    the sender's stream never waits for a receiver unless the ring is full.
// Received tensors are ready in the order of the receiver's stream (work it
// enqueues later sees them; CopyToHost waits for them). A sent tensor must
// be ready in the order of the sender's stream when Send is called, and is
// not written again (it may be dropped at once: the transport keeps it until
// the copy is enqueued, and freeing waits for the stream).
//
// The host channel: a host Transport given at construction (ShmTransport
// between processes), used by this transport alone and only with tags at or
// above kIpcHostTagBase (message tags, any uint64, travel inside the
// frames). Each direction of each pair is one numbered sequence (host tag
// kIpcHostTagBase + n): the setup record, then frames and releases in
// the order they were published, then a close record; one thread per peer
// (the pump) receives them in order. IpcTransport calls the host channel's
// Send from the caller's thread and from the pumps (serialized by a mutex)
// and its Receive from the pumps, one per peer, concurrently with each
// other: the host transport must allow calls from several threads for
// different peers (ShmTransport, TcpTransport and InMemoryNetwork do).
//
// Setup and teardown, all bounded by deadlines:
//  - Create allocates and exports this actor's rings and events.
//  - Connect sends each peer the setup record (ring handle, ready events,
//    consumed events) and waits for each peer's; it imports what they
//    exported and starts the pumps. Every actor calls Connect; Sends do not
//    block, so the order does not matter.
//  - Close waits until every queued Send is written into its ring, then
//    closes everything this actor imported, tells each peer, and waits for
//    each peer to do the same before freeing its exports (CUDA: an importer
//    must close before the exporter frees). Messages not yet received are
//    dropped. A transport destroyed without Close frees its exports at once.
//
// Who completes what:
//  - Send (caller's thread) completes when the message is handed over: the
//    copy is enqueued and the frame published, or, when the ring or the
//    slots are full, the message is queued (the tensors stay referenced) and
//    the pump of that peer writes it, in order, when releases free space. A
//    message larger than the ring is ResourceExhausted. Messages are written
//    in Send order, so a Receive for a message queued behind messages the
//    receiver leaves unclaimed (filling the ring or the slots) waits until
//    its deadline: size ring_bytes and slots for what a receiver leaves
//    unclaimed at once (as with ShmTransport's ring).
//  - Receive (caller's thread) completes with the tensors, enqueued on its
//    stream; DeadlineExceeded naming the peer and the tag; the abort status;
//    or the error that broke the pair (DataLoss for a malformed frame,
//    the host channel's error).
//  - Abort (any thread) wakes waiting Receives and Flushes, aborts the host
//    channel, and makes later calls return the status. The first one wins.
// On disconnect: a peer that dies without Abort leaves Receives waiting until
// their deadlines (as ShmTransport) unless the host channel reports it, in
// which case the pair fails with that error. After a peer's Close, messages
// it sent before can still be received; a Receive for anything else from it
// is Unavailable at once.
//
// Ownership and threading: the transport owns its rings, events, imports and
// pump threads; it does not own `memory` or `host_channel`, which must
// outlive it (and `memory` must outlive the tensors received). Send,
// Receive, Flush and Close from one actor thread; Abort from any thread.
#ifndef TANDEM_ACTOR_IPC_TRANSPORT_H_
#define TANDEM_ACTOR_IPC_TRANSPORT_H_

#include <atomic>
#include <cstdint>
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
#include "backends/device_memory.h"

namespace tandem::actor {

// Host tags at and above this one belong to IpcTransport.
inline constexpr uint64_t kIpcHostTagBase = uint64_t{1} << 63;
// Alignment of every tensor in a ring (cudaMalloc's).
inline constexpr uint64_t kIpcAlignment = 256;

class IpcTransport {
 public:
  struct Options {
    // Per ordered pair: the sender's staging ring (rounded up to 256 B). A
    // message (its tensors, each 256-byte aligned) must fit.
    int64_t ring_bytes = int64_t{64} << 20;
    // Per ordered pair: messages in flight (sent, not yet released); one
    // ready and one consumed event each. Must be equal on every actor.
    int32_t slots = 32;
    // The actors reachable on this device; empty: every other actor.
    std::vector<int32_t> peers;
  };

  // The transport of `actor` among `num_actors`: allocates and exports its
  // rings and events. InvalidArgument for a bad actor, peer list or option;
  // the DeviceMemory's errors.
  static absl::StatusOr<std::unique_ptr<IpcTransport>> Create(int32_t actor, int32_t num_actors,
                                                              backends::DeviceMemory& memory, Transport& host_channel,
                                                              Options options);
  IpcTransport(const IpcTransport&) = delete;
  IpcTransport& operator=(const IpcTransport&) = delete;
  ~IpcTransport();

  // Exchanges handles with every peer (see above). DeadlineExceeded naming
  // the peer that did not answer; InvalidArgument when the peers' options
  // disagree; DataLoss for a malformed setup record; the DeviceMemory's
  // errors for handles it cannot open (Unavailable: exporter gone).
  // FailedPrecondition when called a second time (even after a failure:
  // the records already exchanged cannot be taken back).
  absl::Status Connect(absl::Time deadline);

  int32_t actor() const { return actor_; }

  // Hands `tensors` to `peer` under `tag`; never blocks. InvalidArgument for
  // a peer out of range, this actor, an actor not on this device, an
  // undefined tensor, or a tag to that peer that is still in flight (sent,
  // not yet received); ResourceExhausted for a message larger than the
  // ring; FailedPrecondition before Connect or after Close; the abort
  // status; the error that broke the pair.
  absl::Status Send(int32_t peer, uint64_t tag, std::vector<backends::DeviceTensor> tensors);

  // Waits until message `tag` from `peer` is there and claims it (see
  // above). DeadlineExceeded: "no message from actor 0 with tag 5 after
  // waiting 200ms"; Unavailable when `peer` has closed; ResourceExhausted
  // when no device memory is left for the tensors (the message is consumed
  // all the same); InvalidArgument for a bad peer; FailedPrecondition
  // before Connect or after Close.
  absl::StatusOr<std::vector<backends::DeviceTensor>> Receive(int32_t peer, uint64_t tag, absl::Time deadline);

  // Fails every pending and later call with `status`; aborts the host
  // channel too. Thread-safe; the first call wins.
  void Abort(absl::Status status);

  // Waits until every queued Send is written into its ring (which needs the
  // receivers to release earlier messages), at most until `deadline`:
  // DeadlineExceeded naming the peers still pending.
  absl::Status Flush(absl::Time deadline);

  // Ends the transport (see above). DeadlineExceeded naming the peers that
  // did not close in time (this actor's exports then stay until the
  // destructor). Later Sends and Receives are FailedPrecondition.
  absl::Status Close(absl::Time deadline);

 private:
  struct Outbound;
  struct Inbound;
  struct Frame;

  IpcTransport(int32_t actor, int32_t num_actors, backends::DeviceMemory& memory, Transport& host_channel,
               Options options);
  // actor::CheckPeer's errors, and InvalidArgument for a peer not on this
  // device's IPC data plane.
  absl::Status CheckPeer(int32_t peer) const;
  // Hands one record to `peer` on the host channel, with the next host tag.
  absl::Status PublishToPeer(int32_t peer, std::vector<int32_t> words) ABSL_LOCKS_EXCLUDED(host_mu_);
  // Writes as many queued messages to `peer` as fit, in order.
  absl::Status FlushLocked(Outbound& out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(send_mu_);
  // Writes the oldest queued message of `out` when a slot and ring space
  // are free (reclaiming released ranges first); false when not yet.
  absl::StatusOr<bool> TryWriteLocked(Outbound& out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(send_mu_);
  // Receives and handles `peer`'s host records until stopped or failed.
  void PumpLoop(int32_t peer, uint64_t next_host_index);
  absl::Status HandleRelease(int32_t peer, const std::vector<int32_t>& words) ABSL_LOCKS_EXCLUDED(send_mu_);
  absl::Status HandleFrame(int32_t peer, const std::vector<int32_t>& words) ABSL_LOCKS_EXCLUDED(recv_mu_);
  // Marks the pair with `peer` broken by `status` (both directions).
  void FailPeer(int32_t peer, absl::Status status);
  // Releases imports (CloseImported, DestroyEvent) of the peer's objects.
  void CloseImports(Inbound& in, Outbound& out);
  void FreeExports(Inbound& in, Outbound& out);

  const int32_t actor_;
  const int32_t num_actors_;
  backends::DeviceMemory& memory_;
  Transport& host_;
  const Options options_;
  uint64_t capacity_ = 0;  // ring bytes, immutable after Create

  std::vector<bool> is_peer_;  // by actor; immutable after Create
  std::atomic<bool> connect_started_{false};
  std::atomic<bool> connected_{false};
  std::atomic<bool> closing_{false};
  std::atomic<bool> stopping_{false};  // tells the pumps to return

  absl::Mutex host_mu_;
  std::vector<uint64_t> host_sent_ ABSL_GUARDED_BY(host_mu_);  // records sent, by peer

  absl::Mutex send_mu_;
  std::vector<std::unique_ptr<Outbound>> outbound_;  // by actor; null for non-peers; entries guarded by send_mu_
  absl::Status send_abort_ ABSL_GUARDED_BY(send_mu_);

  absl::Mutex recv_mu_;
  std::vector<std::unique_ptr<Inbound>> inbound_;  // by actor; null for non-peers; entries guarded by recv_mu_
  // Frames announced and not yet received, each peer's error (the pair is
  // broken once set), the abort status.
  std::unique_ptr<PeerMailbox<Frame>> mailbox_ ABSL_PT_GUARDED_BY(recv_mu_);

  std::vector<std::thread> pumps_;
};

}  // namespace tandem::actor

#endif  // TANDEM_ACTOR_IPC_TRANSPORT_H_
