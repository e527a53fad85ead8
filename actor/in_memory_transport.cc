#include "actor/in_memory_transport.h"

#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace tandem::actor {

std::string PendingMessage::ToString() const {
  return absl::StrCat("actor ", sender, " -> actor ", receiver, " tag ", tag, " (", num_tensors,
                      num_tensors == 1 ? " tensor)" : " tensors)");
}

// The Transport of one actor: forwards to the network with its id bound.
class InMemoryNetwork::ActorEndpoint final : public Transport {
 public:
  ActorEndpoint(InMemoryNetwork* network, int32_t actor) : network_(network), actor_(actor) {}

  int32_t actor() const override { return actor_; }
  absl::Status Send(int32_t peer, uint64_t tag, std::vector<ir::HostTensor> tensors) override {
    return network_->Send(actor_, peer, tag, std::move(tensors));
  }
  absl::StatusOr<std::vector<ir::HostTensor>> Receive(int32_t peer, uint64_t tag, absl::Time deadline) override {
    return network_->Receive(actor_, peer, tag, deadline);
  }
  void Abort(absl::Status status) override { network_->Abort(std::move(status)); }

 private:
  InMemoryNetwork* network_;  // not owned; owns this endpoint
  int32_t actor_;
};

InMemoryNetwork::InMemoryNetwork(int32_t num_actors) : num_actors_(num_actors) {
  absl::MutexLock lock(&mu_);
  for (int32_t a = 0; a < num_actors; ++a) {
    mailboxes_.emplace_back(num_actors);
    endpoints_.push_back(std::make_unique<ActorEndpoint>(this, a));
  }
}

InMemoryNetwork::~InMemoryNetwork() = default;

Transport& InMemoryNetwork::Endpoint(int32_t actor) {
  if (actor < 0 || actor >= num_actors_) {
    std::fprintf(stderr, "tandem: internal error: no endpoint for actor %d of %d\n", actor, num_actors_);
    std::abort();
  }
  return *endpoints_[actor];
}

void InMemoryNetwork::Abort(absl::Status status) {
  absl::MutexLock lock(&mu_);
  for (Mailbox& mailbox : mailboxes_) mailbox.messages.Abort(status);
}

absl::Status InMemoryNetwork::abort_status() const {
  absl::MutexLock lock(&mu_);
  return mailboxes_.empty() ? absl::OkStatus() : mailboxes_[0].messages.abort_status();
}

std::vector<PendingMessage> InMemoryNetwork::PendingMessages() const {
  absl::MutexLock lock(&mu_);
  std::vector<PendingMessage> pending;
  for (int32_t receiver = 0; receiver < num_actors_; ++receiver) {
    mailboxes_[receiver].messages.ForEach(
        [&](int32_t sender, uint64_t tag, const std::vector<ir::HostTensor>& tensors) {
          pending.push_back({sender, receiver, tag, static_cast<int32_t>(tensors.size())});
        });
  }
  return pending;
}

void InMemoryNetwork::Reset() {
  absl::MutexLock lock(&mu_);
  for (Mailbox& mailbox : mailboxes_) {
    mailbox.messages.Clear();
    mailbox.seen.clear();
  }
}

absl::Status InMemoryNetwork::Send(int32_t sender, int32_t receiver, uint64_t tag,
                                   std::vector<ir::HostTensor> tensors) {
  if (absl::Status status = CheckPeer(sender, num_actors_, receiver); !status.ok()) return status;
  absl::MutexLock lock(&mu_);
  Mailbox& mailbox = mailboxes_[receiver];
  if (!mailbox.messages.abort_status().ok()) return mailbox.messages.abort_status();
  if (!mailbox.seen.insert(MessageKey{sender, tag}).second) {
    return absl::InvalidArgumentError(absl::StrCat("actor ", sender, " sent tag ", tag, " to actor ", receiver,
                                                   " twice in one step"));
  }
  return mailbox.messages.File(sender, tag, std::move(tensors));
}

absl::StatusOr<std::vector<ir::HostTensor>> InMemoryNetwork::Receive(int32_t receiver, int32_t sender, uint64_t tag,
                                                                     absl::Time deadline) {
  if (absl::Status status = CheckPeer(receiver, num_actors_, sender); !status.ok()) return status;
  const absl::Time start = absl::Now();
  absl::MutexLock lock(&mu_);
  return mailboxes_[receiver].messages.Receive(mu_, sender, tag, start, deadline);
}

}  // namespace tandem::actor
