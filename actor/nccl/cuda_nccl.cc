#include "actor/nccl/cuda_nccl.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "actor/nccl/nccl_wait.h"
#include "backends/cuda/cuda_status.h"

namespace tandem::actor::nccl {
namespace {

static_assert(kNcclUniqueIdBytes == NCCL_UNIQUE_ID_BYTES);

// How long a call that answered ncclInProgress may take to be enqueued.
constexpr absl::Duration kEnqueueWait = absl::Seconds(30);

ncclComm_t Native(void* comm) { return static_cast<ncclComm_t>(comm); }

}  // namespace

absl::StatusOr<std::string> NewNcclUniqueId() {
  ncclUniqueId id;
  if (ncclResult_t result = ncclGetUniqueId(&id); result != ncclSuccess) return NcclError("ncclGetUniqueId", result);
  return std::string(id.internal, kNcclUniqueIdBytes);
}

CudaNccl::~CudaNccl() {
  absl::MutexLock lock(&mu_);
  if (!comms_.empty()) cudaSetDevice(memory_.device());
  for (auto& [id, comm] : comms_) ncclCommAbort(Native(comm));
}

absl::StatusOr<std::string> CudaNccl::DeviceId() {
  cudaDeviceProp properties{};
  if (cudaError_t error = cudaGetDeviceProperties(&properties, memory_.device()); error != cudaSuccess) {
    return cuda::CudaStatus(error, "cudaGetDeviceProperties");
  }
  static_assert(sizeof(properties.uuid.bytes) == kDeviceIdBytes);
  return std::string(properties.uuid.bytes, kDeviceIdBytes);
}

std::string CudaNccl::name() const {
  int version = 0;
  ncclGetVersion(&version);
  return absl::StrCat("nccl ", version / 10000, ".", version / 100 % 100, ".", version % 100);
}

absl::StatusOr<void*> CudaNccl::Find(Comm comm) const {
  absl::MutexLock lock(&mu_);
  auto it = comms_.find(comm);
  if (it == comms_.end()) return absl::InvalidArgumentError(absl::StrCat("NCCL: no communicator ", comm));
  return it->second;
}

absl::StatusOr<NcclLibrary::Comm> CudaNccl::StartJoin(absl::string_view unique_id, int ranks, int rank) {
  if (unique_id.size() != kNcclUniqueIdBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("an NCCL unique id has ", kNcclUniqueIdBytes, " bytes, not ", unique_id.size()));
  }
  if (ranks < 1 || rank < 0 || rank >= ranks) {
    return absl::InvalidArgumentError(absl::StrCat("NCCL: rank ", rank, " of ", ranks));
  }
  if (absl::Status status = cuda::CudaStatus(cudaSetDevice(memory_.device()), "cudaSetDevice"); !status.ok()) return status;
  ncclUniqueId id;
  std::memcpy(id.internal, unique_id.data(), kNcclUniqueIdBytes);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // a missing peer is a deadline, not a hang
  ncclComm_t comm = nullptr;
  const ncclResult_t result = ncclCommInitRankConfig(&comm, ranks, id, rank, &config);
  if (result != ncclSuccess && result != ncclInProgress) {
    if (comm != nullptr) ncclCommAbort(comm);
    return NcclError("ncclCommInitRankConfig", result);
  }
  absl::MutexLock lock(&mu_);
  const Comm handle = next_comm_++;
  comms_.emplace(handle, comm);
  return handle;
}

absl::StatusOr<bool> CudaNccl::State(Comm comm) {
  absl::StatusOr<void*> found = Find(comm);
  if (!found.ok()) return found.status();
  ncclResult_t state = ncclSuccess;
  if (ncclResult_t result = ncclCommGetAsyncError(Native(*found), &state); result != ncclSuccess) {
    return NcclError("ncclCommGetAsyncError", result);
  }
  if (state == ncclInProgress) return false;
  if (state != ncclSuccess) return NcclError("the communicator", state);
  return true;
}

absl::Status CudaNccl::Transfer(bool send, Comm comm, backends::DeviceAddress data, int64_t bytes, int peer,
                                backends::StreamId stream) {
  absl::StatusOr<void*> found = Find(comm);
  if (!found.ok()) return found.status();
  if (bytes < 0) return absl::InvalidArgumentError(absl::StrCat("NCCL: a transfer of ", bytes, " bytes"));
  auto cuda_stream = static_cast<cudaStream_t>(memory_.side_stream_handle(stream));
  if (cuda_stream == nullptr) return absl::InvalidArgumentError(absl::StrCat("NCCL: no side stream ", stream));
  if (absl::Status status = cuda::CudaStatus(cudaSetDevice(memory_.device()), "cudaSetDevice"); !status.ok()) return status;
  void* pointer = reinterpret_cast<void*>(static_cast<uintptr_t>(data));
  const char* what = send ? "ncclSend" : "ncclRecv";
  const ncclResult_t result =
      send ? ncclSend(pointer, static_cast<size_t>(bytes), ncclUint8, peer, Native(*found), cuda_stream)
           : ncclRecv(pointer, static_cast<size_t>(bytes), ncclUint8, peer, Native(*found), cuda_stream);
  if (result == ncclSuccess) return absl::OkStatus();
  if (result != ncclInProgress) return NcclError(what, result);
  // Non-blocking mode: the call is being enqueued; the next may not start
  // before it is.
  return WaitUntilIdle(Native(*found), what, absl::Now() + kEnqueueWait);
}

void CudaNccl::Abort(Comm comm) {
  void* native = nullptr;
  {
    absl::MutexLock lock(&mu_);
    auto it = comms_.find(comm);
    if (it == comms_.end()) return;
    native = it->second;
    comms_.erase(it);
  }
  cudaSetDevice(memory_.device());
  ncclCommAbort(Native(native));
}

absl::Status CudaNccl::Destroy(Comm comm) {
  absl::StatusOr<void*> found = Find(comm);
  if (!found.ok()) return found.status();
  if (absl::Status status = cuda::CudaStatus(cudaSetDevice(memory_.device()), "cudaSetDevice"); !status.ok()) return status;
  // Finalize flushes outstanding work, bounded; a communicator that does not
  // finish is aborted instead.
  const ncclResult_t result = ncclCommFinalize(Native(*found));
  absl::Status finalized = result == ncclSuccess || result == ncclInProgress
                               ? WaitUntilIdle(Native(*found), "ncclCommFinalize", absl::Now() + absl::Seconds(5))
                               : NcclError("ncclCommFinalize", result);
  {
    absl::MutexLock lock(&mu_);
    comms_.erase(comm);
  }
  if (!finalized.ok()) {
    ncclCommAbort(Native(*found));
    return finalized;
  }
  if (ncclResult_t destroyed = ncclCommDestroy(Native(*found)); destroyed != ncclSuccess) {
    return NcclError("ncclCommDestroy", destroyed);
  }
  return absl::OkStatus();
}

}  // namespace tandem::actor::nccl
