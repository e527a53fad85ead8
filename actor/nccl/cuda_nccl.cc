#include "actor/nccl/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "actor/nccl/nccl_wait.h"
#include "backends/cuda/cuda_runtime.h"
#include "backends/cuda/cuda_status.h"

namespace tandem::actor::nccl {
namespace {

static_assert(kNcclUniqueIdBytes == NCCL_UNIQUE_ID_BYTES);


}  // namespace

struct NcclPairCommunicator::Impl {
  ncclComm_t comm = nullptr;
  int device = 0;
  bool broken = false;  // aborted after an error or a missed deadline

  // Waits until the communicator has no operation in progress.
  absl::Status WaitReady(absl::string_view what, absl::Time deadline) { return WaitUntilIdle(comm, what, deadline); }


  absl::Status Break(absl::Status status) {
    if (!broken && comm != nullptr) ncclCommAbort(comm);
    comm = nullptr;
    broken = true;
    return status;
  }
};

absl::StatusOr<std::string> NewNcclUniqueId() {
  ncclUniqueId id;
  if (ncclResult_t result = ncclGetUniqueId(&id); result != ncclSuccess) return NcclError("ncclGetUniqueId", result);
  return std::string(id.internal, kNcclUniqueIdBytes);
}

absl::StatusOr<std::unique_ptr<NcclPairCommunicator>> NcclPairCommunicator::Join(absl::string_view unique_id,
                                                                                 int rank, int device,
                                                                                 absl::Time deadline) {
  if (unique_id.size() != kNcclUniqueIdBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("an NCCL unique id has ", kNcclUniqueIdBytes, " bytes, not ", unique_id.size()));
  }
  if (rank != 0 && rank != 1) {
    return absl::InvalidArgumentError(absl::StrCat("a pair communicator has ranks 0 and 1, not ", rank));
  }
  if (absl::Status status = cuda::CheckDevice(device); !status.ok()) return status;
  if (absl::Status status = cuda::CudaStatus(cudaSetDevice(device), absl::StrCat("cudaSetDevice(", device, ")"));
      !status.ok()) {
    return status;
  }
  ncclUniqueId id;
  std::memcpy(id.internal, unique_id.data(), kNcclUniqueIdBytes);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // so that a missing peer is a deadline, not a hang
  auto impl = std::make_unique<Impl>();
  impl->device = device;
  ncclResult_t result = ncclCommInitRankConfig(&impl->comm, 2, id, rank, &config);
  if (result != ncclSuccess && result != ncclInProgress) {
    return impl->Break(NcclError("ncclCommInitRankConfig", result));
  }
  if (absl::Status status = impl->WaitReady("joining the NCCL pair communicator", deadline); !status.ok()) {
    return impl->Break(status);
  }
  return std::unique_ptr<NcclPairCommunicator>(new NcclPairCommunicator(std::move(impl), rank));
}

NcclPairCommunicator::NcclPairCommunicator(std::unique_ptr<Impl> impl, int rank)
    : impl_(std::move(impl)), rank_(rank) {}

NcclPairCommunicator::~NcclPairCommunicator() {
  if (impl_->broken || impl_->comm == nullptr) return;
  // Finalize flushes outstanding work; bounded like everything else, and
  // aborted if it does not finish.
  cudaSetDevice(impl_->device);
  ncclResult_t result = ncclCommFinalize(impl_->comm);
  if ((result == ncclSuccess || result == ncclInProgress) &&
      impl_->WaitReady("ncclCommFinalize", absl::Now() + absl::Seconds(5)).ok()) {
    ncclCommDestroy(impl_->comm);
  } else {
    ncclCommAbort(impl_->comm);
  }
}

absl::Status NcclPairCommunicator::Send(const void* data, int64_t bytes, void* stream, absl::Time deadline) {
  return Transfer(true, const_cast<void*>(data), bytes, stream, deadline);
}

absl::Status NcclPairCommunicator::Receive(void* data, int64_t bytes, void* stream, absl::Time deadline) {
  return Transfer(false, data, bytes, stream, deadline);
}

absl::Status NcclPairCommunicator::Transfer(bool send, void* data, int64_t bytes, void* stream,
                                            absl::Time deadline) {
  if (impl_->broken) return absl::FailedPreconditionError("the NCCL pair communicator was aborted after an error");
  if (bytes < 0) return absl::InvalidArgumentError(absl::StrCat("a transfer of ", bytes, " bytes"));
  if (absl::Status status = cuda::CudaStatus(cudaSetDevice(impl_->device), "cudaSetDevice"); !status.ok())
    return status;
  const int peer = 1 - rank_;
  auto cuda_stream = static_cast<cudaStream_t>(stream);
  const char* what = send ? "ncclSend" : "ncclRecv";
  ncclResult_t result = ncclGroupStart();
  if (result == ncclSuccess) {
    result = send ? ncclSend(data, static_cast<size_t>(bytes), ncclUint8, peer, impl_->comm, cuda_stream)
                  : ncclRecv(data, static_cast<size_t>(bytes), ncclUint8, peer, impl_->comm, cuda_stream);
    const ncclResult_t ended = ncclGroupEnd();
    if (result == ncclSuccess) result = ended;
  }
  if (result != ncclSuccess && result != ncclInProgress) return impl_->Break(NcclError(what, result));
  if (absl::Status status = impl_->WaitReady(what, deadline); !status.ok()) return impl_->Break(status);
  // The transfer is on the stream: wait for it, bounded.
  for (;;) {
    const cudaError_t state = cudaStreamQuery(cuda_stream);
    if (state == cudaSuccess) return absl::OkStatus();
    if (state != cudaErrorNotReady) {
      return impl_->Break(cuda::CudaStatus(state, absl::StrCat(what, " on the stream")));
    }
    if (absl::Now() >= deadline) {
      return impl_->Break(absl::DeadlineExceededError(
          absl::StrCat(what, " of ", bytes, " bytes with rank ", peer, " did not complete in time")));
    }
    std::this_thread::sleep_for(absl::ToChronoMicroseconds(kNcclPoll));
  }
}

}  // namespace tandem::actor::nccl
