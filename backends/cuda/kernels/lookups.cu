// The CUDA backend's kernels over ids and labels (cuda_kernels.cuh): the
// range check every id and label passes first, cross-entropy and its
// gradient, and the embedding and its gradient, which sorts the ids stably
// and sums each id's rows in position order.
#ifdef __CUDACC__
#include <cub/device/device_radix_sort.cuh>
#else
#include <algorithm>
#include <numeric>
#endif

#include "backends/cuda/kernels/common.cuh"

namespace tandem::cuda::kernels {
namespace {

// ---- Ids and labels.

constexpr int kCheckThreads = 256;  // a power of two: the tree below halves it

// One block: each thread finds the first bad index of its strided share, in
// increasing order, then a fixed tree takes the minimum. The minimum does
// not depend on scheduling, so neither does the answer.
__global__ void FindFirstOutOfRangeKernel(const int32_t* values, int64_t n, int64_t limit,
                                          RangeCheckResult* result) {
  __shared__ int64_t first[kCheckThreads];
  int64_t mine = n;
  for (int64_t i = threadIdx.x; i < n; i += kCheckThreads) {
    const int32_t v = values[i];
    if (v < 0 || v >= limit) {
      mine = i;
      break;
    }
  }
  first[threadIdx.x] = mine;
  __syncthreads();
  for (unsigned half = kCheckThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half && first[threadIdx.x + half] < first[threadIdx.x]) {
      first[threadIdx.x] = first[threadIdx.x + half];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const int64_t position = first[0];
    result->position = position < n ? position : -1;
    result->value = position < n ? values[position] : 0;
    result->unused = 0;
  }
}

// The max of a row and the sum of exp(x - max) over it, folded by the block.
struct RowExpSum {
  float max;
  float sum;
};
__device__ RowExpSum ExpSumOf(const float* x, int64_t n, float* scratch) {
  const float max = BlockFold(ShareOf(n, MaxOp(), [&](int64_t i) { return x[i]; }), scratch, MaxOp());
  const float sum = BlockFold(ShareOf(n, AddOp(), [&](int64_t i) { return expf(x[i] - max); }), scratch, AddOp());
  return {max, sum};
}

// A block per row, as the row kernels.
__global__ void CrossEntropyKernel(const float* logits, const int32_t* labels, float* loss,
                                   int64_t rows, int64_t classes) {
  __shared__ float scratch[kFoldThreads];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* row = logits + r * classes;
    const int32_t label = labels[r];
    const RowExpSum stats = ExpSumOf(row, classes, scratch);
    if (threadIdx.x == 0) {
      loss[r] = (label < 0 || label >= classes) ? NAN : logf(stats.sum) - (row[label] - stats.max);
    }
  }
}

__global__ void CrossEntropyGradKernel(const float* logits, const int32_t* labels, const float* dy,
                                       float* out, int64_t rows, int64_t classes) {
  __shared__ float scratch[kFoldThreads];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* row = logits + r * classes;
    float* grad = out + r * classes;
    const int32_t label = labels[r];
    const RowExpSum stats = ExpSumOf(row, classes, scratch);
    const float scale = dy[r];
    for (int64_t i = threadIdx.x; i < classes; i += blockDim.x) {
      const float probability = expf(row[i] - stats.max) / stats.sum;
      const float target = i == label ? 1.0f : 0.0f;
      grad[i] = (probability - target) * scale;
    }
  }
}

__global__ void EmbeddingKernel(ElementsIn table, const int32_t* ids, ElementsOut out, int64_t num_rows,
                                int64_t width, int64_t n) {
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) {
    const int64_t position = i / width;
    const int64_t column = i % width;
    const int32_t id = ids[position];
    Store(out, i, (id >= 0 && id < num_rows) ? Load(table, id * width + column) : 0.0f);
  }
}

// The embedding gradient from the ids sorted stably (so each id's positions
// stay in position order): a block per run of equal ids sums its dy rows
// in position order, the reference's order, into that id's output row.
// Blocks whose sorted index does not start a run, and runs of out-of-range
// ids, write nothing (the output was zeroed first).
__global__ void EmbeddingGradRunsKernel(const int32_t* sorted_ids, const int32_t* sorted_positions,
                                        ElementsIn dy, ElementsOut out, int64_t positions, int64_t num_rows,
                                        int64_t width) {
  for (int64_t i = blockIdx.x; i < positions; i += gridDim.x) {
    const int32_t id = sorted_ids[i];
    if ((i > 0 && sorted_ids[i - 1] == id) || id < 0 || id >= num_rows) continue;
    for (int64_t column = threadIdx.x; column < width; column += blockDim.x) {
      float acc = 0.0f;
      for (int64_t j = i; j < positions && sorted_ids[j] == id; ++j) {
        acc += Load(dy, static_cast<int64_t>(sorted_positions[j]) * width + column);
      }
      Store(out, static_cast<int64_t>(id) * width + column, acc);
    }
  }
}

__global__ void IotaKernel(int32_t* out, int64_t n) {
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) out[i] = static_cast<int32_t>(i);
}

// Sorts `count` (key, value) pairs by key, stably (equal keys keep their
// order), into sorted_keys and sorted_values; with temp == nullptr, only
// sets temp_bytes to the scratch it needs. A library call, not a kernel:
// CUB's LSD radix sort on the GPU, std::stable_sort on the CPU (the same
// permutation).
cudaError_t SortPairsStably(void* temp, size_t& temp_bytes, const int32_t* keys, int32_t* sorted_keys,
                            const int32_t* values, int32_t* sorted_values, int count, cudaStream_t stream) {
#ifdef __CUDACC__
  return cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys, sorted_keys, values, sorted_values, count, 0, 32,
                                         stream);
#else
  (void)stream;
  if (temp == nullptr) {
    temp_bytes = static_cast<size_t>(count) * sizeof(int32_t);
    return cudaSuccess;
  }
  int32_t* order = static_cast<int32_t*>(temp);
  std::iota(order, order + count, 0);
  std::stable_sort(order, order + count, [keys](int32_t a, int32_t b) { return keys[a] < keys[b]; });
  for (int i = 0; i < count; ++i) {
    sorted_keys[i] = keys[order[i]];
    sorted_values[i] = values[order[i]];
  }
  return cudaSuccess;
#endif
}

// The embedding gradient's scratch: sorted ids, positions, sorted positions,
// then the sort's own, each 256-byte aligned.
struct EmbeddingGradScratch {
  size_t ids_offset = 0, positions_offset = 0, sorted_positions_offset = 0, cub_offset = 0, cub_bytes = 0, total = 0;
};
size_t Aligned(size_t bytes) { return (bytes + 255) / 256 * 256; }
EmbeddingGradScratch EmbeddingGradLayout(int64_t positions) {
  EmbeddingGradScratch layout;
  const size_t ints = Aligned(static_cast<size_t>(positions) * sizeof(int32_t));
  SortPairsStably(nullptr, layout.cub_bytes, nullptr, nullptr, nullptr, nullptr, static_cast<int>(positions), nullptr);
  layout.ids_offset = 0;
  layout.positions_offset = ints;
  layout.sorted_positions_offset = 2 * ints;
  layout.cub_offset = 3 * ints;
  layout.total = 3 * ints + Aligned(layout.cub_bytes);
  return layout;
}

}  // namespace

cudaError_t LaunchFindFirstOutOfRange(const int32_t* values, int64_t n, int64_t limit,
                                      RangeCheckResult* result, cudaStream_t stream) {
  // Launched even for n == 0: the result must be written.
  TANDEM_LAUNCH(FindFirstOutOfRangeKernel, 1, kCheckThreads, 0, stream)(values, n, limit, result);
  return cudaGetLastError();
}

cudaError_t LaunchCrossEntropy(const float* logits, const int32_t* labels, float* loss,
                               int64_t rows, int64_t classes, cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  TANDEM_LAUNCH(CrossEntropyKernel, RowBlocks(rows), RowThreads(classes), 0, stream)(logits, labels, loss, rows, classes);
  return cudaGetLastError();
}

cudaError_t LaunchCrossEntropyGrad(const float* logits, const int32_t* labels, const float* dy,
                                   float* out, int64_t rows, int64_t classes,
                                   cudaStream_t stream) {
  if (classes <= 0 || rows <= 0) return cudaSuccess;
  TANDEM_LAUNCH(CrossEntropyGradKernel, RowBlocks(rows), RowThreads(classes), 0, stream)(logits, labels, dy, out, rows,
                                                                              classes);
  return cudaGetLastError();
}

cudaError_t LaunchEmbedding(ElementsIn table, const int32_t* ids, ElementsOut out, int64_t positions,
                            int64_t num_rows, int64_t width, cudaStream_t stream) {
  const int64_t n = positions * width;
  return Launch(n, stream, EmbeddingKernel, table, ids, out, num_rows, width, n);
}

size_t EmbeddingGradScratchBytes(int64_t positions) { return EmbeddingGradLayout(positions).total; }

cudaError_t LaunchEmbeddingGrad(const int32_t* ids, ElementsIn dy, ElementsOut out, int64_t positions,
                                int64_t num_rows, int64_t width, void* scratch, cudaStream_t stream) {
  const int64_t n = num_rows * width;
  if (n <= 0) return cudaSuccess;
  // Zero bytes are 0.0 in f32 and in bf16 alike.
  const size_t element_size = out.bf16 ? sizeof(__nv_bfloat16) : sizeof(float);
  if (cudaError_t error = cudaMemsetAsync(out.data, 0, static_cast<size_t>(n) * element_size, stream);
      error != cudaSuccess || positions <= 0) {
    return error;
  }
  if (positions > INT32_MAX) return cudaErrorInvalidValue;
  const EmbeddingGradScratch layout = EmbeddingGradLayout(positions);
  auto* base = static_cast<char*>(scratch);
  auto* sorted_ids = reinterpret_cast<int32_t*>(base + layout.ids_offset);
  auto* position_of = reinterpret_cast<int32_t*>(base + layout.positions_offset);
  auto* sorted_positions = reinterpret_cast<int32_t*>(base + layout.sorted_positions_offset);
  if (cudaError_t error = Launch(positions, stream, IotaKernel, position_of, positions); error != cudaSuccess) {
    return error;
  }
  size_t cub_bytes = layout.cub_bytes;
  // Stable: equal ids keep their positions' order.
  if (cudaError_t error = SortPairsStably(base + layout.cub_offset, cub_bytes, ids, sorted_ids, position_of,
                                          sorted_positions, static_cast<int>(positions), stream);
      error != cudaSuccess) {
    return error;
  }
  const int threads = width >= 256 ? 256 : 32;
  TANDEM_LAUNCH(EmbeddingGradRunsKernel, RowBlocks(positions), threads, 0, stream)(sorted_ids, sorted_positions, dy, out,
                                                                       positions, num_rows, width);
  return cudaGetLastError();
}

}  // namespace tandem::cuda::kernels
