#include "actor/data_plane.h"

#include <unistd.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "actor/shm_transport.h"
#include "actor/tcp_transport.h"

namespace tandem::actor {
namespace {

// Closes every descriptor still owned by `peers` (Connect owns them all).
void ClosePeerFds(std::vector<DataPlane::Peer>& peers) {
  for (DataPlane::Peer& peer : peers) {
    if (peer.region_fd >= 0) close(peer.region_fd);
    peer.region_fd = -1;
  }
}

// OK if `peers` names every actor but `self` exactly once.
absl::Status CheckPeers(const std::vector<DataPlane::Peer>& peers, int32_t self, int32_t num_actors) {
  std::vector<bool> seen(num_actors, false);
  for (const DataPlane::Peer& peer : peers) {
    if (peer.actor < 0 || peer.actor >= num_actors || peer.actor == self) {
      return absl::InvalidArgumentError(absl::StrCat("actor ", self, ": data-plane peer ", peer.actor,
                                                     " is not another actor of the ", num_actors));
    }
    if (seen[peer.actor]) {
      return absl::InvalidArgumentError(absl::StrCat("actor ", self, ": data-plane peer ", peer.actor, " is given twice"));
    }
    seen[peer.actor] = true;
  }
  for (int32_t actor = 0; actor < num_actors; ++actor) {
    if (actor != self && !seen[actor]) {
      return absl::InvalidArgumentError(absl::StrCat("actor ", self, ": data-plane peer ", actor, " is missing"));
    }
  }
  return absl::OkStatus();
}

class ShmDataPlane final : public DataPlane {
 public:
  ShmDataPlane(std::unique_ptr<ShmTransport> transport, int32_t num_actors)
      : transport_(std::move(transport)), num_actors_(num_actors) {}

  ir::DataPlaneKind kind() const override { return ir::DataPlaneKind::kShm; }
  Transport& transport() override { return *transport_; }

  Offer GetOffer() const override {
    Offer offer;
    for (int32_t peer = 0; peer < num_actors_; ++peer) {
      if (peer != transport_->actor()) offer.regions.push_back({peer, transport_->OutboundFd(peer)});
    }
    return offer;
  }

  absl::Status Connect(std::vector<Peer> peers, absl::Duration timeout) override {
    absl::Status status = CheckPeers(peers, transport_->actor(), num_actors_);
    for (Peer& peer : peers) {
      if (!status.ok()) break;
      if (peer.region_fd < 0) {
        status = absl::InvalidArgumentError(absl::StrCat("actor ", transport_->actor(), ": data-plane peer ",
                                                         peer.actor, " came without its shared-memory ring"));
        break;
      }
      // AttachInbound takes the descriptor over, whatever it returns.
      status = transport_->AttachInbound(peer.actor, std::exchange(peer.region_fd, -1));
    }
    ClosePeerFds(peers);
    return status;
  }

  absl::Status Flush(absl::Time deadline) override { return transport_->Flush(deadline); }

 private:
  std::unique_ptr<ShmTransport> transport_;
  int32_t num_actors_;
};

class TcpDataPlane final : public DataPlane {
 public:
  TcpDataPlane(std::unique_ptr<TcpTransport> transport, int32_t num_actors, std::string host)
      : transport_(std::move(transport)), num_actors_(num_actors), host_(std::move(host)) {}

  ir::DataPlaneKind kind() const override { return ir::DataPlaneKind::kTcp; }
  Transport& transport() override { return *transport_; }

  Offer GetOffer() const override {
    Offer offer;
    offer.tcp_address = absl::StrCat(host_, ":", transport_->port());
    return offer;
  }

  absl::Status Connect(std::vector<Peer> peers, absl::Duration timeout) override {
    absl::Status status = CheckPeers(peers, transport_->actor(), num_actors_);
    ClosePeerFds(peers);
    if (!status.ok()) return status;
    std::vector<std::string> addresses(num_actors_);
    for (const Peer& peer : peers) {
      if (peer.tcp_address.empty()) {
        return absl::InvalidArgumentError(absl::StrCat("actor ", transport_->actor(), ": data-plane peer ",
                                                       peer.actor, " came without its TCP address"));
      }
      addresses[peer.actor] = peer.tcp_address;
    }
    return transport_->ConnectPeers(addresses, timeout);
  }

  absl::Status Flush(absl::Time deadline) override { return transport_->Flush(deadline); }
  int64_t refused_connections() const override { return transport_->refused_connections(); }

 private:
  std::unique_ptr<TcpTransport> transport_;
  int32_t num_actors_;
  std::string host_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<DataPlane>> CreateDataPlane(ir::DataPlaneKind kind, int32_t actor, int32_t num_actors,
                                                           const DataPlaneOptions& options) {
  if (kind == ir::DataPlaneKind::kShm) {
    ShmTransport::Options shm;
    shm.ring_bytes = options.shm_ring_bytes;
    absl::StatusOr<std::unique_ptr<ShmTransport>> transport = ShmTransport::Create(actor, num_actors, shm);
    if (!transport.ok()) return transport.status();
    return std::make_unique<ShmDataPlane>(*std::move(transport), num_actors);
  }
  TcpTransport::Options tcp;
  tcp.bind_host = options.tcp_bind_host;
  tcp.token = options.token;
  tcp.log = options.log;
  absl::StatusOr<std::unique_ptr<TcpTransport>> transport = TcpTransport::Listen(actor, num_actors, tcp);
  if (!transport.ok()) return transport.status();
  return std::make_unique<TcpDataPlane>(*std::move(transport), num_actors, options.tcp_bind_host);
}

}  // namespace tandem::actor
