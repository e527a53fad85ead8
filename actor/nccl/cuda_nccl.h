// NcclPairCommunicator: the NCCL link between two actors on different GPUs,
// one two-rank communicator per actor pair (the data plane's GPU-to-GPU
// medium; actors sharing a GPU use CUDA IPC instead: NCCL refuses two ranks
// on one GPU).
//
// Bootstrap: one side makes the pair's NCCL unique id (NewNcclUniqueId;
// ncclGetUniqueId needs no GPU) and hands it to the other through any
// channel (a replica group: over its TCP rendezvous); the lower actor joins
// as rank 0.
// Join uses NCCL's non-blocking mode and polls the communicator's state, so
// a peer that never joins becomes DeadlineExceeded (and the half-formed
// communicator is aborted) instead of a hang inside ncclCommInitRank.
//
// Send and Receive move raw device bytes on the caller's CUDA stream and
// wait (bounded) until the transfer completed; a transfer that misses its
// deadline aborts the communicator, which is then unusable.
//
// Ownership and threading: the object owns its communicator (finalized and
// destroyed, or aborted, in the destructor). One thread at a time.
#ifndef TANDEM_ACTOR_NCCL_NCCL_COMMUNICATOR_H_
#define TANDEM_ACTOR_NCCL_NCCL_COMMUNICATOR_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace tandem::actor::nccl {

inline constexpr size_t kNcclUniqueIdBytes = 128;  // NCCL_UNIQUE_ID_BYTES

// A fresh NCCL unique id (kNcclUniqueIdBytes bytes); Internal with NCCL's
// words when NCCL cannot make one (no network interface, ...). The one
// maker of ids, for pair communicators and replica groups alike.
absl::StatusOr<std::string> NewNcclUniqueId();

class NcclPairCommunicator {
 public:
  // Joins the pair communicator `unique_id` (kNcclUniqueIdBytes bytes) as
  // `rank` (0 or 1) on CUDA device `device`. InvalidArgument for a bad id
  // size or rank; FailedPrecondition without that device; DeadlineExceeded
  // when the other rank has not joined by `deadline`; Internal with NCCL's
  // words for NCCL errors.
  static absl::StatusOr<std::unique_ptr<NcclPairCommunicator>> Join(absl::string_view unique_id, int rank,
                                                                    int device, absl::Time deadline);
  ~NcclPairCommunicator();
  NcclPairCommunicator(const NcclPairCommunicator&) = delete;
  NcclPairCommunicator& operator=(const NcclPairCommunicator&) = delete;

  int rank() const { return rank_; }

  // Sends `bytes` bytes at device address `data` to the other rank, on
  // `stream` (a cudaStream_t), and waits until done or `deadline`.
  absl::Status Send(const void* data, int64_t bytes, void* stream, absl::Time deadline);
  // Receives `bytes` bytes into device address `data`, likewise.
  absl::Status Receive(void* data, int64_t bytes, void* stream, absl::Time deadline);

 private:
  struct Impl;
  NcclPairCommunicator(std::unique_ptr<Impl> impl, int rank);
  absl::Status Transfer(bool send, void* data, int64_t bytes, void* stream, absl::Time deadline);

  std::unique_ptr<Impl> impl_;
  int rank_;
};

}  // namespace tandem::actor::nccl

#endif  // TANDEM_ACTOR_NCCL_NCCL_COMMUNICATOR_H_
