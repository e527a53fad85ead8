#include "actor/device_transport.h"


#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "ir/fault_point.h"

namespace tandem::actor {

absl::StatusOr<std::unique_ptr<DeviceTransport>> DeviceTransport::Create(Transport& host,
                                                                         backends::DeviceMemory& memory,
                                                                         int32_t num_actors, Options options) {
  if (num_actors <= 0 || host.actor() < 0 || host.actor() >= num_actors) {
    return absl::InvalidArgumentError(absl::StrCat("device transport of actor ", host.actor(), " of ", num_actors));
  }
  return std::unique_ptr<DeviceTransport>(new DeviceTransport(host, memory, num_actors, std::move(options)));
}

DeviceTransport::~DeviceTransport() = default;

absl::Status DeviceTransport::Connect(std::vector<int32_t> ipc_peers, absl::Time deadline) {
  std::vector<Route> routes(static_cast<size_t>(num_actors_), options_.nccl != nullptr ? Route::kNccl : Route::kHost);
  for (int32_t peer : ipc_peers) {
    if (peer < 0 || peer >= num_actors_ || peer == actor() || routes[peer] == Route::kIpc) {
      return absl::InvalidArgumentError(
          absl::StrCat("actor ", actor(), ": bad CUDA IPC peer ", peer, " (of ", num_actors_, " actors)"));
    }
    routes[peer] = Route::kIpc;
  }
  std::vector<int32_t> nccl_peers;
  for (int32_t peer = 0; peer < num_actors_; ++peer) {
    if (peer != actor() && routes[peer] == Route::kNccl) nccl_peers.push_back(peer);
  }
  std::shared_ptr<IpcTransport> ipc;
  std::shared_ptr<NcclTransport> nccl;
  {
    absl::MutexLock lock(&mu_);
    if (connect_called_) return absl::FailedPreconditionError(absl::StrCat("actor ", actor(), ": connected twice"));
    connect_called_ = true;
    if (!abort_.ok()) return abort_;
    routes_ = routes;
    if (!ipc_peers.empty()) {
      IpcTransport::Options options = options_.ipc;
      options.peers = std::move(ipc_peers);
      absl::StatusOr<std::unique_ptr<IpcTransport>> created =
          IpcTransport::Create(actor(), num_actors_, memory_, host_, options);
      if (!created.ok()) return created.status();
      ipc_ = *std::move(created);
      ipc = ipc_;
    }
    if (!nccl_peers.empty()) {
      absl::StatusOr<std::unique_ptr<NcclTransport>> created =
          NcclTransport::Create(actor(), num_actors_, *options_.nccl, host_, std::move(nccl_peers));
      if (!created.ok()) return created.status();
      nccl_ = *std::move(created);
      nccl = nccl_;
    }
  }
  // Abort (under the lock) reaches them from here on; Connect waits outside.
  if (ipc != nullptr) {
    if (absl::Status status = ipc->Connect(deadline); !status.ok()) return status;
  }
  if (nccl == nullptr) return absl::OkStatus();
  if (absl::Status status = nccl->Connect(deadline); !status.ok()) return status;
  // A peer on this actor's own device that the launcher could not tell
  // (NCCL refuses such a pair) stages through the host.
  absl::MutexLock lock(&mu_);
  for (int32_t peer = 0; peer < num_actors_; ++peer) {
    if (routes_[peer] == Route::kNccl && !nccl->Reaches(peer)) routes_[peer] = Route::kHost;
  }
  return absl::OkStatus();
}

absl::Status DeviceTransport::Flush(absl::Time deadline) {
  std::shared_ptr<IpcTransport> ipc;
  std::shared_ptr<NcclTransport> nccl;
  {
    absl::MutexLock lock(&mu_);
    ipc = ipc_;
    nccl = nccl_;
  }
  if (ipc != nullptr) {
    if (absl::Status status = ipc->Flush(deadline); !status.ok()) return status;
  }
  return nccl == nullptr ? absl::OkStatus() : nccl->Flush(deadline);
}

absl::Status DeviceTransport::SettleDeviceSends(absl::Time deadline) {
  std::shared_ptr<NcclTransport> nccl;
  {
    absl::MutexLock lock(&mu_);
    nccl = nccl_;
  }
  return nccl == nullptr ? absl::OkStatus() : nccl->Flush(deadline);
}

absl::Status DeviceTransport::Send(int32_t peer, uint64_t tag, std::vector<ir::HostTensor> tensors) {
  return host_.Send(peer, tag, std::move(tensors));
}

absl::StatusOr<std::vector<ir::HostTensor>> DeviceTransport::Receive(int32_t peer, uint64_t tag,
                                                                     absl::Time deadline) {
  return host_.Receive(peer, tag, deadline);
}

absl::StatusOr<DeviceTransport::Link> DeviceTransport::LinkTo(int32_t peer) const {
  absl::MutexLock lock(&mu_);
  if (!abort_.ok()) return abort_;
  // A bad peer goes to the host transport, which names it.
  const Route route = peer >= 0 && peer < static_cast<int32_t>(routes_.size()) ? routes_[peer] : Route::kHost;
  return Link{route, ipc_.get(), nccl_.get()};
}

absl::Status DeviceTransport::SendDevice(int32_t peer, uint64_t tag, std::vector<backends::DeviceTensor> tensors) {
  absl::StatusOr<Link> link = LinkTo(peer);
  if (!link.ok()) return link.status();
  absl::Status sent;
  switch (link->route) {
    case Route::kIpc:
      sent = link->ipc->Send(peer, tag, std::move(tensors));
      break;
    case Route::kNccl:
      sent = link->nccl->Send(peer, tag, std::move(tensors));
      break;
    case Route::kHost:
      sent = StageThroughHost(peer, tag, tensors);
      break;
  }
  if (sent.ok() && ++device_sends_ == options_.die_at_send) ir::InjectedCrash();  // dies mid-transfer
  return sent;
}

absl::Status DeviceTransport::StageThroughHost(int32_t peer, uint64_t tag,
                                               const std::vector<backends::DeviceTensor>& tensors) {
  // The download waits for the kernels that produced the tensors.
  std::vector<ir::HostTensor> staged;
  staged.reserve(tensors.size());
  const absl::Time deadline = absl::Now() + options_.staging_wait;
  for (const backends::DeviceTensor& tensor : tensors) {
    absl::StatusOr<ir::HostTensor> host = backends::CopyToHost(memory_, tensor, deadline);
    if (!host.ok()) {
      return absl::Status(host.status().code(), absl::StrCat("actor ", actor(), " staging a send to actor ", peer,
                                                             ": ", host.status().message()));
    }
    staged.push_back(*std::move(host));
  }
  return host_.Send(peer, tag, std::move(staged));
}

absl::StatusOr<std::vector<backends::DeviceTensor>> DeviceTransport::ReceiveDevice(int32_t peer, uint64_t tag,
                                                                                   absl::Time deadline) {
  absl::StatusOr<Link> link = LinkTo(peer);
  if (!link.ok()) return link.status();
  if (link->route == Route::kIpc) return link->ipc->Receive(peer, tag, deadline);
  if (link->route == Route::kNccl) return link->nccl->Receive(peer, tag, deadline);
  absl::StatusOr<std::vector<ir::HostTensor>> staged = host_.Receive(peer, tag, deadline);
  if (!staged.ok()) return staged.status();
  std::vector<backends::DeviceTensor> tensors;
  tensors.reserve(staged->size());
  for (const ir::HostTensor& host : *staged) {
    absl::StatusOr<backends::DeviceTensor> tensor = backends::CopyToDevice(memory_, host, deadline);
    if (!tensor.ok()) {
      return absl::Status(tensor.status().code(), absl::StrCat("actor ", actor(), " receiving from actor ", peer,
                                                               " through the host: ", tensor.status().message()));
    }
    tensors.push_back(*std::move(tensor));
  }
  return tensors;
}

void DeviceTransport::Abort(absl::Status status) {
  absl::MutexLock lock(&mu_);
  if (abort_.ok()) abort_ = status;
  if (nccl_ != nullptr) nccl_->Abort(status);
  if (ipc_ != nullptr) ipc_->Abort(status);
  host_.Abort(std::move(status));  // a second abort of it changes nothing
}

}  // namespace tandem::actor
