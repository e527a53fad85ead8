// DataPlane: an actor process's Transport together with its setup across
// processes, which the control plane drives in two rounds:
//  1. Actor.openDataPlane -> Offer(): what peers need to reach this actor
//     (the TCP address it accepts on, or the shared-memory rings it writes
//     to each peer, as file descriptors);
//  2. Actor.connectDataPlane -> Connect(): the peers' offers, as they
//     concern this actor; returns once every peer is reachable.
// Three implementations: shared memory (ShmTransport, one host), TCP
// (TcpTransport, across hosts; loopback unless told otherwise), and both
// by placement (ir::DataPlaneKind::kAuto: the offer holds the rings and a
// TCP address, and the controller gives each peer the ring when the two
// share a host, the address otherwise). TCP peers
// prove the job's token to each other (rpc/auth.h) and strangers are
// refused and counted (refused_connections()).
//
// Ownership: the DataPlane owns its Transport; the descriptors in an Offer
// stay owned by the DataPlane; Connect takes over the descriptors it is
// given (closing them on every path). Threading: Offer and transport() from
// any one thread; Connect blocks (up to its timeout) and belongs on the
// compute thread, never on an event loop.
#ifndef TANDEM_ACTOR_DATA_PLANE_H_
#define TANDEM_ACTOR_DATA_PLANE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "actor/nccl/nccl_library.h"
#include "actor/transport.h"
#include "backends/device_memory.h"
#include "ir/data_plane_kind.h"

namespace tandem::actor {

class DataPlane {
 public:
  struct Region {
    int32_t peer = 0;  // the ring this actor writes to `peer`
    int fd = -1;       // owned by the DataPlane
  };
  struct Offer {
    std::string tcp_address;      // "host:port" (TCP), empty otherwise
    std::vector<Region> regions;  // one per peer (shared memory), empty otherwise
  };
  struct Peer {
    int32_t actor = 0;
    std::string tcp_address;  // where `actor` accepts (TCP)
    int region_fd = -1;       // the ring `actor` writes to us (shared memory)
    bool shares_device = false;  // device tensors to and from `actor` go by CUDA IPC
  };

  virtual ~DataPlane() = default;

  virtual ir::DataPlaneKind kind() const = 0;
  virtual Transport& transport() = 0;
  virtual Offer GetOffer() const = 0;
  // Needs exactly one entry per other actor. InvalidArgument naming the
  // actor for a missing, repeated or out-of-range peer or one without what
  // this transport needs; the transport's errors (DataLoss for a ring that
  // is not from that peer, DeadlineExceeded for peers that never connect).
  virtual absl::Status Connect(std::vector<Peer> peers, absl::Duration timeout) = 0;
  // Waits until queued sends are written, at most until `deadline`.
  virtual absl::Status Flush(absl::Time deadline) = 0;
  // Connections from strangers refused so far (TCP); any thread.
  virtual int64_t refused_connections() const { return 0; }
};

// A ring's descriptor `fd` of process `pid`, for a control connection that
// cannot carry descriptors (TCP): the path under which a process of the same
// user on this host opens the ring, "/proc/PID/fd/FD".
std::string RegionPath(int pid, int fd);

struct DataPlaneOptions {
  int64_t shm_ring_bytes = int64_t{256} << 20;  // per ordered pair of actors
  std::string tcp_bind_host = "127.0.0.1";
  // TCP: the job's token, which connections between actors prove, and
  // where refused strangers are logged (default: stderr).
  std::string token;
  std::function<void(absl::string_view line)> log;
  // A device-resident actor's device memory (borrowed: it must outlive the
  // data plane); null for a host-resident actor.
  backends::DeviceMemory* device_memory = nullptr;
  // Per ordered pair of actors sharing the device: the IPC staging ring.
  int64_t ipc_ring_bytes = int64_t{64} << 20;
  // The NCCL calls (over device_memory) for device-resident peers on other
  // devices (borrowed: it must outlive the data plane); null: those stage
  // through the host.
  nccl::NcclLibrary* nccl = nullptr;
  // Injected fault (fake_cuda_device.h): the device send that kills the
  // process; -1: none.
  int64_t die_at_device_send = -1;
};

absl::StatusOr<std::unique_ptr<DataPlane>> CreateDataPlane(ir::DataPlaneKind kind, int32_t actor, int32_t num_actors,
                                                           const DataPlaneOptions& options);

}  // namespace tandem::actor

#endif  // TANDEM_ACTOR_DATA_PLANE_H_
