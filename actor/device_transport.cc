#include "actor/device_transport.h"

#include <signal.h>

#include <utility>

#include "absl/strings/str_cat.h"

namespace tandem::actor {

absl::StatusOr<std::unique_ptr<DeviceTransport>> DeviceTransport::Create(Transport& host, DeviceMemory& memory,
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

absl::StatusOr<IpcTransport*> DeviceTransport::IpcTo(int32_t peer, const char* what) const {
  absl::MutexLock lock(&mu_);
  if (!abort_.ok()) return abort_;
  if (peer >= 0 && peer < static_cast<int32_t>(is_ipc_peer_.size()) && is_ipc_peer_[peer]) return ipc_.get();
  return absl::FailedPreconditionError(absl::StrCat("actor ", actor(), " cannot ", what, " actor ", peer,
                                                    ": they share no device (CUDA IPC needs one), and there is no "
                                                    "NCCL data plane between devices yet"));
}

absl::Status DeviceTransport::SendDevice(int32_t peer, uint64_t tag, std::vector<DeviceTensor> tensors) {
  absl::StatusOr<IpcTransport*> ipc = IpcTo(peer, "send device tensors to");
  if (!ipc.ok()) return ipc.status();
  absl::Status sent = (*ipc)->Send(peer, tag, std::move(tensors));
  if (sent.ok() && ++device_sends_ == options_.die_at_send) raise(SIGKILL);  // injected: dies mid-transfer
  return sent;
}

absl::StatusOr<std::vector<DeviceTensor>> DeviceTransport::ReceiveDevice(int32_t peer, uint64_t tag,
                                                                         absl::Time deadline) {
  absl::StatusOr<IpcTransport*> ipc = IpcTo(peer, "receive device tensors from");
  if (!ipc.ok()) return ipc.status();
  return (*ipc)->Receive(peer, tag, deadline);
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
