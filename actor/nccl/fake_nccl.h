// FakeNccl: the NcclLibrary (nccl_library.h) of the emulated GPU
// (backends/fake/fake_device_memory.h), so that the device data plane's
// NCCL protocol (actor/nccl_transport.h) runs between real actor
// processes in CI, on machines without a GPU.
//
// A communicator of two ranks (the only size the data plane makes) is a
// channel in fake device memory: NewUniqueId allocates it exportable and
// puts its IPC handle in the id; StartJoin imports it (the maker too) and
// marks its rank joined. The channel holds one byte ring per direction
// (Options::ring_bytes). Send and Receive run on the fake device's side
// stream as host work (FakeDeviceMemory::EnqueueHostWork): a Send writes its
// bytes into the ring as room appears and completes when the last byte is
// in; a Receive takes them out and completes when it has all of its bytes.
// So a transfer larger than the ring does not complete before the peer's
// matching Receive runs, as with NCCL's own buffers, and a protocol that
// would deadlock on NCCL deadlocks here.
//
// Waits sleep on a futex in the channel in slices of 10 ms and end with an
// error when the communicator is aborted (by either rank) or the peer's
// process is gone (Unavailable naming it). A failed transfer sets the
// communicator's error (State reports it); its stream goes on, as NCCL's
// aborted kernels return.
//
// Ownership and threading: borrows the fake device memory, which must
// outlive it and every transfer it enqueued; owns its channels (a
// communicator's outlives its last transfer). Thread-safe.
#ifndef TANDEM_ACTOR_NCCL_FAKE_NCCL_H_
#define TANDEM_ACTOR_NCCL_FAKE_NCCL_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "actor/nccl/nccl_library.h"
#include "backends/fake/fake_device_memory.h"

namespace tandem::actor::nccl {

class FakeNccl final : public NcclLibrary {
 public:
  struct Options {
    // Bytes buffered per direction of a communicator.
    int64_t ring_bytes = int64_t{1} << 20;
    // DeviceId (kDeviceIdBytes); empty: one of this memory's own (process
    // and object), so every fake device differs. Tests set it to emulate
    // two actors on one GPU that the launcher could not tell apart.
    std::string device_id;
  };
  FakeNccl(fake::FakeDeviceMemory& memory, Options options);
  FakeNccl(const FakeNccl&) = delete;
  FakeNccl& operator=(const FakeNccl&) = delete;
  ~FakeNccl() override;

  std::string name() const override { return "fake-nccl"; }
  backends::DeviceMemory& memory() const override { return memory_; }

  absl::StatusOr<std::string> DeviceId() override;
  absl::StatusOr<std::string> NewUniqueId() override;
  absl::StatusOr<Comm> StartJoin(absl::string_view unique_id, int ranks, int rank) override;
  absl::StatusOr<bool> State(Comm comm) override;
  absl::Status Transfer(bool send, Comm comm, backends::DeviceAddress data, int64_t bytes, int peer,
                        backends::StreamId stream) override;
  void Abort(Comm comm) override;
  absl::Status Destroy(Comm comm) override;

  struct Joined;  // one joined communicator; defined in the .cc

 private:
  absl::StatusOr<std::shared_ptr<Joined>> Find(Comm comm) const;

  fake::FakeDeviceMemory& memory_;
  const Options options_;
  mutable absl::Mutex mu_;
  std::map<Comm, std::shared_ptr<Joined>> comms_ ABSL_GUARDED_BY(mu_);
  // Channels this object made (NewUniqueId) whose communicator it has not
  // joined yet, by unique id: joining hands one to its communicator, the
  // destructor frees the rest.
  std::map<std::string, backends::DeviceAddress> made_ ABSL_GUARDED_BY(mu_);
  Comm next_comm_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace tandem::actor::nccl

#endif  // TANDEM_ACTOR_NCCL_FAKE_NCCL_H_
