// Transport: the data plane as one actor sees it, an abstract interface with
// one implementation per medium (in-process mailboxes in
// in_memory_transport.h; shared memory, TCP and NCCL later).
//
// Messages are point-to-point, from this actor to `peer`, and are matched by
// (sender, tag) on the receiving side, never by arrival order: a receiver
// may ask for tag 9 while tag 7 from the same peer is still unclaimed. The
// compiler makes every tag unique per (sender, receiver) within a step.
//
// Why the data plane cannot deadlock by itself: Send never waits for the
// receiver (the transport buffers every message until it is claimed), so the
// only waits are Receives, each bounded by its deadline. A schedule whose
// receives form a cycle therefore ends in DeadlineExceeded, never in a hang;
// the schedules' validator rejects such schedules before they run.
//
// Who completes what:
//  - Send completes on the calling thread before it returns: the tensors are
//    handed to the transport (HostTensor copies share storage, which no one
//    writes again, so no bytes need to be copied in-process). The sender may
//    keep and reuse its own handles.
//  - Receive completes on the calling thread: it returns the message's
//    tensors, in the order they were sent, once the message is there; or
//    DeadlineExceeded naming the peer and the tag when `deadline` passes
//    first; or the abort status once the cluster has been aborted. The
//    caller adds its own context (actor, step, instruction).
//  - SendDevice and ReceiveDevice are Send and Receive for the device
//    tensors of a device-resident actor (device.h), with the same
//    semantics. Only a transport between actors that share a device carries
//    them (DeviceTransport, device_transport.h); the others answer
//    FailedPrecondition.
//  - Abort may be called from any thread. It wakes every waiting Receive of
//    the whole cluster (not only this actor's), which then return `status`;
//    later Sends and Receives return it too. The first Abort wins.
//
// When a peer is gone: an actor that fails calls Abort with its error, so
// its peers stop within moments instead of waiting out their deadlines. A
// transport that detects a lost peer by itself (a closed socket) reports
// Unavailable naming the peer to the Receives waiting on it. Either way no
// wait outlives its deadline.
//
// Ownership and threading: a Transport is owned by whatever created it (for
// the in-memory one, the InMemoryNetwork) and must outlive its users. One
// actor thread calls Send and Receive on its Transport; Abort is
// thread-safe.
#ifndef TANDEM_ACTOR_TRANSPORT_H_
#define TANDEM_ACTOR_TRANSPORT_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "backends/device_memory.h"
#include "ir/host_tensor.h"

namespace tandem::actor {

class Transport {
 public:
  virtual ~Transport() = default;

  // The actor this transport sends from and receives for.
  virtual int32_t actor() const = 0;

  // Hands `tensors` to `peer` under `tag`; never blocks. Errors:
  // InvalidArgument for a peer out of range or this actor itself, or for a
  // (sender, tag) that this receiver already got in this step (naming both
  // actors); the abort status after Abort.
  virtual absl::Status Send(int32_t peer, uint64_t tag, std::vector<ir::HostTensor> tensors) = 0;

  // Waits until the message `tag` from `peer` is there and claims it.
  // DeadlineExceeded ("no message from actor 0 with tag 5 after 200ms")
  // when `deadline` passes first; the abort status after Abort;
  // InvalidArgument for a bad peer.
  virtual absl::StatusOr<std::vector<ir::HostTensor>> Receive(int32_t peer, uint64_t tag,
                                                              absl::Time deadline) = 0;

  // Device tensors (see above).
  virtual absl::Status SendDevice(int32_t peer, uint64_t tag, std::vector<backends::DeviceTensor> tensors);
  virtual absl::StatusOr<std::vector<backends::DeviceTensor>> ReceiveDevice(int32_t peer, uint64_t tag,
                                                                            absl::Time deadline);

  // Waits until no device tensor sent so far is still held for a transfer
  // in progress (an NCCL send holds its tensors until the peer's device has
  // received them), at most until `deadline`; a step ends with it, so the
  // next begins with nothing of the last one held. The transfer's error, or
  // DeadlineExceeded. Nothing to wait for by default.
  virtual absl::Status SettleDeviceSends(absl::Time deadline) { return absl::OkStatus(); }

  // Fails the whole cluster's step with `status` (which should name the
  // failed actor): wakes every waiter. Thread-safe; the first call wins.
  virtual void Abort(absl::Status status) = 0;
};

inline absl::Status Transport::SendDevice(int32_t peer, uint64_t, std::vector<backends::DeviceTensor>) {
  return absl::FailedPreconditionError(absl::StrCat("actor ", actor(), " cannot send device tensors to actor ", peer,
                                                    ": this data plane carries host tensors only"));
}

inline absl::StatusOr<std::vector<backends::DeviceTensor>> Transport::ReceiveDevice(int32_t peer, uint64_t,
                                                                                    absl::Time) {
  return absl::FailedPreconditionError(absl::StrCat("actor ", actor(), " cannot receive device tensors from actor ",
                                                    peer, ": this data plane carries host tensors only"));
}

// The checks every transport makes, with one wording. InvalidArgument
// "actor 5 is outside [0, 4)" for a transport's own id;
inline absl::Status CheckActor(int32_t actor, int32_t num_actors) {
  if (num_actors < 1 || actor < 0 || actor >= num_actors) {
    return absl::InvalidArgumentError(absl::StrCat("actor ", actor, " is outside [0, ", num_actors, ")"));
  }
  return absl::OkStatus();
}
// and "actor 0: peer 7 is outside [0, 4)" or "actor 0 addresses itself" for
// the peer of a send or receive.
inline absl::Status CheckPeer(int32_t self, int32_t num_actors, int32_t peer) {
  if (peer < 0 || peer >= num_actors) {
    return absl::InvalidArgumentError(absl::StrCat("actor ", self, ": peer ", peer, " is outside [0, ", num_actors, ")"));
  }
  if (peer == self) return absl::InvalidArgumentError(absl::StrCat("actor ", self, " addresses itself"));
  return absl::OkStatus();
}

// The error of a receive whose deadline passed, the same from every
// transport: "no message from actor 1 with tag 7 after waiting 2.001s".
inline absl::Status ReceiveDeadlineError(int32_t peer, uint64_t tag, absl::Duration waited) {
  return absl::DeadlineExceededError(absl::StrCat("no message from actor ", peer, " with tag ", tag, " after waiting ",
                                                  absl::FormatDuration(absl::Trunc(waited, absl::Milliseconds(1)))));
}

}  // namespace tandem::actor

#endif  // TANDEM_ACTOR_TRANSPORT_H_
