// PeerMailbox: the receiving half that every data-plane transport shares
// (in_memory_transport, shm_transport, tcp_transport, ipc_transport): the
// messages that arrived and are not claimed yet, keyed by (peer, tag); an
// error per peer that sticks once set (a lost connection, a corrupt ring);
// and the abort status, where the first Abort wins.
//
// What a Receive answers, in this order: the abort status once aborted;
// the message when it is there (a message that came before its peer's
// error is still delivered); the peer's error, "no message from actor 1
// with tag 7: <the error>"; DeadlineExceeded ("no message from actor 1
// with tag 7 after waiting 200ms") once the deadline passes.
//
// How the transports use it. Whatever files messages (a reader thread, a
// drain of a shared-memory ring, an in-process Send) calls File() and, when
// its peer is gone, FailPeer(). A transport whose messages arrive under its
// own absl::Mutex waits with Receive(): Mutex::AwaitWithDeadline
// re-evaluates the mailbox whenever that mutex is released, so no condition
// variable needs signalling. A transport woken by something else (a futex
// word another process bumps) calls TryClaim() in its own wait loop.
//
// Thread-safety: none of its own; every call is made under the owning
// transport's mutex, which Receive() takes as its argument.
#ifndef TANDEM_ACTOR_PEER_MAILBOX_H_
#define TANDEM_ACTOR_PEER_MAILBOX_H_

#include <cstdint>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "actor/transport.h"

namespace tandem::actor {

template <typename Message>
class PeerMailbox {
 public:
  // Messages from peers in [0, num_peers).
  explicit PeerMailbox(int32_t num_peers) : peers_(static_cast<size_t>(num_peers)) {}

  // Files `message` from `peer` under `tag`. DataLoss ("actor 1 sent tag 7
  // again before it was received") when one is there already: the peer
  // broke the protocol, and the first message is kept.
  absl::Status File(int32_t peer, uint64_t tag, Message message) {
    if (!peers_[peer].messages.emplace(tag, std::move(message)).second) {
      return absl::DataLossError(absl::StrCat("actor ", peer, " sent tag ", tag, " again before it was received"));
    }
    return absl::OkStatus();
  }

  // `peer` is gone (or broke the protocol): Receives of messages it has not
  // delivered end with `error`. The first error sticks.
  void FailPeer(int32_t peer, absl::Status error) {
    if (peers_[peer].error.ok()) peers_[peer].error = std::move(error);
  }
  const absl::Status& peer_error(int32_t peer) const { return peers_[peer].error; }

  // Sets the abort status (an OK `status` becomes Aborted "aborted"); the
  // first call wins. Whether this call was the first.
  bool Abort(absl::Status status) {
    if (!abort_status_.ok()) return false;
    abort_status_ = status.ok() ? absl::AbortedError("aborted") : std::move(status);
    return true;
  }
  const absl::Status& abort_status() const { return abort_status_; }

  // The answer for (peer, tag) if there is one now (see the top), claiming
  // the message; nullopt while the Receive must go on waiting.
  std::optional<absl::StatusOr<Message>> TryClaim(int32_t peer, uint64_t tag) {
    if (!abort_status_.ok()) return abort_status_;
    Peer& p = peers_[peer];
    auto it = p.messages.find(tag);
    if (it != p.messages.end()) {
      Message message = std::move(it->second);
      p.messages.erase(it);
      return message;
    }
    if (!p.error.ok()) {
      return absl::Status(p.error.code(),
                          absl::StrCat("no message from actor ", peer, " with tag ", tag, ": ", p.error.message()));
    }
    return std::nullopt;
  }

  // Waits under `mu` (held by the caller, and guarding this mailbox) until
  // TryClaim answers or `deadline` passes; `start` is when the Receive
  // began, for the deadline error.
  absl::StatusOr<Message> Receive(absl::Mutex& mu, int32_t peer, uint64_t tag, absl::Time start, absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    // A pure predicate: Abseil may evaluate it on whichever thread releases
    // `mu`.
    auto answerable = [this, peer, tag] {
      const Peer& p = peers_[peer];
      return !abort_status_.ok() || p.messages.contains(tag) || !p.error.ok();
    };
    mu.AwaitWithDeadline(absl::Condition(&answerable), deadline);
    if (std::optional<absl::StatusOr<Message>> answer = TryClaim(peer, tag); answer.has_value()) {
      return *std::move(answer);
    }
    return ReceiveDeadlineError(peer, tag, absl::Now() - start);
  }

  // Every unclaimed message: f(peer, tag, message).
  template <typename F>
  void ForEach(F f) const {
    for (size_t peer = 0; peer < peers_.size(); ++peer) {
      for (const auto& [tag, message] : peers_[peer].messages) f(static_cast<int32_t>(peer), tag, message);
    }
  }

  // Forgets every message, every peer's error and the abort status.
  void Clear() {
    for (Peer& p : peers_) p = Peer();
    abort_status_ = absl::OkStatus();
  }

 private:
  struct Peer {
    std::map<uint64_t, Message> messages;  // by tag
    absl::Status error;
  };
  std::vector<Peer> peers_;  // by peer
  absl::Status abort_status_;
};

}  // namespace tandem::actor

#endif  // TANDEM_ACTOR_PEER_MAILBOX_H_
