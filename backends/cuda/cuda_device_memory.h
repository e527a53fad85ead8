// CudaDeviceMemory: DeviceMemory (backends/device_memory.h) over the CUDA
// runtime, for actor processes that share one GPU through CUDA IPC.
//
// Mapping: private allocations come from a stream-ordered pool of this
// object's own (cudaMallocFromPoolAsync / cudaFreeAsync on the stream, so
// neither synchronizes the device, and a free waits for the stream's earlier
// work), exportable ones are cudaMalloc/cudaFree (which CUDA IPC needs;
// cudaFree waits for the device, so freeing memory the stream still uses is
// safe);
// ExportMemory/ImportMemory/CloseImported are cudaIpcGetMemHandle (on the
// allocation's base), cudaIpcOpenMemHandle (cudaIpcMemLazyEnablePeerAccess;
// opening a handle twice returns the same address, counted) and
// cudaIpcCloseMemHandle. The main stream is one cudaStreamNonBlocking stream
// (side streams are more of them, destroyed with the object):
// CopyAsync is cudaMemcpyAsync device-to-device, RecordEvent cudaEventRecord,
// StreamWaitEvent cudaStreamWaitEvent. Events are created with
// cudaEventInterprocess | cudaEventDisableTiming and shared with
// cudaIpcGetEventHandle / cudaIpcOpenEventHandle. Host waits poll
// cudaStreamQuery / cudaEventQuery until the deadline (never an unbounded
// cudaStreamSynchronize); the host copies first wait for the stream's
// earlier work (bounded by the deadline), then copy on the stream and wait
// for that copy alone.
//
// Errors: FailedPrecondition from Create without that device (CheckDevice's
// message); ResourceExhausted when cudaMalloc runs out of memory;
// Unavailable when an IPC handle cannot be opened (exporter gone, another
// host); Internal for every other CUDA failure, naming the call and the
// runtime's text. CUDA IPC needs a different process on the same device: a
// handle cannot be opened by the process that exported it.
//
// Plain C++ (no CUDA header). Ownership and threading: owns its stream,
// allocations, imports and events, released by the destructor (after a
// bounded wait for the stream). Every method is thread-safe and makes the
// object's device current on the calling thread first.
#ifndef TANDEM_BACKENDS_CUDA_CUDA_DEVICE_MEMORY_H_
#define TANDEM_BACKENDS_CUDA_CUDA_DEVICE_MEMORY_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "backends/device_memory.h"

namespace tandem::cuda {

class CudaDeviceMemory final : public backends::DeviceMemory {
 public:
  // The memory of CUDA device `device`, with a fresh non-blocking stream.
  static absl::StatusOr<std::unique_ptr<CudaDeviceMemory>> Create(int device);
  CudaDeviceMemory(const CudaDeviceMemory&) = delete;
  CudaDeviceMemory& operator=(const CudaDeviceMemory&) = delete;
  ~CudaDeviceMemory() override;

  std::string name() const override;
  // The CUDA device ordinal.
  int device() const;
  // The stream every operation of this object is ordered on (a
  // cudaStream_t), for the kernels of the device that computes in this
  // memory (CudaGraphRunner): work they enqueue on it is ordered with the
  // copies and events of the data plane.
  void* stream_handle() const;

  absl::StatusOr<backends::DeviceAddress> Allocate(int64_t bytes, backends::Sharing sharing) override;
  absl::Status Free(backends::DeviceAddress base) override;
  int64_t allocated_bytes() const override;
  absl::StatusOr<backends::IpcMemHandle> ExportMemory(backends::DeviceAddress base) override;
  absl::StatusOr<backends::DeviceAddress> ImportMemory(const backends::IpcMemHandle& handle) override;
  absl::Status CloseImported(backends::DeviceAddress address) override;

  absl::Status CopyAsync(backends::DeviceAddress destination, backends::DeviceAddress source, int64_t bytes) override;
  absl::Status RecordEvent(backends::DeviceEvent event) override;
  absl::Status StreamWaitEvent(backends::DeviceEvent event) override;

  absl::StatusOr<backends::StreamId> CreateSideStream() override;
  absl::Status RecordEventOn(backends::StreamId stream, backends::DeviceEvent event) override;
  absl::Status StreamWaitEventOn(backends::StreamId stream, backends::DeviceEvent event) override;
  // Side stream `stream` (a cudaStream_t), for NCCL's calls on it; null for
  // a stream this object did not create.
  void* side_stream_handle(backends::StreamId stream) const;

  absl::Status SynchronizeStream(absl::Time deadline) override;
  absl::Status CopyToHostSync(void* destination, backends::DeviceAddress source, int64_t bytes,
                              absl::Time deadline) override;
  absl::Status CopyFromHostSync(backends::DeviceAddress destination, const void* source, int64_t bytes,
                                absl::Time deadline) override;

  absl::Status CopyToHostAsync(void* destination, backends::DeviceAddress source, int64_t bytes) override;
  absl::Status CopyFromHostAsync(backends::DeviceAddress destination, const void* source, int64_t bytes) override;
  absl::StatusOr<void*> AllocateHostStaging(int64_t bytes) override;
  void FreeHostStaging(void* staging) override;

  absl::StatusOr<backends::DeviceEvent> CreateIpcEvent() override;
  absl::StatusOr<backends::IpcEventHandle> ExportEvent(backends::DeviceEvent event) override;
  absl::StatusOr<backends::DeviceEvent> ImportEvent(const backends::IpcEventHandle& handle) override;
  absl::Status DestroyEvent(backends::DeviceEvent event) override;
  absl::StatusOr<bool> QueryEvent(backends::DeviceEvent event) override;

 private:
  struct Impl;
  explicit CudaDeviceMemory(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem::cuda

#endif  // TANDEM_BACKENDS_CUDA_CUDA_DEVICE_MEMORY_H_
