#include "actor/data_plane.h"

#include <unistd.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "actor/device_transport.h"
#include "actor/shm_transport.h"
#include "actor/tcp_transport.h"

namespace tandem::actor {
namespace {

}  // namespace

std::string RegionPath(int pid, int fd) { return absl::StrCat("/proc/", pid, "/fd/", fd); }

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

// Shared memory to the peers on this host, TCP to the others: each call
// goes to the transport of its peer, as Connect placed it.
class PlacedTransport final : public Transport {
 public:
  PlacedTransport(ShmTransport& shm, TcpTransport& tcp, int32_t num_actors)
      : shm_(shm), tcp_(tcp), on_shm_(num_actors, false) {}

  void Place(int32_t peer, bool shared_memory) { on_shm_[peer] = shared_memory; }

  int32_t actor() const override { return shm_.actor(); }
  absl::Status Send(int32_t peer, uint64_t tag, std::vector<ir::HostTensor> tensors) override {
    return Of(peer).Send(peer, tag, std::move(tensors));
  }
  absl::StatusOr<std::vector<ir::HostTensor>> Receive(int32_t peer, uint64_t tag, absl::Time deadline) override {
    return Of(peer).Receive(peer, tag, deadline);
  }
  void Abort(absl::Status status) override {
    shm_.Abort(status);
    tcp_.Abort(status);
  }

 private:
  // A peer out of range goes to TCP, which names the error.
  Transport& Of(int32_t peer) {
    const bool shared = peer >= 0 && peer < static_cast<int32_t>(on_shm_.size()) && on_shm_[peer];
    return shared ? static_cast<Transport&>(shm_) : static_cast<Transport&>(tcp_);
  }

  ShmTransport& shm_;
  TcpTransport& tcp_;
  std::vector<bool> on_shm_;  // set by Connect, read-only once steps run
};

// ir::DataPlaneKind::kAuto: offers both its rings and a TCP address; the
// controller gives each peer one of the two, by whether the two actors
// share a host.
class PlacedDataPlane final : public DataPlane {
 public:
  PlacedDataPlane(std::unique_ptr<ShmTransport> shm, std::unique_ptr<TcpTransport> tcp, int32_t num_actors,
                  std::string host)
      : shm_(std::move(shm)),
        tcp_(std::move(tcp)),
        placed_(*shm_, *tcp_, num_actors),
        num_actors_(num_actors),
        host_(std::move(host)) {}

  ir::DataPlaneKind kind() const override { return ir::DataPlaneKind::kAuto; }
  Transport& transport() override { return placed_; }

  Offer GetOffer() const override {
    Offer offer;
    offer.tcp_address = absl::StrCat(host_, ":", tcp_->port());
    for (int32_t peer = 0; peer < num_actors_; ++peer) {
      if (peer != shm_->actor()) offer.regions.push_back({peer, shm_->OutboundFd(peer)});
    }
    return offer;
  }

  absl::Status Connect(std::vector<Peer> peers, absl::Duration timeout) override {
    absl::Status status = CheckPeers(peers, shm_->actor(), num_actors_);
    std::vector<std::string> addresses(num_actors_);
    for (Peer& peer : peers) {
      if (!status.ok()) break;
      if ((peer.region_fd >= 0) == !peer.tcp_address.empty()) {
        status = absl::InvalidArgumentError(
            absl::StrCat("actor ", shm_->actor(), ": data-plane peer ", peer.actor,
                         " needs exactly one of a shared-memory ring (same host) and a TCP address (another)"));
        break;
      }
      placed_.Place(peer.actor, peer.region_fd >= 0);
      if (peer.region_fd >= 0) {
        status = shm_->AttachInbound(peer.actor, std::exchange(peer.region_fd, -1));
      } else {
        addresses[peer.actor] = peer.tcp_address;
      }
    }
    ClosePeerFds(peers);
    if (!status.ok()) return status;
    return tcp_->ConnectPeers(addresses, timeout);
  }

  absl::Status Flush(absl::Time deadline) override {
    absl::Status shm = shm_->Flush(deadline);
    absl::Status tcp = tcp_->Flush(deadline);
    return shm.ok() ? tcp : shm;
  }
  int64_t refused_connections() const override { return tcp_->refused_connections(); }

 private:
  std::unique_ptr<ShmTransport> shm_;
  std::unique_ptr<TcpTransport> tcp_;
  PlacedTransport placed_;
  int32_t num_actors_;
  std::string host_;
};

// A host data plane with a DeviceTransport on top, for a device-resident
// actor.
class DevicePlane final : public DataPlane {
 public:
  DevicePlane(std::unique_ptr<DataPlane> host, std::unique_ptr<DeviceTransport> device)
      : host_(std::move(host)), device_(std::move(device)) {}

  ir::DataPlaneKind kind() const override { return host_->kind(); }
  Transport& transport() override { return *device_; }
  Offer GetOffer() const override { return host_->GetOffer(); }
  absl::Status Connect(std::vector<Peer> peers, absl::Duration timeout) override {
    const absl::Time deadline = absl::Now() + timeout;
    std::vector<int32_t> ipc_peers;
    for (const Peer& peer : peers) {
      if (peer.shares_device) ipc_peers.push_back(peer.actor);
    }
    if (absl::Status status = host_->Connect(std::move(peers), timeout); !status.ok()) return status;
    return device_->Connect(std::move(ipc_peers), deadline);
  }
  absl::Status Flush(absl::Time deadline) override {
    if (absl::Status status = device_->Flush(deadline); !status.ok()) return status;
    return host_->Flush(deadline);
  }
  int64_t refused_connections() const override { return host_->refused_connections(); }

 private:
  std::unique_ptr<DataPlane> host_;
  std::unique_ptr<DeviceTransport> device_;  // on host_'s transport
};

absl::StatusOr<std::unique_ptr<DataPlane>> CreateHostDataPlane(ir::DataPlaneKind kind, int32_t actor,
                                                               int32_t num_actors, const DataPlaneOptions& options) {
  std::unique_ptr<ShmTransport> shm;
  if (kind != ir::DataPlaneKind::kTcp) {
    ShmTransport::Options shm_options;
    shm_options.ring_bytes = options.shm_ring_bytes;
    absl::StatusOr<std::unique_ptr<ShmTransport>> created = ShmTransport::Create(actor, num_actors, shm_options);
    if (!created.ok()) return created.status();
    shm = *std::move(created);
    if (kind == ir::DataPlaneKind::kShm) return std::make_unique<ShmDataPlane>(std::move(shm), num_actors);
  }
  TcpTransport::Options tcp_options;
  tcp_options.bind_host = options.tcp_bind_host;
  tcp_options.token = options.token;
  tcp_options.log = options.log;
  absl::StatusOr<std::unique_ptr<TcpTransport>> tcp = TcpTransport::Listen(actor, num_actors, tcp_options);
  if (!tcp.ok()) return tcp.status();
  if (kind == ir::DataPlaneKind::kAuto) {
    return std::make_unique<PlacedDataPlane>(std::move(shm), *std::move(tcp), num_actors, options.tcp_bind_host);
  }
  return std::make_unique<TcpDataPlane>(*std::move(tcp), num_actors, options.tcp_bind_host);
}

}  // namespace

absl::StatusOr<std::unique_ptr<DataPlane>> CreateDataPlane(ir::DataPlaneKind kind, int32_t actor, int32_t num_actors,
                                                           const DataPlaneOptions& options) {
  absl::StatusOr<std::unique_ptr<DataPlane>> host = CreateHostDataPlane(kind, actor, num_actors, options);
  if (!host.ok() || options.device_memory == nullptr) return host;
  DeviceTransport::Options device_options;
  device_options.ipc.ring_bytes = options.ipc_ring_bytes;
  device_options.die_at_send = options.die_at_device_send;
  device_options.nccl = options.nccl;
  absl::StatusOr<std::unique_ptr<DeviceTransport>> device =
      DeviceTransport::Create((*host)->transport(), *options.device_memory, num_actors, device_options);
  if (!device.ok()) return device.status();
  return std::make_unique<DevicePlane>(*std::move(host), *std::move(device));
}

}  // namespace tandem::actor
