#include "actor/nccl/nccl_replica_group.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstring>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "actor/nccl/nccl_wait.h"
#include "backends/cuda/cuda_kernels.cuh"
#include "backends/cuda/cuda_runtime.h"
#include "backends/cuda/cuda_status.h"
#include "ir/all_reduce.h"

namespace tandem::actor::nccl {
namespace {

// "replica group (actors 1, 3)", as actor::DescribeGroup says it (that
// library links this one, not the other way round).
std::string GroupName(const std::vector<int32_t>& actors) {
  return absl::StrCat("replica group (actors ", absl::StrJoin(actors, ", "), ")");
}

}  // namespace

absl::StatusOr<std::string> DeviceUuid(int device) {
  if (absl::Status status = cuda::CheckDevice(device); !status.ok()) return status;
  cudaDeviceProp properties{};
  if (cudaError_t error = cudaGetDeviceProperties(&properties, device); error != cudaSuccess) {
    return cuda::CudaStatus(error, "cudaGetDeviceProperties");
  }
  static_assert(sizeof(properties.uuid.bytes) == 16);
  return std::string(properties.uuid.bytes, sizeof(properties.uuid.bytes));
}

struct NcclReplicaGroup::Impl {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  int device = 0;
  bool broken = false;  // aborted after an error or a missed deadline
  // Device staging, grown to the largest bucket seen: the bucket, the D
  // received copies of this member's shard, and the gathered shards (D
  // blocks of the largest shard).
  float* bucket = nullptr;
  float* slots = nullptr;
  float* gathered = nullptr;
  int64_t capacity = 0;  // elements of `bucket`; slots and gathered hold D * ceil(capacity / D)

  ~Impl() {
    cudaSetDevice(device);
    cudaFree(bucket);
    cudaFree(slots);
    cudaFree(gathered);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }

  // Waits until the communicator has no operation in progress.
  absl::Status WaitComm(absl::string_view what, absl::Time deadline) { return WaitUntilIdle(comm, what, deadline); }


  // Waits until everything on the stream ran, watching the communicator.
  absl::Status WaitStream(absl::string_view what, absl::Time deadline) {
    for (;;) {
      const cudaError_t state = cudaStreamQuery(stream);
      if (state == cudaSuccess) return absl::OkStatus();
      if (state != cudaErrorNotReady) return cuda::CudaStatus(state, what);
      ncclResult_t async = ncclSuccess;
      if (ncclCommGetAsyncError(comm, &async) == ncclSuccess && async != ncclSuccess && async != ncclInProgress) {
        return NcclError(what, async);
      }
      if (absl::Now() >= deadline) return absl::DeadlineExceededError(absl::StrCat(what, " did not complete in time"));
      std::this_thread::sleep_for(absl::ToChronoMicroseconds(kNcclPoll));
    }
  }

  absl::Status Reserve(int64_t elements, int32_t members) {
    if (elements <= capacity) return absl::OkStatus();
    cudaFree(bucket);
    cudaFree(slots);
    cudaFree(gathered);
    bucket = slots = gathered = nullptr;
    capacity = 0;
    const int64_t shard = (elements + members - 1) / members;
    const size_t staged = static_cast<size_t>(shard) * static_cast<size_t>(members) * sizeof(float);
    if (absl::Status status =
            cuda::CudaStatus(cudaMalloc(&bucket, static_cast<size_t>(elements) * sizeof(float)),
                             absl::StrCat("cudaMalloc of an all-reduce bucket of ", elements, " elements"),
                             absl::StatusCode::kResourceExhausted);
        !status.ok()) {
      return status;
    }
    for (float** area : {&slots, &gathered}) {
      if (absl::Status status = cuda::CudaStatus(cudaMalloc(area, staged),
                                                 absl::StrCat("cudaMalloc of all-reduce staging of ", staged, " bytes"),
                                                 absl::StatusCode::kResourceExhausted);
          !status.ok()) {
        return status;
      }
    }
    capacity = elements;
    return absl::OkStatus();
  }

  absl::Status Break(absl::Status status) {
    if (!broken && comm != nullptr) ncclCommAbort(comm);
    comm = nullptr;
    broken = true;
    return status;
  }
};

absl::StatusOr<std::unique_ptr<NcclReplicaGroup>> NcclReplicaGroup::Join(absl::string_view unique_id,
                                                                         std::vector<int32_t> actors, int32_t rank,
                                                                         int device, absl::Time deadline) {
  if (unique_id.size() != kNcclUniqueIdBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("an NCCL unique id has ", kNcclUniqueIdBytes, " bytes, not ", unique_id.size()));
  }
  const auto members = static_cast<int32_t>(actors.size());
  if (members < 2 || rank < 0 || rank >= members) {
    return absl::InvalidArgumentError(
        absl::StrCat("member ", rank, " of an NCCL replica group of ", members, " (it needs 2 or more)"));
  }
  if (absl::Status status = cuda::CheckDevice(device); !status.ok()) return status;
  if (cudaError_t error = cudaSetDevice(device); error != cudaSuccess) return cuda::CudaStatus(error, "cudaSetDevice");
  auto impl = std::make_unique<Impl>();
  impl->device = device;
  if (cudaError_t error = cudaStreamCreateWithFlags(&impl->stream, cudaStreamNonBlocking); error != cudaSuccess) {
    return cuda::CudaStatus(error, "cudaStreamCreateWithFlags");
  }
  ncclUniqueId id;
  std::memcpy(id.internal, unique_id.data(), kNcclUniqueIdBytes);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // so that a missing member is a deadline, not a hang
  ncclResult_t result = ncclCommInitRankConfig(&impl->comm, members, id, rank, &config);
  if (result != ncclSuccess && result != ncclInProgress) {
    return impl->Break(NcclError("ncclCommInitRankConfig", result));
  }
  if (absl::Status status = impl->WaitComm(absl::StrCat("joining the NCCL communicator of ", GroupName(actors)),
                                           deadline);
      !status.ok()) {
    return impl->Break(status);
  }
  return std::unique_ptr<NcclReplicaGroup>(new NcclReplicaGroup(std::move(impl), std::move(actors), rank));
}

NcclReplicaGroup::NcclReplicaGroup(std::unique_ptr<Impl> impl, std::vector<int32_t> actors, int32_t rank)
    : impl_(std::move(impl)), actors_(std::move(actors)), rank_(rank) {}

NcclReplicaGroup::~NcclReplicaGroup() {
  if (impl_->broken || impl_->comm == nullptr) return;
  cudaSetDevice(impl_->device);
  ncclResult_t result = ncclCommFinalize(impl_->comm);
  if ((result == ncclSuccess || result == ncclInProgress) &&
      impl_->WaitComm("ncclCommFinalize", absl::Now() + absl::Seconds(5)).ok()) {
    ncclCommDestroy(impl_->comm);
  } else {
    ncclCommAbort(impl_->comm);
  }
}

absl::Status NcclReplicaGroup::AllReduce(std::span<float> bucket, uint32_t tag, absl::Duration timeout) {
  const std::string what = absl::StrCat("all-reduce ", tag, " of ", GroupName(actors_));
  if (impl_->broken) return absl::FailedPreconditionError(absl::StrCat(what, ": the group was aborted after an error"));
  const absl::Time deadline = absl::Now() + timeout;
  const int32_t members = size();
  const auto n = static_cast<int64_t>(bucket.size());
  if (cudaError_t error = cudaSetDevice(impl_->device); error != cudaSuccess)
    return cuda::CudaStatus(error, "cudaSetDevice");
  if (absl::Status status = impl_->Reserve(n, members); !status.ok()) return status;
  if (n == 0) return absl::OkStatus();
  cudaStream_t stream = impl_->stream;
  const int64_t largest = ir::ShardOf(n, members, 0).length;
  const ir::Shard mine = ir::ShardOf(n, members, rank_);

  auto fail = [&](absl::Status status) {
    return impl_->Break(absl::Status(status.code(), absl::StrCat(what, ": ", status.message())));
  };
  if (cudaError_t error = cudaMemcpyAsync(impl_->bucket, bucket.data(), static_cast<size_t>(n) * sizeof(float),
                                          cudaMemcpyHostToDevice, stream);
      error != cudaSuccess) {
    return fail(cuda::CudaStatus(error, "cudaMemcpyAsync to the device"));
  }
  // 1. Reduce-scatter: slot r receives member r's copy of this member's shard.
  float* own_slot = impl_->slots + static_cast<int64_t>(rank_) * largest;
  if (cudaError_t error = cudaMemcpyAsync(own_slot, impl_->bucket + mine.begin,
                                          static_cast<size_t>(mine.length) * sizeof(float), cudaMemcpyDeviceToDevice,
                                          stream);
      error != cudaSuccess) {
    return fail(cuda::CudaStatus(error, "cudaMemcpyAsync of the own shard"));
  }
  ncclResult_t result = ncclGroupStart();
  for (int32_t peer = 0; peer < members && result == ncclSuccess; ++peer) {
    if (peer == rank_) continue;
    const ir::Shard theirs = ir::ShardOf(n, members, peer);
    if (theirs.length > 0) {
      result = ncclSend(impl_->bucket + theirs.begin, static_cast<size_t>(theirs.length), ncclFloat, peer,
                        impl_->comm, stream);
    }
    if (result == ncclSuccess && mine.length > 0) {
      result = ncclRecv(impl_->slots + static_cast<int64_t>(peer) * largest, static_cast<size_t>(mine.length),
                        ncclFloat, peer, impl_->comm, stream);
    }
  }
  const ncclResult_t ended = ncclGroupEnd();
  if (result == ncclSuccess) result = ended;
  if (result != ncclSuccess && result != ncclInProgress) return fail(NcclError("reduce-scatter", result));
  if (absl::Status status = impl_->WaitComm("reduce-scatter", deadline); !status.ok()) return fail(status);
  // 2. The owner's sum, in replica order, straight into its gather block.
  float* summed = impl_->gathered + static_cast<int64_t>(rank_) * largest;
  if (cudaError_t error = cuda::kernels::LaunchSumInOrder(impl_->slots, largest, members, summed, mine.length, stream);
      error != cudaSuccess) {
    return fail(cuda::CudaStatus(error, "the ordered sum"));
  }
  // 3. All-gather (in place) of the largest-shard blocks.
  result = ncclAllGather(summed, impl_->gathered, static_cast<size_t>(largest), ncclFloat, impl_->comm, stream);
  if (result != ncclSuccess && result != ncclInProgress) return fail(NcclError("ncclAllGather", result));
  if (absl::Status status = impl_->WaitComm("all-gather", deadline); !status.ok()) return fail(status);
  // 4. Shard r's summed elements are the first ShardOf(r).length of block r.
  // The bucket is pageable host memory, and a copy into pageable memory
  // blocks the host until the stream reaches it: wait for the all-gather
  // with the deadline first (a lost peer then aborts the communicator
  // instead of blocking here, and ~Reducer's join, forever).
  if (absl::Status status = impl_->WaitStream("the all-gather on the stream", deadline); !status.ok()) {
    return fail(status);
  }
  for (int32_t r = 0; r < members; ++r) {
    const ir::Shard shard = ir::ShardOf(n, members, r);
    if (shard.length == 0) continue;
    if (cudaError_t error = cudaMemcpyAsync(bucket.data() + shard.begin,
                                            impl_->gathered + static_cast<int64_t>(r) * largest,
                                            static_cast<size_t>(shard.length) * sizeof(float), cudaMemcpyDeviceToHost,
                                            stream);
        error != cudaSuccess) {
      return fail(cuda::CudaStatus(error, "cudaMemcpyAsync to the host"));
    }
  }
  if (absl::Status status = impl_->WaitStream("the reduction on the stream", deadline); !status.ok()) {
    return fail(status);
  }
  return absl::OkStatus();
}

}  // namespace tandem::actor::nccl
