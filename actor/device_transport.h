// DeviceTransport: the data plane of a device-resident actor (device.h): its
// host Transport, which still carries host tensors, together with an
// IpcTransport (ipc_transport.h) that carries device tensors to and from the
// peers sharing its device. The IpcTransport uses the host transport as its
// host channel (tags at and above kIpcHostTagBase, which compiled programs
// never use).
//
// Which peers share the device is the launcher's choice (it knows where every
// actor is), handed to Connect as `ipc_peers`, which creates and connects
// the IpcTransport. Device tensors for any other peer (another host, another
// GPU) are staged through the host: SendDevice downloads them and sends host
// tensors over the host transport, ReceiveDevice receives host tensors and
// uploads them. Correct everywhere, at the cost of two copies over PCIe;
// NCCL send/recv between GPUs would avoid them (not wired yet).
//
// Abort aborts the IpcTransport, which aborts the host transport: waiting
// device and host receives both wake.
//
// Injected fault (fake_cuda_device.h, "fake-cuda-die"): with
// Options::die_at_send = N the process kills itself right after the N-th
// device send was handed over, with its copy still on the stream.
//
// Ownership and threading: owns the IpcTransport; borrows the host transport
// and the device memory, which must outlive it. The threading of
// Transport and IpcTransport.
#ifndef TANDEM_ACTOR_DEVICE_TRANSPORT_H_
#define TANDEM_ACTOR_DEVICE_TRANSPORT_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "actor/ipc_transport.h"
#include "actor/transport.h"
#include "backends/device_memory.h"

namespace tandem::actor {

class DeviceTransport final : public Transport {
 public:
  struct Options {
    IpcTransport::Options ipc;  // its `peers` are set from ipc_peers
    int64_t die_at_send = -1;
    // How long staging a send through the host may wait for the device.
    absl::Duration staging_wait = absl::Minutes(1);
  };

  // The transport of host.actor() among `num_actors`, whose host side works
  // at once. InvalidArgument for a bad actor count.
  static absl::StatusOr<std::unique_ptr<DeviceTransport>> Create(Transport& host, backends::DeviceMemory& memory,
                                                                 int32_t num_actors, Options options);
  DeviceTransport(const DeviceTransport&) = delete;
  DeviceTransport& operator=(const DeviceTransport&) = delete;
  ~DeviceTransport() override;

  // Creates the IpcTransport to `ipc_peers` and connects it (nothing to do
  // without IPC peers), once the host transport is connected: every peer in
  // the list must call it too. InvalidArgument for a bad peer list;
  // FailedPrecondition the second time or after Abort; IpcTransport's
  // Create and Connect errors.
  absl::Status Connect(std::vector<int32_t> ipc_peers, absl::Time deadline);
  // Waits until queued host and device sends are written.
  absl::Status Flush(absl::Time deadline);

  int32_t actor() const override { return host_.actor(); }
  absl::Status Send(int32_t peer, uint64_t tag, std::vector<ir::HostTensor> tensors) override;
  absl::StatusOr<std::vector<ir::HostTensor>> Receive(int32_t peer, uint64_t tag, absl::Time deadline) override;
  absl::Status SendDevice(int32_t peer, uint64_t tag, std::vector<backends::DeviceTensor> tensors) override;
  absl::StatusOr<std::vector<backends::DeviceTensor>> ReceiveDevice(int32_t peer, uint64_t tag,
                                                                    absl::Time deadline) override;
  void Abort(absl::Status status) override;

 private:
  DeviceTransport(Transport& host, backends::DeviceMemory& memory, int32_t num_actors, Options options)
      : host_(host), memory_(memory), num_actors_(num_actors), options_(std::move(options)) {}
  // The IpcTransport when `peer` is one of its peers; null when the pair
  // stages through the host; the abort status after Abort.
  absl::StatusOr<IpcTransport*> IpcTo(int32_t peer) const;

  Transport& host_;
  backends::DeviceMemory& memory_;
  const int32_t num_actors_;
  const Options options_;
  int64_t device_sends_ = 0;  // compute thread only

  mutable absl::Mutex mu_;
  bool connect_called_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status abort_ ABSL_GUARDED_BY(mu_);
  // Set once by Connect; read by Send/Receive (after Connect) and Abort.
  std::shared_ptr<IpcTransport> ipc_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> is_ipc_peer_ ABSL_GUARDED_BY(mu_);  // by actor
};

}  // namespace tandem::actor

#endif  // TANDEM_ACTOR_DEVICE_TRANSPORT_H_
