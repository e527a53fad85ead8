// DeviceTransport: the data plane of a device-resident actor (device.h): its
// host Transport, which still carries host tensors, together with the
// transports that carry device tensors device to device: an IpcTransport
// (ipc_transport.h) to the peers sharing its device, an NcclTransport
// (nccl_transport.h) to the others. Both use the host transport as their
// host channel (tags at and above kIpcHostTagBase, which compiled programs
// never use).
//
// Which peers share the device is the launcher's choice (it knows where every
// actor is), handed to Connect as `ipc_peers`. Every other peer is reached
// through NCCL when Options::nccl names a library (NCCL itself on GPUs, the
// fake NCCL on the emulated GPU), unless the NCCL setup finds the peer on
// this actor's own device after all (srun tasks picking their GPUs); without
// a library, and for such peers, device tensors are staged through the
// host: SendDevice downloads them and sends host tensors over the host
// transport, ReceiveDevice receives host tensors and uploads them (two
// copies over PCIe and a wait on the stream each).
//
// Abort aborts the device transports and the host transport: waiting device
// and host receives all wake.
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
#include "actor/nccl/nccl_library.h"
#include "actor/nccl_transport.h"
#include "actor/transport.h"
#include "backends/device_memory.h"

namespace tandem::actor {

class DeviceTransport final : public Transport {
 public:
  struct Options {
    IpcTransport::Options ipc;  // its `peers` are set from ipc_peers
    // The NCCL calls for the peers on other devices (borrowed: it must
    // outlive the transport); null: those peers stage through the host.
    nccl::NcclLibrary* nccl = nullptr;
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

  // Creates the IpcTransport to `ipc_peers` and the NcclTransport to every
  // other actor (with a library) and connects them, once the host transport
  // is connected: every peer must call it too. InvalidArgument for a bad
  // peer list; FailedPrecondition the second time or after Abort; the
  // device transports' Create and Connect errors.
  absl::Status Connect(std::vector<int32_t> ipc_peers, absl::Time deadline);
  // Waits until queued device sends are written (IPC) or received (NCCL).
  absl::Status Flush(absl::Time deadline);

  int32_t actor() const override { return host_.actor(); }
  absl::Status Send(int32_t peer, uint64_t tag, std::vector<ir::HostTensor> tensors) override;
  absl::StatusOr<std::vector<ir::HostTensor>> Receive(int32_t peer, uint64_t tag, absl::Time deadline) override;
  absl::Status SendDevice(int32_t peer, uint64_t tag, std::vector<backends::DeviceTensor> tensors) override;
  absl::StatusOr<std::vector<backends::DeviceTensor>> ReceiveDevice(int32_t peer, uint64_t tag,
                                                                    absl::Time deadline) override;
  // The NCCL transport's Flush: its sends received.
  absl::Status SettleDeviceSends(absl::Time deadline) override;
  void Abort(absl::Status status) override;

 private:
  DeviceTransport(Transport& host, backends::DeviceMemory& memory, int32_t num_actors, Options options)
      : host_(host), memory_(memory), num_actors_(num_actors), options_(std::move(options)) {}
  enum class Route : uint8_t { kHost, kIpc, kNccl };
  // How device tensors reach a peer, and the transports (set once by
  // Connect, kept until destruction).
  struct Link {
    Route route = Route::kHost;
    IpcTransport* ipc = nullptr;
    NcclTransport* nccl = nullptr;
  };
  // `peer`'s link; the abort status after Abort.
  absl::StatusOr<Link> LinkTo(int32_t peer) const;
  absl::Status StageThroughHost(int32_t peer, uint64_t tag, const std::vector<backends::DeviceTensor>& tensors);

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
  std::shared_ptr<NcclTransport> nccl_ ABSL_GUARDED_BY(mu_);
  std::vector<Route> routes_ ABSL_GUARDED_BY(mu_);  // by actor
};

}  // namespace tandem::actor

#endif  // TANDEM_ACTOR_DEVICE_TRANSPORT_H_
