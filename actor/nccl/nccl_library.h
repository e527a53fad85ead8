// NcclLibrary: the NCCL calls the device data plane makes
// (actor/nccl_transport.h), as a table with two implementations over a
// DeviceMemory's side streams (backends/device_memory.h):
//  - NCCL itself, over CudaDeviceMemory (cuda_nccl.h; builds with CUDA):
//    non-blocking communicators (ncclCommInitRankConfig with blocking = 0),
//    ncclSend / ncclRecv of bytes on a side stream's cudaStream_t,
//    ncclCommGetAsyncError, ncclCommAbort, ncclCommFinalize + Destroy;
//  - FakeNccl, over FakeDeviceMemory (fake_nccl.h): the same calls between
//    processes of one host through shared memory, run by the fake device's
//    side-stream workers, so the protocol above it runs in CI without a GPU.
// The protocol code is the same on both; only this table differs.
//
// The model is NCCL's: a communicator of `ranks` ranks is joined by every
// rank with the same unique id (made by one of them, handed to the others
// through any channel); Send and Receive are enqueued on a stream and run
// there in order, each Send matched with the peer's next Receive from this
// rank on the same communicator (no tags), and a transfer larger than
// NCCL's buffers does not complete before the peer's matching Receive runs.
// Calls on one communicator come from one thread at a time.
//
// Errors: InvalidArgument for a malformed id, a rank outside the
// communicator or a communicator this table did not make; Internal with
// NCCL's words for its failures; Unavailable when a peer is known to be
// gone.
#ifndef TANDEM_ACTOR_NCCL_NCCL_LIBRARY_H_
#define TANDEM_ACTOR_NCCL_NCCL_LIBRARY_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "backends/device.h"
#include "backends/device_memory.h"

namespace tandem::actor::nccl {

inline constexpr size_t kNcclUniqueIdBytes = 128;  // NCCL_UNIQUE_ID_BYTES
inline constexpr size_t kDeviceIdBytes = 16;       // a CUDA device's UUID

class NcclLibrary {
 public:
  // A communicator of this table; 0 is none.
  using Comm = uint64_t;

  virtual ~NcclLibrary() = default;

  // "nccl 2.21.5" or "fake-nccl", for messages.
  virtual std::string name() const = 0;
  // The memory whose side streams the transfers run on.
  virtual backends::DeviceMemory& memory() const = 0;

  // kDeviceIdBytes naming this library's device among every process's: the
  // GPU's UUID; an emulated GPU's own. Actors whose ids are equal share a
  // device, which NCCL refuses as two ranks of one communicator.
  virtual absl::StatusOr<std::string> DeviceId() = 0;

  // A fresh unique id of kNcclUniqueIdBytes bytes.
  virtual absl::StatusOr<std::string> NewUniqueId() = 0;
  // Starts joining the communicator `unique_id` as `rank` of `ranks`; never
  // waits for the others (State says when the communicator is ready).
  virtual absl::StatusOr<Comm> StartJoin(absl::string_view unique_id, int ranks, int rank) = 0;
  // False while joining; true once ready; the communicator's error once it
  // failed (joining, or a transfer since: NCCL's asynchronous error).
  virtual absl::StatusOr<bool> State(Comm comm) = 0;

  // Enqueues on side stream `stream` of memory(): sending the `bytes` bytes
  // at `data` to rank `peer` (`send`), or receiving `bytes` bytes into
  // `data` from rank `peer`. Returns once enqueued.
  virtual absl::Status Transfer(bool send, Comm comm, backends::DeviceAddress data, int64_t bytes, int peer,
                                backends::StreamId stream) = 0;
  absl::Status Send(Comm comm, backends::DeviceAddress data, int64_t bytes, int peer, backends::StreamId stream) {
    return Transfer(/*send=*/true, comm, data, bytes, peer, stream);
  }
  absl::Status Receive(Comm comm, backends::DeviceAddress data, int64_t bytes, int peer, backends::StreamId stream) {
    return Transfer(/*send=*/false, comm, data, bytes, peer, stream);
  }

  // Ends `comm` at once: transfers in progress end (their bytes undefined)
  // and the communicator is released. For a failed or stuck communicator.
  virtual void Abort(Comm comm) = 0;
  // Releases `comm`, whose transfers have completed.
  virtual absl::Status Destroy(Comm comm) = 0;
};

// The NCCL of `device`'s memory: FakeNccl on the emulated GPU, CudaNccl on
// a CUDA device (builds with CUDA); null for a device without device memory
// (the CPU). The device must outlive it.
absl::StatusOr<std::unique_ptr<NcclLibrary>> NcclLibraryFor(backends::Device& device);

}  // namespace tandem::actor::nccl

#endif  // TANDEM_ACTOR_NCCL_NCCL_LIBRARY_H_
