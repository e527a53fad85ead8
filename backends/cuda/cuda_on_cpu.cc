#include "backends/cuda/cuda_on_cpu.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <memory>
#include <mutex>
#include <semaphore>
#include <string>
#include <thread>
#include <vector>

namespace tandem::cuda_on_cpu {
namespace {

uint64_t Count(dim3 size) { return uint64_t{size.x} * size.y * size.z; }

// A wait at a barrier longer than this is a kernel that deadlocks (a
// barrier some thread never reaches in a way the checks below miss): it
// aborts rather than hang the test.
constexpr auto kBarrierPatience = std::chrono::seconds(60);

struct Warp {
  uint32_t slots[32] = {};
  uint32_t gathered[32][kWarpGatherWords] = {};
  int arrived = 0;
  uint64_t generation = 0;
  int exited = 0;  // lanes that finished the current block
};

// One launch's shared state. Every field is guarded by `mu`.
struct Grid {
  const char* name = "";
  dim3 grid, block;
  int threads = 0;
  std::mutex mu;
  std::condition_variable changed;
  // The block barrier: threads at a __syncthreads, threads done with the
  // block; `generation` counts releases.
  int at_sync = 0;
  int at_exit = 0;
  uint64_t generation = 0;
  std::unique_ptr<Warp[]> warps;
  int num_warps = 0;
  // Whether a thread called __syncthreads or a shuffle. A kernel whose
  // first block did neither has blocks that share nothing (its threads
  // never wait for each other, so no __shared__ value can pass between
  // them): its later blocks run without the barrier at their end, which is
  // most of what a launch costs here. Set when block 0 ends, read after.
  bool synchronizes = false;
  bool independent_blocks = false;
};

thread_local Grid* t_grid = nullptr;
thread_local int t_thread = 0;  // linear index in the block
thread_local cudaError_t t_last_error = cudaSuccess;

std::mutex& LaunchMutex() {
  static std::mutex launches;
  return launches;
}

std::string Where() {
  char text[160];
  std::snprintf(text, sizeof(text), "block (%u,%u,%u), thread (%u,%u,%u)", blockIdx.x, blockIdx.y, blockIdx.z,
                threadIdx.x, threadIdx.y, threadIdx.z);
  return text;
}

[[noreturn]] void AbortLocked(const Grid& grid, const std::string& what) {
  std::fprintf(stderr, "cuda_on_cpu: kernel %s, %s: %s\n", grid.name, Where().c_str(), what.c_str());
  std::fflush(stderr);
  std::abort();
}

// Waits, with `lock` held on grid.mu, until `*generation` moves past
// `seen`; aborts past kBarrierPatience.
void AwaitRelease(Grid& grid, std::unique_lock<std::mutex>& lock, const uint64_t* generation, uint64_t seen,
                  const char* barrier) {
  if (!grid.changed.wait_for(lock, kBarrierPatience, [&] { return *generation != seen; })) {
    AbortLocked(grid, std::string("waited ") + std::to_string(kBarrierPatience.count()) + " s at " + barrier +
                          ": the kernel deadlocks");
  }
}

// Notes, with grid.mu held, that the kernel synchronizes its threads.
void NoteSynchronization(Grid& grid) {
  if (grid.independent_blocks) {
    AbortLocked(grid, "synchronizes threads in a later block of a kernel whose first block did not (not modelled)");
  }
  grid.synchronizes = true;
}

// The block barrier. `exiting`: the thread is done with the block (it
// returned from the kernel), which releases the barrier like an arrival,
// but a barrier where some threads exited and others wait at
// __syncthreads is divergent.
void ArriveAtBlockBarrier(bool exiting) {
  Grid& grid = *t_grid;
  std::unique_lock<std::mutex> lock(grid.mu);
  Warp& warp = grid.warps[static_cast<size_t>(t_thread / warpSize)];
  if (exiting) {
    if (warp.arrived > 0) {
      AbortLocked(grid, "returned while other threads of its warp wait in a warp shuffle (divergent shuffle)");
    }
    ++grid.at_exit;
    ++warp.exited;
  } else {
    NoteSynchronization(grid);
    ++grid.at_sync;
  }
  if (grid.at_sync > 0 && grid.at_exit > 0) {
    AbortLocked(grid, std::to_string(grid.at_sync) + " thread(s) wait at __syncthreads while " +
                          std::to_string(grid.at_exit) + " returned from the kernel (divergent __syncthreads)");
  }
  const uint64_t seen = grid.generation;
  if (grid.at_sync + grid.at_exit == grid.threads) {
    grid.at_sync = 0;
    grid.at_exit = 0;
    if (exiting) {
      for (int w = 0; w < grid.num_warps; ++w) grid.warps[static_cast<size_t>(w)].exited = 0;
      if (blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0) grid.independent_blocks = !grid.synchronizes;
    }
    ++grid.generation;
    grid.changed.notify_all();
    return;
  }
  AwaitRelease(grid, lock, &grid.generation, seen, exiting ? "the end of the block" : "__syncthreads");
}

void ArriveAtWarpBarrier(Grid& grid, std::unique_lock<std::mutex>& lock, Warp& warp, int lanes) {
  const uint64_t seen = warp.generation;
  if (++warp.arrived == lanes) {
    warp.arrived = 0;
    ++warp.generation;
    grid.changed.notify_all();
    return;
  }
  AwaitRelease(grid, lock, &warp.generation, seen, "a warp shuffle");
}

// The host threads that play CUDA threads, kept between launches: a launch
// of N threads runs on the first N (the pool grows to the largest block
// asked for). Creating a block's threads per launch cost more than the
// kernels themselves. Never destroyed: its threads wait for work until the
// process ends.
class ThreadPool {
 public:
  static ThreadPool& Get() {
    static ThreadPool* pool = new ThreadPool;
    return *pool;
  }

  // Runs work(i) on threads i = 0 .. count-1 and returns when all are done.
  // One call at a time (RunGrid holds LaunchMutex).
  void Run(int count, const std::function<void(int)>& work) {
    while (static_cast<int>(workers_.size()) < count) {
      auto worker = std::make_unique<Worker>();
      Worker* raw = worker.get();
      const int index = static_cast<int>(workers_.size());
      std::thread([this, raw, index] { Serve(*raw, index); }).detach();
      workers_.push_back(std::move(worker));
    }
    work_ = &work;
    remaining_.store(count, std::memory_order_relaxed);
    for (int i = 0; i < count; ++i) workers_[static_cast<size_t>(i)]->start.release();
    done_.acquire();
    work_ = nullptr;
  }

 private:
  struct Worker {
    std::binary_semaphore start{0};
  };

  void Serve(Worker& worker, int index) {
    for (;;) {
      worker.start.acquire();
      (*work_)(index);
      if (remaining_.fetch_sub(1, std::memory_order_acq_rel) == 1) done_.release();
    }
  }

  std::vector<std::unique_ptr<Worker>> workers_;
  const std::function<void(int)>* work_ = nullptr;
  std::atomic<int> remaining_{0};
  std::binary_semaphore done_{0};
};

}  // namespace

std::atomic<bool>& SkippedFlag() {
  static std::atomic<bool> skipped{false};
  return skipped;
}

std::atomic<int64_t>& TensorCoreProducts() {
  static std::atomic<int64_t> products{0};
  return products;
}

int64_t TensorCoreProductsSoFar() { return TensorCoreProducts().load(); }
void CountTensorCoreProduct() { TensorCoreProducts().fetch_add(1, std::memory_order_relaxed); }

void SetKernelsSkipped(bool skipped) { SkippedFlag().store(skipped); }
bool KernelsSkipped() { return SkippedFlag().load(std::memory_order_relaxed); }

cudaError_t RunGrid(const char* name, dim3 grid_size, dim3 block_size, size_t shared_bytes,
                    const std::function<void()>& body) {
  if (Count(grid_size) == 0 || Count(block_size) == 0 || Count(block_size) > 1024 || block_size.z > 64 ||
      grid_size.y > 65535 || grid_size.z > 65535) {
    return cudaErrorInvalidConfiguration;
  }
  if (shared_bytes != 0) return cudaErrorInvalidValue;
  if (KernelsSkipped()) return cudaSuccess;
  std::lock_guard<std::mutex> one_launch_at_a_time(LaunchMutex());
  Grid grid;
  grid.name = name;
  grid.grid = grid_size;
  grid.block = block_size;
  grid.threads = static_cast<int>(Count(block_size));
  grid.num_warps = (grid.threads + warpSize - 1) / warpSize;
  grid.warps = std::make_unique<Warp[]>(static_cast<size_t>(grid.num_warps));
  ThreadPool::Get().Run(grid.threads, [&grid, &body](int linear) {
    t_grid = &grid;
    t_thread = linear;
    blockDim = grid.block;
    gridDim = grid.grid;
    threadIdx = {static_cast<unsigned>(linear) % grid.block.x,
                 static_cast<unsigned>(linear) / grid.block.x % grid.block.y,
                 static_cast<unsigned>(linear) / (grid.block.x * grid.block.y)};
    for (unsigned z = 0; z < grid.grid.z; ++z) {
      for (unsigned y = 0; y < grid.grid.y; ++y) {
        for (unsigned x = 0; x < grid.grid.x; ++x) {
          blockIdx = {x, y, z};
          body();
          const bool first = x == 0 && y == 0 && z == 0;
          if (first || !grid.independent_blocks) ArriveAtBlockBarrier(/*exiting=*/true);
        }
      }
    }
    t_grid = nullptr;
  });
  return cudaSuccess;
}

void SyncThreads() {
  if (t_grid == nullptr) Abort("__syncthreads outside a kernel");
  ArriveAtBlockBarrier(/*exiting=*/false);
}

int LaneId() { return t_thread % warpSize; }

int WarpLanes() {
  const int first = t_thread / warpSize * warpSize;
  return std::min(warpSize, t_grid->threads - first);
}

uint32_t WarpExchange(uint32_t mask, uint32_t value, int source_lane, bool in_range) {
  if (t_grid == nullptr) Abort("a warp shuffle outside a kernel");
  Grid& grid = *t_grid;
  const int lanes = WarpLanes();
  const uint32_t full = lanes == warpSize ? 0xffffffffu : (1u << lanes) - 1u;
  std::unique_lock<std::mutex> lock(grid.mu);
  if (mask != full) {
    AbortLocked(grid, "a warp shuffle whose mask does not name every thread of the warp (not modelled)");
  }
  NoteSynchronization(grid);
  Warp& warp = grid.warps[static_cast<size_t>(t_thread / warpSize)];
  if (warp.exited > 0) {
    AbortLocked(grid, "a warp shuffle after a thread of its warp returned (divergent shuffle)");
  }
  const int lane = LaneId();
  warp.slots[lane] = value;
  ArriveAtWarpBarrier(grid, lock, warp, lanes);
  // Out of range (a down/up/xor shuffle past the warp's end): the thread
  // keeps its own value, as on the GPU.
  const uint32_t result = in_range ? warp.slots[source_lane] : value;
  ArriveAtWarpBarrier(grid, lock, warp, lanes);  // nobody overwrites a slot before every lane read it
  return result;
}

void WarpGather(const uint32_t (&mine)[kWarpGatherWords], uint32_t (&all)[32][kWarpGatherWords]) {
  if (t_grid == nullptr) Abort("a warp collective outside a kernel");
  Grid& grid = *t_grid;
  const int lanes = WarpLanes();
  std::unique_lock<std::mutex> lock(grid.mu);
  if (lanes != warpSize) AbortLocked(grid, "a warp collective (wmma) in a warp of fewer than 32 threads");
  NoteSynchronization(grid);
  Warp& warp = grid.warps[static_cast<size_t>(t_thread / warpSize)];
  if (warp.exited > 0) AbortLocked(grid, "a warp collective after a thread of its warp returned (divergent)");
  std::copy(std::begin(mine), std::end(mine), warp.gathered[LaneId()]);
  ArriveAtWarpBarrier(grid, lock, warp, lanes);
  for (int lane = 0; lane < warpSize; ++lane) {
    std::copy(std::begin(warp.gathered[lane]), std::end(warp.gathered[lane]), all[lane]);
  }
  ArriveAtWarpBarrier(grid, lock, warp, lanes);  // nobody overwrites a lane's words before every lane read them
}

namespace {
float WidenBf16(uint32_t word, int half) {
  __nv_bfloat16_raw raw;
  raw.x = static_cast<unsigned short>(half == 0 ? word & 0xffffu : word >> 16);
  return __bfloat162float(__nv_bfloat16(raw));
}
}  // namespace

void WarpMmaM16N8K16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  const uint32_t mine[kWarpGatherWords] = {a[0], a[1], a[2], a[3], b0, b1, 0, 0};
  uint32_t all[32][kWarpGatherWords];
  WarpGather(mine, all);
  if (LaneId() == 0) CountTensorCoreProduct();
  // A[r][k] is in lane 4 (r % 8) + (k % 8) / 2, word r / 8 + 2 (k / 8);
  // B[k][n] in lane 4n + (k % 8) / 2, word 4 + k / 8; half k % 2 of each.
  const auto a_at = [&all](int r, int k) {
    return WidenBf16(all[4 * (r % 8) + (k % 8) / 2][r / 8 + 2 * (k / 8)], k % 2);
  };
  const auto b_at = [&all](int k, int n) { return WidenBf16(all[4 * n + (k % 8) / 2][4 + k / 8], k % 2); };
  const int g = LaneId() / 4, t = LaneId() % 4;
  float result[4];
  for (int i = 0; i < 4; ++i) {
    const int r = g + 8 * (i / 2), n = 2 * t + i % 2;
    float sum = d[i];
    for (int k = 0; k < 16; ++k) sum = std::fma(a_at(r, k), b_at(k, n), sum);
    result[i] = sum;
  }
  std::copy(std::begin(result), std::end(result), d);
}

void WarpLoadMatrices(uint32_t (&r)[4], const void* row, bool transposed) {
  const auto address = reinterpret_cast<uintptr_t>(row);
  if (address % 16 != 0) Abort("an ldmatrix row address not 16-byte aligned");
  const uint32_t mine[kWarpGatherWords] = {static_cast<uint32_t>(address), static_cast<uint32_t>(address >> 32)};
  uint32_t all[32][kWarpGatherWords];
  WarpGather(mine, all);
  // Element c of the row whose address lane `lane` gave.
  const auto element = [&all](int lane, int c) {
    const uintptr_t at = uintptr_t{all[lane][0]} | (uintptr_t{all[lane][1]} << 32);
    uint16_t bits;
    std::memcpy(&bits, reinterpret_cast<const char*>(at) + 2 * c, 2);
    return uint32_t{bits};
  };
  const int g = LaneId() / 4, t = LaneId() % 4;
  for (int i = 0; i < 4; ++i) {
    r[i] = transposed ? element(8 * i + 2 * t, g) | (element(8 * i + 2 * t + 1, g) << 16)
                      : element(8 * i + g, 2 * t) | (element(8 * i + g, 2 * t + 1) << 16);
  }
  // Nobody writes the rows before every lane has read them (the GPU's
  // ldmatrix reads them at once).
  WarpGather(mine, all);
}

void Abort(const char* what) {
  if (t_grid != nullptr) {
    std::lock_guard<std::mutex> lock(t_grid->mu);
    std::fprintf(stderr, "cuda_on_cpu: kernel %s, %s: %s\n", t_grid->name, Where().c_str(), what);
  } else {
    std::fprintf(stderr, "cuda_on_cpu: %s\n", what);
  }
  std::fflush(stderr);
  std::abort();
}

cudaError_t PeekLastError() { return t_last_error; }

cudaError_t TakeLastError() {
  const cudaError_t error = t_last_error;
  t_last_error = cudaSuccess;
  return error;
}

void SetLastError(cudaError_t error) {
  if (error != cudaSuccess) t_last_error = error;
}

}  // namespace tandem::cuda_on_cpu
