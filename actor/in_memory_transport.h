// InMemoryNetwork: the data plane of P actors that run as threads of one
// process (the `threads` launcher and the tests).
//
// One mailbox per receiving actor (peer_mailbox.h) holds the messages sent
// to it, keyed by (sender, tag), until the receiver claims them; Receive
// waits on it under the network's mutex with a deadline. Tensors are handed
// over, not copied: HostTensor copies share storage that no one writes
// again.
//
// Ownership: the network owns one Transport endpoint per actor
// (Endpoint(actor)); endpoints live as long as the network. Thread-safety:
// every method is thread-safe (one mutex guards all mailboxes); each
// endpoint is meant to be used by its actor's thread, plus Abort from
// anywhere. Reset() and PendingMessages() are for the owner between steps,
// when no actor is running.
#ifndef TANDEM_ACTOR_IN_MEMORY_TRANSPORT_H_
#define TANDEM_ACTOR_IN_MEMORY_TRANSPORT_H_

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <utility>
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

// A message sent but not (yet) received: what PendingMessages lists.
struct PendingMessage {
  int32_t sender = 0;
  int32_t receiver = 0;
  uint64_t tag = 0;
  int32_t num_tensors = 0;
  std::string ToString() const;  // "actor 0 -> actor 1 tag 5 (2 tensors)"
  friend bool operator==(const PendingMessage&, const PendingMessage&) = default;
};

class InMemoryNetwork {
 public:
  explicit InMemoryNetwork(int32_t num_actors);
  InMemoryNetwork(const InMemoryNetwork&) = delete;
  InMemoryNetwork& operator=(const InMemoryNetwork&) = delete;
  ~InMemoryNetwork();

  int32_t num_actors() const { return num_actors_; }

  // The Transport of `actor`, owned by the network. `actor` must be in
  // [0, num_actors) (CHECKed).
  Transport& Endpoint(int32_t actor);

  // Wakes every waiting Receive; from now on Send and Receive return
  // `status`. The first call wins; later ones are ignored.
  void Abort(absl::Status status) ABSL_LOCKS_EXCLUDED(mu_);
  // OK until Abort, then the status it was given.
  absl::Status abort_status() const ABSL_LOCKS_EXCLUDED(mu_);

  // Messages sent and not received, by receiver, sender, tag. After a
  // completed step this is empty unless a program sends what no one receives.
  std::vector<PendingMessage> PendingMessages() const ABSL_LOCKS_EXCLUDED(mu_);

  // Forgets every message, every tag seen and the abort status: the start of
  // a new step. Call only while no actor is using the network.
  void Reset() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  class ActorEndpoint;
  using MessageKey = std::pair<int32_t, uint64_t>;  // (sender, tag)

  struct Mailbox {
    explicit Mailbox(int32_t num_actors) : messages(num_actors) {}
    PeerMailbox<std::vector<ir::HostTensor>> messages;  // every one holds the network's abort status
    // Every (sender, tag) delivered to this mailbox in this step, claimed or
    // not: a second one is an error.
    std::set<MessageKey> seen;
  };

  absl::Status Send(int32_t sender, int32_t receiver, uint64_t tag, std::vector<ir::HostTensor> tensors)
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<std::vector<ir::HostTensor>> Receive(int32_t receiver, int32_t sender, uint64_t tag,
                                                      absl::Time deadline) ABSL_LOCKS_EXCLUDED(mu_);

  const int32_t num_actors_;
  mutable absl::Mutex mu_;
  std::vector<Mailbox> mailboxes_ ABSL_GUARDED_BY(mu_);  // by receiver
  std::vector<std::unique_ptr<ActorEndpoint>> endpoints_;  // by actor; immutable after construction
};

}  // namespace tandem::actor

#endif  // TANDEM_ACTOR_IN_MEMORY_TRANSPORT_H_
