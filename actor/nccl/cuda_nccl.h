// CudaNccl: the NcclLibrary (nccl_library.h) of real GPUs, NCCL itself over
// a CudaDeviceMemory's side streams: the data plane's medium between actors
// on different GPUs (actors sharing a GPU use CUDA IPC instead: NCCL refuses
// two ranks of one communicator on one GPU).
//
// Communicators are non-blocking (ncclCommInitRankConfig with blocking = 0):
// StartJoin returns at once and State polls ncclCommGetAsyncError, so a peer
// that never joins is its caller's deadline, not a hang inside NCCL. A call
// that answers ncclInProgress is waited for (bounded) before the next one,
// as NCCL's non-blocking mode requires. Transfers are ncclSend / ncclRecv of
// bytes (ncclUint8) on the side stream's cudaStream_t.
//
// Plain C++ (no NCCL or CUDA header). Ownership and threading: borrows the
// memory, which must outlive it; owns its communicators (the destructor
// aborts those not destroyed). Thread-safe.
#ifndef TANDEM_ACTOR_NCCL_CUDA_NCCL_H_
#define TANDEM_ACTOR_NCCL_CUDA_NCCL_H_

#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "actor/nccl/nccl_library.h"
#include "backends/cuda/cuda_device_memory.h"

namespace tandem::actor::nccl {

// A fresh NCCL unique id (kNcclUniqueIdBytes bytes); Internal with NCCL's
// words when NCCL cannot make one (no network interface, ...). It needs no
// GPU. The one maker of real ids, for the data plane and replica groups.
absl::StatusOr<std::string> NewNcclUniqueId();

class CudaNccl final : public NcclLibrary {
 public:
  explicit CudaNccl(cuda::CudaDeviceMemory& memory) : memory_(memory) {}
  CudaNccl(const CudaNccl&) = delete;
  CudaNccl& operator=(const CudaNccl&) = delete;
  ~CudaNccl() override;

  std::string name() const override;
  backends::DeviceMemory& memory() const override { return memory_; }

  absl::StatusOr<std::string> DeviceId() override;  // the GPU's UUID
  absl::StatusOr<std::string> NewUniqueId() override { return NewNcclUniqueId(); }
  absl::StatusOr<Comm> StartJoin(absl::string_view unique_id, int ranks, int rank) override;
  absl::StatusOr<bool> State(Comm comm) override;
  absl::Status Transfer(bool send, Comm comm, backends::DeviceAddress data, int64_t bytes, int peer,
                        backends::StreamId stream) override;
  void Abort(Comm comm) override;
  absl::Status Destroy(Comm comm) override;

 private:
  absl::StatusOr<void*> Find(Comm comm) const;

  cuda::CudaDeviceMemory& memory_;
  mutable absl::Mutex mu_;
  std::map<Comm, void*> comms_ ABSL_GUARDED_BY(mu_);  // ncclComm_t
  Comm next_comm_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace tandem::actor::nccl

#endif  // TANDEM_ACTOR_NCCL_CUDA_NCCL_H_
