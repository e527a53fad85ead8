// DeviceMemory: the slice of a GPU runtime that the device data plane
// (ipc_transport.h) needs, as an abstract interface with two
// implementations:
//   - CudaDeviceMemory (backends/cuda/cuda_device_memory.h): the CUDA runtime,
//     CUDA IPC between processes that share a GPU;
//   - FakeDeviceMemory (fake_device_memory.h): host shared memory and a
//     worker thread playing the stream, so the protocol can be tested across
//     real processes on a machine without a GPU.
//
// The model is CUDA's. Device memory is named by a DeviceAddress (a device
// pointer as an integer). Each DeviceMemory has one main stream (and side
// streams for transfers, below): CopyAsync,
// RecordEvent and StreamWaitEvent enqueue work on it and return at once; the
// work runs later, in the order it was enqueued. Events are interprocess
// events (CUDA: cudaEventInterprocess | cudaEventDisableTiming): one process
// creates and exports an event, others import it; any of them may record it
// on its stream, wait for it on its stream, or query it from the host.
// StreamWaitEvent waits for the most recent RecordEvent of that event made
// (by anyone) before the StreamWaitEvent call; an event never recorded counts
// as complete. Memory is shared the same way: the owner exports an
// allocation made exportable (by its base address) once, an importer maps it
// at an address of its own. Other allocations are private: only this
// object's stream and host copies use them, which lets CUDA serve them from
// a stream-ordered pool (cudaMallocFromPoolAsync) instead of cudaMalloc,
// which synchronizes the device.
//
// Lifetimes, as CUDA requires: an importer closes what it imported
// (CloseImported, DestroyEvent) before the exporter frees it (Free,
// DestroyEvent); using an import after the exporter freed it is undefined
// on CUDA. Free, CloseImported and DestroyEvent may be called while the
// stream still has work that uses the object: CUDA's cudaFree waits for the
// device, CudaDeviceMemory::CloseImported for the stream (bounded), CUDA
// releases a destroyed event after its pending work; the fake defers the
// unmap until its stream has passed that work.
//
// Errors: InvalidArgument for an address, event or handle this object does
// not know; ResourceExhausted when memory runs out; DeadlineExceeded for a
// wait that ran out; Unavailable / DataLoss for a handle whose exporter is
// gone; Internal for a runtime failure, with the runtime's words.
//
// Ownership and threading: a DeviceMemory owns its stream, its allocations,
// its events and its imports (all released by its destructor) and must
// outlive every DeviceAllocation made from it. Every method is thread-safe;
// work enqueued from different threads runs in the order the calls were
// made.
#ifndef TANDEM_BACKENDS_DEVICE_MEMORY_H_
#define TANDEM_BACKENDS_DEVICE_MEMORY_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "ir/dtype.h"
#include "ir/host_tensor.h"

namespace tandem::backends {

// A device pointer as an integer; 0 is no address.
using DeviceAddress = uint64_t;

// Whether another process may map an allocation (ExportMemory).
enum class Sharing : uint8_t {
  kPrivate,     // used by this object's stream and host copies only
  kExportable,  // ExportMemory may hand it to another process
};

// A side stream of one DeviceMemory (CreateSideStream); 0 is the main
// stream, which the methods without a stream use.
using StreamId = int32_t;

// An event of one DeviceMemory (created or imported); 0 is no event.
struct DeviceEvent {
  uint64_t id = 0;
  friend bool operator==(const DeviceEvent&, const DeviceEvent&) = default;
};

// 64 opaque bytes that let another process open an allocation (CUDA:
// cudaIpcMemHandle_t) or an event (cudaIpcEventHandle_t). Plain bytes:
// copy them through any channel.
inline constexpr size_t kIpcHandleBytes = 64;
struct IpcMemHandle {
  std::array<std::byte, kIpcHandleBytes> bytes{};
  friend bool operator==(const IpcMemHandle&, const IpcMemHandle&) = default;
};
struct IpcEventHandle {
  std::array<std::byte, kIpcHandleBytes> bytes{};
  friend bool operator==(const IpcEventHandle&, const IpcEventHandle&) = default;
};

class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;

  // "fake" or "cuda:0", for messages.
  virtual std::string name() const = 0;

  // ---- Memory.
  // A new allocation of at least `bytes` (>= 0; 0 still gives a distinct
  // address), 256-byte aligned, contents unspecified.
  virtual absl::StatusOr<DeviceAddress> Allocate(int64_t bytes, Sharing sharing) = 0;
  // Frees an allocation by its base address (see the lifetime rules above).
  virtual absl::Status Free(DeviceAddress base) = 0;
  // A handle another process opens with ImportMemory; `base` must be the
  // base of an exportable allocation of this object (InvalidArgument for a
  // private one).
  virtual absl::StatusOr<IpcMemHandle> ExportMemory(DeviceAddress base) = 0;
  // Maps memory another process (or this one, on the fake) exported; the
  // address is this process's own. Close with CloseImported.
  virtual absl::StatusOr<DeviceAddress> ImportMemory(const IpcMemHandle& handle) = 0;
  virtual absl::Status CloseImported(DeviceAddress address) = 0;
  // Bytes in this object's live allocations, as Allocate was asked for them
  // (imports are another process's memory and do not count). An allocation
  // counts until Free, even while its release waits for the stream.
  virtual int64_t allocated_bytes() const = 0;

  // ---- Stream work, asynchronous: enqueued now, run in order later.
  // Copies `bytes` device-to-device (allocations or imports).
  virtual absl::Status CopyAsync(DeviceAddress destination, DeviceAddress source, int64_t bytes) = 0;
  // Marks the point the stream has reached; `event` completes when the
  // stream gets there.
  virtual absl::Status RecordEvent(DeviceEvent event) = 0;
  // Later work on the stream waits until the most recent record of `event`
  // (at the time of this call) completes. The host does not wait.
  virtual absl::Status StreamWaitEvent(DeviceEvent event) = 0;

  // ---- Side streams: further streams of this device for transfers that
  // must neither wait behind the main stream's work nor hold it up (NCCL's
  // sends and receives, actor/nccl_transport.h). Work on a side stream runs
  // in its own order, concurrently with the other streams'; events order
  // them (record on one, wait on another; the rule of the most recent
  // record holds across streams). Memory that side-stream work uses must
  // stay allocated until an event recorded after that work has completed:
  // a private allocation's free is ordered with the main stream only.
  // A new side stream, alive as long as this object.
  virtual absl::StatusOr<StreamId> CreateSideStream() = 0;
  // RecordEvent and StreamWaitEvent on side stream `stream`
  // (InvalidArgument for a stream this object did not create).
  virtual absl::Status RecordEventOn(StreamId stream, DeviceEvent event) = 0;
  virtual absl::Status StreamWaitEventOn(StreamId stream, DeviceEvent event) = 0;

  // ---- Host waits, each bounded by `deadline` (DeadlineExceeded).
  // Waits until all work enqueued so far has run.
  virtual absl::Status SynchronizeStream(absl::Time deadline) = 0;
  // Stream-ordered copies between the host and the device: wait for the
  // stream's earlier work, copy, and return when the copy is done.
  virtual absl::Status CopyToHostSync(void* destination, DeviceAddress source, int64_t bytes,
                                      absl::Time deadline) = 0;
  virtual absl::Status CopyFromHostSync(DeviceAddress destination, const void* source, int64_t bytes,
                                        absl::Time deadline) = 0;

  // ---- Asynchronous copies between the host and the device (a step's
  // inputs in, the results it emits out).
  // Enqueues a copy of `bytes` from the device into host memory
  // `destination`, which must stay valid and unread until the stream has run
  // it (a later SynchronizeStream, or an event recorded after it). The host
  // does not wait; on CUDA only if `destination` is host staging (below).
  virtual absl::Status CopyToHostAsync(void* destination, DeviceAddress source, int64_t bytes) = 0;
  // Enqueues a copy of `bytes` from host memory `source` to the device;
  // `source` must stay valid and unwritten until the stream has run it. The
  // host does not wait; on CUDA only if `source` is host staging.
  virtual absl::Status CopyFromHostAsync(DeviceAddress destination, const void* source, int64_t bytes) = 0;
  // Host memory for those copies (CUDA: pinned, cudaHostAlloc), 256-byte
  // aligned, and its release (after the copies through it have run).
  virtual absl::StatusOr<void*> AllocateHostStaging(int64_t bytes) = 0;
  virtual void FreeHostStaging(void* staging) = 0;

  // ---- Interprocess events.
  virtual absl::StatusOr<DeviceEvent> CreateIpcEvent() = 0;
  // `event` must have been created (not imported) by this object.
  virtual absl::StatusOr<IpcEventHandle> ExportEvent(DeviceEvent event) = 0;
  virtual absl::StatusOr<DeviceEvent> ImportEvent(const IpcEventHandle& handle) = 0;
  // Releases a created or imported event (pending stream work on it still
  // completes).
  virtual absl::Status DestroyEvent(DeviceEvent event) = 0;
  // True when the most recent record of `event` has completed (or it was
  // never recorded). Never waits.
  virtual absl::StatusOr<bool> QueryEvent(DeviceEvent event) = 0;
};

// One allocation, freed (DeviceMemory::Free) when the last owner lets go.
// Immutable; the DeviceMemory must outlive it.
class DeviceAllocation {
 public:
  // A private allocation (tensors are never exported; rings are).
  static absl::StatusOr<std::shared_ptr<DeviceAllocation>> Allocate(DeviceMemory& memory, int64_t bytes) {
    absl::StatusOr<DeviceAddress> address = memory.Allocate(bytes, Sharing::kPrivate);
    if (!address.ok()) return address.status();
    return std::shared_ptr<DeviceAllocation>(new DeviceAllocation(memory, *address, bytes));
  }
  DeviceAllocation(const DeviceAllocation&) = delete;
  DeviceAllocation& operator=(const DeviceAllocation&) = delete;
  // A failing Free here would be a bug elsewhere (a double free); there is no
  // caller to report it to.
  ~DeviceAllocation() { memory_.Free(address_).IgnoreError(); }

  DeviceMemory& memory() const { return memory_; }
  DeviceAddress address() const { return address_; }
  int64_t bytes() const { return bytes_; }

 private:
  DeviceAllocation(DeviceMemory& memory, DeviceAddress address, int64_t bytes)
      : memory_(memory), address_(address), bytes_(bytes) {}
  DeviceMemory& memory_;
  const DeviceAddress address_;
  const int64_t bytes_;
};

// A tensor in device memory: the device counterpart of ir::HostTensor.
// Copies share storage; as with host tensors, storage that has been handed
// to someone else (sent, stored) is not written again. Its bytes are valid
// in the order of the owning DeviceMemory's stream: work enqueued after the
// work that produced them sees them.
struct DeviceTensor {
  ir::TensorType type;
  std::shared_ptr<const DeviceAllocation> storage;

  bool defined() const { return storage != nullptr; }
  int64_t num_bytes() const { return type.num_bytes(); }
  DeviceAddress address() const { return storage == nullptr ? 0 : storage->address(); }
};

// A tensor of `type` in a fresh allocation (contents unspecified).
inline absl::StatusOr<DeviceTensor> AllocateDeviceTensor(DeviceMemory& memory, ir::TensorType type) {
  const int64_t bytes = type.num_bytes();
  absl::StatusOr<std::shared_ptr<DeviceAllocation>> storage = DeviceAllocation::Allocate(memory, bytes);
  if (!storage.ok()) return storage.status();
  return DeviceTensor{std::move(type), *std::move(storage)};
}

// Uploads `tensor` (stream-ordered, waits for the copy until `deadline`).
inline absl::StatusOr<DeviceTensor> CopyToDevice(DeviceMemory& memory, const ir::HostTensor& tensor,
                                                 absl::Time deadline) {
  absl::StatusOr<DeviceTensor> device = AllocateDeviceTensor(memory, tensor.type());
  if (!device.ok()) return device.status();
  if (absl::Status status = memory.CopyFromHostSync(device->address(), tensor.data(), tensor.num_bytes(), deadline);
      !status.ok()) {
    return status;
  }
  return device;
}

// Downloads `tensor` once the stream's earlier work is done (at most until
// `deadline`).
inline absl::StatusOr<ir::HostTensor> CopyToHost(DeviceMemory& memory, const DeviceTensor& tensor,
                                                 absl::Time deadline) {
  ir::HostTensor host(tensor.type);
  if (absl::Status status = memory.CopyToHostSync(host.data(), tensor.address(), tensor.num_bytes(), deadline);
      !status.ok()) {
    return status;
  }
  return host;
}

}  // namespace tandem::backends

#endif  // TANDEM_BACKENDS_DEVICE_MEMORY_H_
