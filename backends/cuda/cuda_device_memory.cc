#include "backends/cuda/cuda_device_memory.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "backends/cuda/cuda_runtime.h"
#include "backends/cuda/cuda_status.h"

namespace tandem::cuda {
namespace {

static_assert(sizeof(cudaIpcMemHandle_t) == backends::kIpcHandleBytes);

// "Not ready" is an answer, not an error: keep it out of the thread's last
// error (which kernel launchers check), leaving any real error in place.
void ClearNotReady() {
  if (cudaPeekAtLastError() == cudaErrorNotReady) cudaGetLastError();
}
static_assert(sizeof(cudaIpcEventHandle_t) == backends::kIpcHandleBytes);

// How long the destructor and CloseImported wait for the stream at most.
constexpr absl::Duration kTeardownWait = absl::Seconds(10);

void* Pointer(backends::DeviceAddress address) { return reinterpret_cast<void*>(static_cast<uintptr_t>(address)); }
backends::DeviceAddress Address(const void* pointer) {
  return static_cast<backends::DeviceAddress>(reinterpret_cast<uintptr_t>(pointer));
}

}  // namespace

struct CudaDeviceMemory::Impl {
  int device = 0;
  std::string name;
  cudaStream_t stream = nullptr;
  std::vector<cudaStream_t> side_streams;  // side stream s is side_streams[s - 1]; under `mu`
  cudaEvent_t host_copy_done = nullptr;  // private: marks the end of a host copy

  absl::Mutex mu;
  cudaMemPool_t pool = nullptr;  // private allocations, stream-ordered on `stream`
  struct Allocation {
    int64_t bytes = 0;
    backends::Sharing sharing = backends::Sharing::kPrivate;
  };
  std::map<backends::DeviceAddress, Allocation> allocations ABSL_GUARDED_BY(mu);  // by base
  int64_t allocated_bytes ABSL_GUARDED_BY(mu) = 0;                                // their sum
  std::map<backends::DeviceAddress, int> imports ABSL_GUARDED_BY(mu);             // address -> times opened
  struct Event {
    cudaEvent_t event = nullptr;
    bool imported = false;
  };
  std::map<uint64_t, Event> events ABSL_GUARDED_BY(mu);
  uint64_t next_event_id ABSL_GUARDED_BY(mu) = 1;
  absl::Mutex host_copy_mu;  // one host copy at a time uses host_copy_done

  // The runtime's words for a failed `call`, cleared from the thread's last
  // error so that later calls do not report it again.
  absl::Status Error(cudaError_t error, absl::string_view call,
                     absl::StatusCode code = absl::StatusCode::kInternal) const {
    return CudaStatus(error, absl::StrCat(name, ": ", call), code);
  }
  // Makes the device current on the calling thread.
  absl::Status Use() const {
    const cudaError_t error = cudaSetDevice(device);
    return error == cudaSuccess ? absl::OkStatus() : Error(error, "cudaSetDevice");
  }
  absl::StatusOr<cudaEvent_t> FindEvent(backends::DeviceEvent event) const ABSL_SHARED_LOCKS_REQUIRED(mu) {
    auto it = events.find(event.id);
    if (it == events.end()) return absl::InvalidArgumentError(absl::StrCat(name, ": no event ", event.id));
    return it->second.event;
  }
  // Polls `query` (cudaStreamQuery / cudaEventQuery) until it stops saying
  // cudaErrorNotReady or `deadline` passes. A blocking synchronize has no
  // deadline, so the host polls; the pause grows from 5 to at most 20 us,
  // so that a wait ends within 20 us of the GPU's work (a 1 ms cap left the
  // GPU idle up to a millisecond per wait) at the cost of a few thousand
  // queries a second while a long kernel runs.
  template <typename Query>
  absl::Status Poll(Query query, absl::string_view call, absl::Time deadline, absl::string_view why) const {
    constexpr absl::Duration kLongestPause = absl::Microseconds(20);
    absl::Duration pause = absl::Microseconds(5);
    while (true) {
      const cudaError_t error = query();
      if (error == cudaSuccess) return absl::OkStatus();
      if (error != cudaErrorNotReady) return Error(error, call);
      ClearNotReady();
      if (absl::Now() >= deadline) {
        return absl::DeadlineExceededError(absl::StrCat(name, ": ", why, ": the stream's work was not done by the deadline"));
      }
      absl::SleepFor(pause);
      pause = std::min(pause * 2, kLongestPause);
    }
  }
  // `call(the event, on)` (cudaEventRecord or cudaStreamWaitEvent) for
  // `event` on stream `on`, under the lock; `what` names the call.
  template <typename Call>
  absl::Status WithEvent(cudaStream_t on, backends::DeviceEvent event, absl::string_view what, Call call) {
    if (absl::Status status = Use(); !status.ok()) return status;
    absl::MutexLock lock(&mu);
    absl::StatusOr<cudaEvent_t> found = FindEvent(event);
    if (!found.ok()) return found.status();
    const cudaError_t error = call(*found, on);
    return error == cudaSuccess ? absl::OkStatus() : Error(error, what);
  }
  absl::Status SynchronizeStream(absl::Time deadline, absl::string_view why) const {
    if (absl::Status status = Use(); !status.ok()) return status;
    return Poll([this] { return cudaStreamQuery(stream); }, "cudaStreamQuery", deadline, why);
  }
  // A stream-ordered host copy (see the header): waits for earlier work,
  // copies, and waits for the copy.
  absl::Status HostCopy(void* destination, const void* source, int64_t bytes, cudaMemcpyKind kind,
                        absl::Time deadline, absl::string_view why) {
    if (bytes < 0) return absl::InvalidArgumentError(absl::StrCat(name, ": copy of ", bytes, " bytes"));
    if (absl::Status status = SynchronizeStream(deadline, why); !status.ok()) return status;
    if (bytes == 0) return absl::OkStatus();
    absl::MutexLock copy_lock(&host_copy_mu);
    {
      absl::MutexLock lock(&mu);
      cudaError_t error = cudaMemcpyAsync(destination, source, static_cast<size_t>(bytes), kind, stream);
      if (error != cudaSuccess) return Error(error, "cudaMemcpyAsync");
      error = cudaEventRecord(host_copy_done, stream);
      if (error != cudaSuccess) return Error(error, "cudaEventRecord");
    }
    absl::Status status =
        Poll([this] { return cudaEventQuery(host_copy_done); }, "cudaEventQuery", deadline, why);
    if (status.code() == absl::StatusCode::kDeadlineExceeded) {
      // The copy has started and the host buffer must outlive it: wait for
      // it alone (the stream had nothing older but what other threads
      // enqueued since), then report the deadline.
      cudaEventSynchronize(host_copy_done);
    }
    return status;
  }
};

CudaDeviceMemory::CudaDeviceMemory(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

absl::StatusOr<std::unique_ptr<CudaDeviceMemory>> CudaDeviceMemory::Create(int device) {
  if (absl::Status status = CheckDevice(device); !status.ok()) return status;
  auto impl = std::make_unique<Impl>();
  impl->device = device;
  impl->name = absl::StrCat("cuda:", device);
  if (absl::Status status = impl->Use(); !status.ok()) return status;
  cudaError_t error = cudaStreamCreateWithFlags(&impl->stream, cudaStreamNonBlocking);
  if (error != cudaSuccess) return impl->Error(error, "cudaStreamCreateWithFlags");
  std::unique_ptr<CudaDeviceMemory> memory(new CudaDeviceMemory(std::move(impl)));
  Impl& m = *memory->impl_;
  error = cudaEventCreateWithFlags(&m.host_copy_done, cudaEventDisableTiming);
  if (error != cudaSuccess) return m.Error(error, "cudaEventCreateWithFlags");
  cudaMemPoolProps props;
  std::memset(&props, 0, sizeof(props));
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = cudaMemHandleTypeNone;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device;
  error = cudaMemPoolCreate(&m.pool, &props);
  if (error != cudaSuccess) return m.Error(error, "cudaMemPoolCreate");
  // Freed memory stays in the pool for the next allocations instead of
  // going back to the driver at every synchronization.
  uint64_t threshold = std::numeric_limits<uint64_t>::max();
  error = cudaMemPoolSetAttribute(m.pool, cudaMemPoolAttrReleaseThreshold, &threshold);
  if (error != cudaSuccess) return m.Error(error, "cudaMemPoolSetAttribute");
  return memory;
}

CudaDeviceMemory::~CudaDeviceMemory() {
  Impl& m = *impl_;
  if (!m.Use().ok()) return;
  m.SynchronizeStream(absl::Now() + kTeardownWait, "teardown").IgnoreError();
  absl::MutexLock lock(&m.mu);
  for (auto& [id, event] : m.events) cudaEventDestroy(event.event);
  for (auto& [address, count] : m.imports) {
    for (int i = 0; i < count; ++i) cudaIpcCloseMemHandle(Pointer(address));
  }
  for (auto& [base, allocation] : m.allocations) {
    if (allocation.sharing == backends::Sharing::kExportable) {
      cudaFree(Pointer(base));
    } else {
      cudaFreeAsync(Pointer(base), m.stream);
    }
  }
  if (m.stream != nullptr) cudaStreamSynchronize(m.stream);  // the frees above
  if (m.pool != nullptr) cudaMemPoolDestroy(m.pool);
  if (m.host_copy_done != nullptr) cudaEventDestroy(m.host_copy_done);
  if (m.stream != nullptr) cudaStreamDestroy(m.stream);
  for (cudaStream_t side : m.side_streams) {
    cudaStreamSynchronize(side);
    cudaStreamDestroy(side);
  }
  cudaGetLastError();
}

std::string CudaDeviceMemory::name() const { return impl_->name; }

int CudaDeviceMemory::device() const { return impl_->device; }

void* CudaDeviceMemory::stream_handle() const { return impl_->stream; }

absl::StatusOr<backends::DeviceAddress> CudaDeviceMemory::Allocate(int64_t bytes, backends::Sharing sharing) {
  Impl& m = *impl_;
  if (bytes < 0) return absl::InvalidArgumentError(absl::StrCat(m.name, ": cannot allocate ", bytes, " bytes"));
  if (absl::Status status = m.Use(); !status.ok()) return status;
  void* pointer = nullptr;
  const size_t size = static_cast<size_t>(std::max<int64_t>(bytes, 1));
  // cudaMalloc synchronizes the device; private memory comes from the pool,
  // in the stream's order, without waiting.
  const bool exportable = sharing == backends::Sharing::kExportable;
  const cudaError_t error = exportable ? cudaMalloc(&pointer, size) : cudaMallocFromPoolAsync(&pointer, size, m.pool, m.stream);
  if (error != cudaSuccess) {
    return m.Error(error, absl::StrCat(exportable ? "cudaMalloc" : "cudaMallocFromPoolAsync", " of ", bytes, " bytes"),
                   error == cudaErrorMemoryAllocation ? absl::StatusCode::kResourceExhausted
                                                      : absl::StatusCode::kInternal);
  }
  absl::MutexLock lock(&m.mu);
  m.allocations.emplace(Address(pointer), Impl::Allocation{bytes, sharing});
  m.allocated_bytes += bytes;
  return Address(pointer);
}

absl::Status CudaDeviceMemory::Free(backends::DeviceAddress base) {
  Impl& m = *impl_;
  if (absl::Status status = m.Use(); !status.ok()) return status;
  backends::Sharing sharing = backends::Sharing::kPrivate;
  {
    absl::MutexLock lock(&m.mu);
    auto it = m.allocations.find(base);
    if (it == m.allocations.end()) {
      return absl::InvalidArgumentError(absl::StrCat(m.name, ": free of ", absl::Hex(base), ", not an allocation"));
    }
    m.allocated_bytes -= it->second.bytes;
    sharing = it->second.sharing;
    m.allocations.erase(it);
  }
  // cudaFree waits for the device, and cudaFreeAsync frees in the stream's
  // order: either way, work already enqueued on the memory finishes first.
  const cudaError_t error =
      sharing == backends::Sharing::kExportable ? cudaFree(Pointer(base)) : cudaFreeAsync(Pointer(base), m.stream);
  return error == cudaSuccess ? absl::OkStatus() : m.Error(error, "cudaFree");
}

int64_t CudaDeviceMemory::allocated_bytes() const {
  absl::MutexLock lock(&impl_->mu);
  return impl_->allocated_bytes;
}

absl::StatusOr<backends::IpcMemHandle> CudaDeviceMemory::ExportMemory(backends::DeviceAddress base) {
  Impl& m = *impl_;
  if (absl::Status status = m.Use(); !status.ok()) return status;
  {
    absl::MutexLock lock(&m.mu);
    auto it = m.allocations.find(base);
    if (it == m.allocations.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(m.name, ": export of ", absl::Hex(base), ", not the base of an allocation"));
    }
    if (it->second.sharing != backends::Sharing::kExportable) {
      return absl::InvalidArgumentError(
          absl::StrCat(m.name, ": export of ", absl::Hex(base), ", a private allocation (allocate it exportable)"));
    }
  }
  cudaIpcMemHandle_t cuda_handle;
  const cudaError_t error = cudaIpcGetMemHandle(&cuda_handle, Pointer(base));
  if (error != cudaSuccess) return m.Error(error, "cudaIpcGetMemHandle");
  backends::IpcMemHandle handle;
  std::memcpy(handle.bytes.data(), &cuda_handle, backends::kIpcHandleBytes);
  return handle;
}

absl::StatusOr<backends::DeviceAddress> CudaDeviceMemory::ImportMemory(const backends::IpcMemHandle& handle) {
  Impl& m = *impl_;
  if (absl::Status status = m.Use(); !status.ok()) return status;
  cudaIpcMemHandle_t cuda_handle;
  std::memcpy(&cuda_handle, handle.bytes.data(), backends::kIpcHandleBytes);
  void* pointer = nullptr;
  const cudaError_t error = cudaIpcOpenMemHandle(&pointer, cuda_handle, cudaIpcMemLazyEnablePeerAccess);
  if (error != cudaSuccess) {
    return m.Error(error, "cudaIpcOpenMemHandle (is the exporting process alive, on this host, another process?)",
                   absl::StatusCode::kUnavailable);
  }
  absl::MutexLock lock(&m.mu);
  ++m.imports[Address(pointer)];
  return Address(pointer);
}

absl::Status CudaDeviceMemory::CloseImported(backends::DeviceAddress address) {
  Impl& m = *impl_;
  {
    absl::MutexLock lock(&m.mu);
    if (!m.imports.contains(address)) {
      return absl::InvalidArgumentError(
          absl::StrCat(m.name, ": close of ", absl::Hex(address), ", not an imported allocation"));
    }
  }
  // Work already enqueued may still read the mapping.
  if (absl::Status status = m.SynchronizeStream(absl::Now() + kTeardownWait, "closing an import"); !status.ok()) {
    return status;
  }
  absl::MutexLock lock(&m.mu);
  auto it = m.imports.find(address);
  if (it == m.imports.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat(m.name, ": close of ", absl::Hex(address), ", not an imported allocation"));
  }
  const cudaError_t error = cudaIpcCloseMemHandle(Pointer(address));
  if (error != cudaSuccess) return m.Error(error, "cudaIpcCloseMemHandle");
  if (--it->second == 0) m.imports.erase(it);
  return absl::OkStatus();
}

absl::Status CudaDeviceMemory::CopyAsync(backends::DeviceAddress destination, backends::DeviceAddress source,
                                         int64_t bytes) {
  Impl& m = *impl_;
  if (bytes < 0) return absl::InvalidArgumentError(absl::StrCat(m.name, ": copy of ", bytes, " bytes"));
  if (bytes == 0) return absl::OkStatus();
  if (absl::Status status = m.Use(); !status.ok()) return status;
  absl::MutexLock lock(&m.mu);
  const cudaError_t error = cudaMemcpyAsync(Pointer(destination), Pointer(source), static_cast<size_t>(bytes),
                                            cudaMemcpyDeviceToDevice, m.stream);
  return error == cudaSuccess ? absl::OkStatus() : m.Error(error, "cudaMemcpyAsync (device to device)");
}

absl::Status CudaDeviceMemory::RecordEvent(backends::DeviceEvent event) {
  return impl_->WithEvent(impl_->stream, event, "cudaEventRecord",
                          [](cudaEvent_t e, cudaStream_t on) { return cudaEventRecord(e, on); });
}

absl::Status CudaDeviceMemory::StreamWaitEvent(backends::DeviceEvent event) {
  return impl_->WithEvent(impl_->stream, event, "cudaStreamWaitEvent",
                          [](cudaEvent_t e, cudaStream_t on) { return cudaStreamWaitEvent(on, e, 0); });
}

absl::Status CudaDeviceMemory::CopyToHostAsync(void* destination, backends::DeviceAddress source, int64_t bytes) {
  Impl& m = *impl_;
  if (bytes < 0) return absl::InvalidArgumentError(absl::StrCat(m.name, ": copy of ", bytes, " bytes"));
  if (bytes == 0) return absl::OkStatus();
  if (absl::Status status = m.Use(); !status.ok()) return status;
  absl::MutexLock lock(&m.mu);
  const cudaError_t error = cudaMemcpyAsync(destination, Pointer(source), static_cast<size_t>(bytes),
                                            cudaMemcpyDeviceToHost, m.stream);
  return error == cudaSuccess ? absl::OkStatus() : m.Error(error, "cudaMemcpyAsync (device to host)");
}

absl::Status CudaDeviceMemory::CopyFromHostAsync(backends::DeviceAddress destination, const void* source,
                                                 int64_t bytes) {
  Impl& m = *impl_;
  if (bytes < 0) return absl::InvalidArgumentError(absl::StrCat(m.name, ": copy of ", bytes, " bytes"));
  if (bytes == 0) return absl::OkStatus();
  if (absl::Status status = m.Use(); !status.ok()) return status;
  absl::MutexLock lock(&m.mu);
  const cudaError_t error =
      cudaMemcpyAsync(Pointer(destination), source, static_cast<size_t>(bytes), cudaMemcpyHostToDevice, m.stream);
  return error == cudaSuccess ? absl::OkStatus() : m.Error(error, "cudaMemcpyAsync (host to device)");
}

absl::StatusOr<void*> CudaDeviceMemory::AllocateHostStaging(int64_t bytes) {
  Impl& m = *impl_;
  if (bytes < 0) return absl::InvalidArgumentError(absl::StrCat(m.name, ": host staging of ", bytes, " bytes"));
  if (absl::Status status = m.Use(); !status.ok()) return status;
  void* staging = nullptr;
  const cudaError_t error = cudaHostAlloc(&staging, static_cast<size_t>(std::max<int64_t>(bytes, 1)), cudaHostAllocDefault);
  if (error != cudaSuccess) {
    return m.Error(error, absl::StrCat("cudaHostAlloc of ", bytes, " bytes"), absl::StatusCode::kResourceExhausted);
  }
  return staging;
}

void CudaDeviceMemory::FreeHostStaging(void* staging) {
  if (staging != nullptr) cudaFreeHost(staging);
}

absl::StatusOr<backends::StreamId> CudaDeviceMemory::CreateSideStream() {
  Impl& m = *impl_;
  if (absl::Status status = m.Use(); !status.ok()) return status;
  cudaStream_t side = nullptr;
  const cudaError_t error = cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
  if (error != cudaSuccess) return m.Error(error, "cudaStreamCreateWithFlags (a side stream)");
  absl::MutexLock lock(&m.mu);
  m.side_streams.push_back(side);
  return static_cast<backends::StreamId>(m.side_streams.size());
}

void* CudaDeviceMemory::side_stream_handle(backends::StreamId stream) const {
  Impl& m = *impl_;
  absl::MutexLock lock(&m.mu);
  if (stream <= 0 || stream > static_cast<backends::StreamId>(m.side_streams.size())) return nullptr;
  return m.side_streams[static_cast<size_t>(stream - 1)];
}

absl::Status CudaDeviceMemory::RecordEventOn(backends::StreamId stream, backends::DeviceEvent event) {
  auto side = static_cast<cudaStream_t>(side_stream_handle(stream));
  if (side == nullptr) return absl::InvalidArgumentError(absl::StrCat(impl_->name, ": no side stream ", stream));
  return impl_->WithEvent(side, event, "cudaEventRecord (a side stream)",
                          [](cudaEvent_t e, cudaStream_t on) { return cudaEventRecord(e, on); });
}

absl::Status CudaDeviceMemory::StreamWaitEventOn(backends::StreamId stream, backends::DeviceEvent event) {
  auto side = static_cast<cudaStream_t>(side_stream_handle(stream));
  if (side == nullptr) return absl::InvalidArgumentError(absl::StrCat(impl_->name, ": no side stream ", stream));
  return impl_->WithEvent(side, event, "cudaStreamWaitEvent (a side stream)",
                          [](cudaEvent_t e, cudaStream_t on) { return cudaStreamWaitEvent(on, e, 0); });
}

absl::Status CudaDeviceMemory::SynchronizeStream(absl::Time deadline) {
  return impl_->SynchronizeStream(deadline, "stream synchronize");
}

absl::Status CudaDeviceMemory::CopyToHostSync(void* destination, backends::DeviceAddress source, int64_t bytes,
                                              absl::Time deadline) {
  return impl_->HostCopy(destination, Pointer(source), bytes, cudaMemcpyDeviceToHost, deadline, "copy to host");
}

absl::Status CudaDeviceMemory::CopyFromHostSync(backends::DeviceAddress destination, const void* source, int64_t bytes,
                                                absl::Time deadline) {
  return impl_->HostCopy(Pointer(destination), source, bytes, cudaMemcpyHostToDevice, deadline, "copy from host");
}

absl::StatusOr<backends::DeviceEvent> CudaDeviceMemory::CreateIpcEvent() {
  Impl& m = *impl_;
  if (absl::Status status = m.Use(); !status.ok()) return status;
  cudaEvent_t event = nullptr;
  const cudaError_t error = cudaEventCreateWithFlags(&event, cudaEventInterprocess | cudaEventDisableTiming);
  if (error != cudaSuccess) return m.Error(error, "cudaEventCreateWithFlags (interprocess)");
  absl::MutexLock lock(&m.mu);
  const uint64_t id = m.next_event_id++;
  m.events.emplace(id, Impl::Event{event, /*imported=*/false});
  return backends::DeviceEvent{id};
}

absl::StatusOr<backends::IpcEventHandle> CudaDeviceMemory::ExportEvent(backends::DeviceEvent event) {
  Impl& m = *impl_;
  if (absl::Status status = m.Use(); !status.ok()) return status;
  absl::MutexLock lock(&m.mu);
  auto it = m.events.find(event.id);
  if (it == m.events.end() || it->second.imported) {
    return absl::InvalidArgumentError(
        absl::StrCat(m.name, ": export of event ", event.id, ", not an event created here"));
  }
  cudaIpcEventHandle_t cuda_handle;
  const cudaError_t error = cudaIpcGetEventHandle(&cuda_handle, it->second.event);
  if (error != cudaSuccess) return m.Error(error, "cudaIpcGetEventHandle");
  backends::IpcEventHandle handle;
  std::memcpy(handle.bytes.data(), &cuda_handle, backends::kIpcHandleBytes);
  return handle;
}

absl::StatusOr<backends::DeviceEvent> CudaDeviceMemory::ImportEvent(const backends::IpcEventHandle& handle) {
  Impl& m = *impl_;
  if (absl::Status status = m.Use(); !status.ok()) return status;
  cudaIpcEventHandle_t cuda_handle;
  std::memcpy(&cuda_handle, handle.bytes.data(), backends::kIpcHandleBytes);
  cudaEvent_t event = nullptr;
  const cudaError_t error = cudaIpcOpenEventHandle(&event, cuda_handle);
  if (error != cudaSuccess) {
    return m.Error(error, "cudaIpcOpenEventHandle (is the exporting process alive, on this host, another process?)",
                   absl::StatusCode::kUnavailable);
  }
  absl::MutexLock lock(&m.mu);
  const uint64_t id = m.next_event_id++;
  m.events.emplace(id, Impl::Event{event, /*imported=*/true});
  return backends::DeviceEvent{id};
}

absl::Status CudaDeviceMemory::DestroyEvent(backends::DeviceEvent event) {
  Impl& m = *impl_;
  if (absl::Status status = m.Use(); !status.ok()) return status;
  absl::MutexLock lock(&m.mu);
  auto it = m.events.find(event.id);
  if (it == m.events.end()) return absl::InvalidArgumentError(absl::StrCat(m.name, ": no event ", event.id));
  // Work already enqueued on the event still completes (CUDA releases the
  // event afterwards).
  const cudaError_t error = cudaEventDestroy(it->second.event);
  m.events.erase(it);
  return error == cudaSuccess ? absl::OkStatus() : m.Error(error, "cudaEventDestroy");
}

absl::StatusOr<bool> CudaDeviceMemory::QueryEvent(backends::DeviceEvent event) {
  Impl& m = *impl_;
  if (absl::Status status = m.Use(); !status.ok()) return status;
  absl::MutexLock lock(&m.mu);
  absl::StatusOr<cudaEvent_t> found = m.FindEvent(event);
  if (!found.ok()) return found.status();
  const cudaError_t error = cudaEventQuery(*found);
  if (error == cudaSuccess) return true;
  if (error == cudaErrorNotReady) {
    ClearNotReady();
    return false;
  }
  return m.Error(error, "cudaEventQuery");
}

}  // namespace tandem::cuda
