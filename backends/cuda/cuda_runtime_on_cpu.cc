// The CUDA runtime's functions that the CUDA backend calls, on host memory,
// for the backend built on CUDA's execution model (cuda_on_cpu.h): device
// 0 is this process, "device" memory is host memory, every stream is the
// calling thread (work runs when it is enqueued, so a stream is always
// idle), an event records when it was recorded. Interprocess handles are
// refused (cudaErrorNotSupported): actors sharing a GPU are not modelled.
//
// These are the runtime's own declarations (cuda_runtime_api.h, C linkage):
// a program links this or libcudart, never both.
#include <cuda_runtime_api.h>

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <new>

#include "backends/cuda/cuda_on_cpu.h"

namespace {

using tandem::cuda_on_cpu::SetLastError;

// The alignment cudaMalloc guarantees.
constexpr size_t kAlignment = 256;

cudaError_t Result(cudaError_t error) {
  SetLastError(error);
  return error;
}

}  // namespace

// Streams, pools and events are tokens the caller only passes back.
struct CUstream_st {};
struct CUmemPoolHandle_st {};
struct CUevent_st {
  std::chrono::steady_clock::time_point recorded;
};

extern "C" {

cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorInvalidValue:
      return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
      return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration:
      return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice:
      return "cudaErrorInvalidDevice";
    case cudaErrorNotSupported:
      return "cudaErrorNotSupported";
    case cudaErrorNotReady:
      return "cudaErrorNotReady";
    default:
      return "cudaError (on the CPU)";
  }
}

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    case cudaErrorInvalidConfiguration:
      return "invalid configuration argument";
    case cudaErrorInvalidDevice:
      return "invalid device ordinal";
    case cudaErrorNotSupported:
      return "operation not supported on the CPU's model of CUDA";
    default:
      return "error on the CPU's model of CUDA";
  }
}

cudaError_t cudaGetLastError(void) { return tandem::cuda_on_cpu::TakeLastError(); }
cudaError_t cudaPeekAtLastError(void) { return tandem::cuda_on_cpu::PeekLastError(); }

cudaError_t cudaSetDevice(int device) { return Result(device == 0 ? cudaSuccess : cudaErrorInvalidDevice); }

// Device 0 is this process: named so, with no compute capability and none
// of the attributes a peak rate follows from (they read as not supported).
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp* properties, int device) {
  if (device != 0) return Result(cudaErrorInvalidDevice);
  *properties = cudaDeviceProp{};
  std::strncpy(properties->name, "CUDA on the CPU", sizeof(properties->name) - 1);
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, enum cudaDeviceAttr, int device) {
  if (device != 0) return Result(cudaErrorInvalidDevice);
  *value = 0;
  return Result(cudaErrorNotSupported);
}

cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  const long pages = sysconf(_SC_AVPHYS_PAGES), all = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
  *free = static_cast<size_t>(pages) * static_cast<size_t>(size);
  *total = static_cast<size_t>(all) * static_cast<size_t>(size);
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** pointer, size_t size) {
  *pointer = ::operator new(size == 0 ? 1 : size, std::align_val_t(kAlignment), std::nothrow);
  return Result(*pointer == nullptr ? cudaErrorMemoryAllocation : cudaSuccess);
}

cudaError_t cudaFree(void* pointer) {
  if (pointer != nullptr) ::operator delete(pointer, std::align_val_t(kAlignment));
  return cudaSuccess;
}

cudaError_t cudaHostAlloc(void** pointer, size_t size, unsigned int) { return cudaMalloc(pointer, size); }
cudaError_t cudaFreeHost(void* pointer) { return cudaFree(pointer); }

cudaError_t cudaMallocFromPoolAsync(void** pointer, size_t size, cudaMemPool_t, cudaStream_t) {
  return cudaMalloc(pointer, size);
}

cudaError_t cudaFreeAsync(void* pointer, cudaStream_t) { return cudaFree(pointer); }

cudaError_t cudaMemPoolCreate(cudaMemPool_t* pool, const struct cudaMemPoolProps*) {
  *pool = new CUmemPoolHandle_st;
  return cudaSuccess;
}

cudaError_t cudaMemPoolDestroy(cudaMemPool_t pool) {
  delete pool;
  return cudaSuccess;
}

cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t, enum cudaMemPoolAttr, void*) { return cudaSuccess; }

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int) {
  *stream = new CUstream_st;
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  delete stream;
  return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned int) { return cudaSuccess; }

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  *event = new CUevent_st;
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int) { return cudaEventCreate(event); }

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete event;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t) {
  event->recorded = std::chrono::steady_clock::now();
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  *ms = std::chrono::duration<float, std::milli>(end->recorded - start->recorded).count();
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* destination, const void* source, size_t count, enum cudaMemcpyKind, cudaStream_t) {
  if (count > 0) std::memmove(destination, source, count);
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* pointer, int value, size_t count, cudaStream_t) {
  if (count > 0) std::memset(pointer, value, count);
  return cudaSuccess;
}

cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t*, void*) { return Result(cudaErrorNotSupported); }
cudaError_t cudaIpcOpenMemHandle(void**, cudaIpcMemHandle_t, unsigned int) { return Result(cudaErrorNotSupported); }
cudaError_t cudaIpcCloseMemHandle(void*) { return Result(cudaErrorNotSupported); }
cudaError_t cudaIpcGetEventHandle(cudaIpcEventHandle_t*, cudaEvent_t) { return Result(cudaErrorNotSupported); }
cudaError_t cudaIpcOpenEventHandle(cudaEvent_t*, cudaIpcEventHandle_t) { return Result(cudaErrorNotSupported); }

}  // extern "C"
