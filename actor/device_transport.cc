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
  std::vector<bool> is_ipc_peer(static_cast<size_t>(num_actors_), false);
  for (int32_t peer : ipc_peers) {
    if (peer < 0 || peer >= num_actors_ || peer == actor() || is_ipc_peer[peer]) {
      return absl::InvalidArgumentError(
          absl::StrCat("actor ", actor(), ": bad CUDA IPC peer ", peer, " (of ", num_actors_, " actors)"));
    }
    is_ipc_peer[peer] = true;
  }
  std::shared_ptr<IpcTransport> ipc;
  {
    absl::MutexLock lock(&mu_);
    if (connect_called_) return absl::FailedPreconditionError(absl::StrCat("actor ", actor(), ": connected twice"));
    connect_called_ = true;
    if (!abort_.ok()) return abort_;
    is_ipc_peer_ = is_ipc_peer;
    if (ipc_peers.empty()) return absl::OkStatus();
    IpcTransport::Options options = options_.ipc;
    options.peers = std::move(ipc_peers);
    absl::StatusOr<std::unique_ptr<IpcTransport>> created =
        IpcTransport::Create(actor(), num_actors_, memory_, host_, options);
    if (!created.ok()) return created.status();
    ipc_ = *std::move(created);
    ipc = ipc_;
  }
  // Abort (under the lock) reaches it from here on; Connect waits outside.
  return ipc->Connect(deadline);
}

absl::Status DeviceTransport::Flush(absl::Time deadline) {
  std::shared_ptr<IpcTransport> ipc;
  {
    absl::MutexLock lock(&mu_);
    ipc = ipc_;
  }
  return ipc == nullptr ? absl::OkStatus() : ipc->Flush(deadline);
}

absl::Status DeviceTransport::Send(int32_t peer, uint64_t tag, std::vector<ir::HostTensor> tensors) {
  return host_.Send(peer, tag, std::move(tensors));
}

absl::StatusOr<std::vector<ir::HostTensor>> DeviceTransport::Receive(int32_t peer, uint64_t tag,
                                                                     absl::Time deadline) {
  return host_.Receive(peer, tag, deadline);
}

absl::StatusOr<IpcTransport*> DeviceTransport::IpcTo(int32_t peer) const {
  absl::MutexLock lock(&mu_);
  if (!abort_.ok()) return abort_;
  if (peer >= 0 && peer < static_cast<int32_t>(is_ipc_peer_.size()) && is_ipc_peer_[peer]) return ipc_.get();
  return nullptr;
}

absl::Status DeviceTransport::SendDevice(int32_t peer, uint64_t tag, std::vector<backends::DeviceTensor> tensors) {
  absl::StatusOr<IpcTransport*> ipc = IpcTo(peer);
  if (!ipc.ok()) return ipc.status();
  absl::Status sent;
  if (*ipc != nullptr) {
    sent = (*ipc)->Send(peer, tag, std::move(tensors));
  } else {
    // Off the device: staged through the host. The download waits for the
    // kernels that produced the tensors.
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
    sent = host_.Send(peer, tag, std::move(staged));
  }
  if (sent.ok() && ++device_sends_ == options_.die_at_send) ir::InjectedCrash();  // dies mid-transfer
  return sent;
}

absl::StatusOr<std::vector<backends::DeviceTensor>> DeviceTransport::ReceiveDevice(int32_t peer, uint64_t tag,
                                                                                   absl::Time deadline) {
  absl::StatusOr<IpcTransport*> ipc = IpcTo(peer);
  if (!ipc.ok()) return ipc.status();
  if (*ipc != nullptr) return (*ipc)->Receive(peer, tag, deadline);
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
  if (ipc_ != nullptr) {
    ipc_->Abort(std::move(status));  // aborts the host transport too
  } else {
    host_.Abort(std::move(status));
  }
}

}  // namespace tandem::actor
