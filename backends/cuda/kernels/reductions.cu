// The CUDA backend's reductions and row kernels (cuda_kernels.cuh): sums,
// means and maxima over axes (one or two passes, folded in a fixed order),
// the softmax family over the last axis, layer norm and normalize, and the
// causal mask.

#include "backends/cuda/kernels/common.cuh"

namespace tandem::cuda::kernels {
namespace {

// ---- Reductions: a block folds `outputs_per_block` consecutive outputs,
// kFoldThreads / outputs_per_block threads each. Outputs that lie next to
// each other in the input (a bias gradient: columns summed over rows) take
// 32 per block, so a warp reads 32 neighbours; outputs whose reduced
// elements lie next to each other (a row sum) take one per block, so the
// block reads along the row.

__device__ int64_t ReducedOffset(const ReductionPlan& plan, int64_t r) {
  if (plan.reduced_rank == 1) return r * plan.reduced_strides[0];  // no division (axes are merged where they can be)
  int64_t offset = 0;
  for (int axis = plan.reduced_rank - 1; axis >= 0; --axis) {
    const int64_t extent = plan.reduced_extents[axis];
    offset += (r % extent) * plan.reduced_strides[axis];
    r /= extent;
  }
  return offset;
}

// Output o's fold over its reduced elements [chunk * chunk_length,
// (chunk + 1) * chunk_length) in each of `chunks` chunks, into
// out[o * chunks + chunk] (divided by the mean's count when `mean`, which
// only a single chunk asks for). A work item is one (outputs, chunk) pair.
template <typename Op>
__global__ void ReduceKernel(ElementsIn x, ElementsOut out, ReductionPlan plan, int outputs_per_block,
                             int64_t chunks, int64_t chunk_length, bool mean, Op op) {
  __shared__ float scratch[kFoldThreads];
  const int lane = static_cast<int>(threadIdx.x) % outputs_per_block;
  const int t = static_cast<int>(threadIdx.x) / outputs_per_block;
  const int group = static_cast<int>(blockDim.x) / outputs_per_block;
  int64_t reduced_total = 1;
  for (int axis = 0; axis < plan.reduced_rank; ++axis) reduced_total *= plan.reduced_extents[axis];
  const int64_t output_groups = (plan.num_outputs + outputs_per_block - 1) / outputs_per_block;
  // The loop bound is the same for the whole block, so every thread reaches
  // every __syncthreads.
  for (int64_t item = blockIdx.x; item < output_groups * chunks; item += gridDim.x) {
    const int64_t chunk = item % chunks;
    const int64_t o = (item / chunks) * outputs_per_block + lane;
    const int64_t begin = chunk * chunk_length;
    const int64_t end = begin + chunk_length < reduced_total ? begin + chunk_length : reduced_total;
    float acc = Op::kIdentity;
    if (o < plan.num_outputs) {
      int64_t base;
      OffsetsOf(plan.kept, o, &base);
      acc = FoldStrided(begin + t, end, group, op, [&](int64_t r) { return Load(x, base + ReducedOffset(plan, r)); });
    }
    scratch[threadIdx.x] = acc;
    __syncthreads();
    TreeFold(scratch, lane, t, group, outputs_per_block, op);
    if (t == 0 && o < plan.num_outputs) {
      Store(out, o * chunks + chunk, mean ? scratch[lane] / plan.reduced_count : scratch[lane]);
    }
    __syncthreads();
  }
}

// ---- Rows over the last axis: a block per row (grid-strided over rows),
// blockDim.x threads sharing each of the row's folds.

__global__ void RowsKernel(RowOp op, ElementsIn x, ElementsIn dy, ElementsOut out, int64_t rows, int64_t length) {
  __shared__ float scratch[kFoldThreads];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t base = r * length;
    const auto x_at = [&](int64_t i) { return Load(x, base + i); };
    const auto dy_at = [&](int64_t i) { return Load(dy, base + i); };
    const auto put = [&](int64_t i, float value) { Store(out, base + i, value); };
    switch (op) {
      case RowOp::kSoftmax: {
        const float max = BlockFold(ShareOf(length, MaxOp(), x_at), scratch, MaxOp());
        // Each exp is computed again for the division rather than stored:
        // the same value, and a bf16 result is rounded only once.
        const float sum =
            BlockFold(ShareOf(length, AddOp(), [&](int64_t i) { return expf(x_at(i) - max); }), scratch, AddOp());
        MapShare(length, [&](int64_t i) { return expf(x_at(i) - max) / sum; }, put);
        break;
      }
      case RowOp::kLogSoftmax: {
        const float max = BlockFold(ShareOf(length, MaxOp(), x_at), scratch, MaxOp());
        const float sum =
            BlockFold(ShareOf(length, AddOp(), [&](int64_t i) { return expf(x_at(i) - max); }), scratch, AddOp());
        const float log_sum = logf(sum);
        MapShare(length, [&](int64_t i) { return (x_at(i) - max) - log_sum; }, put);
        break;
      }
      case RowOp::kSoftmaxGrad: {
        // x is y = softmax(.): dx = y * (dy - sum(dy * y)).
        const float dot = BlockFold(ShareOf(length, AddOp(), [&](int64_t i) { return dy_at(i) * x_at(i); }), scratch,
                                    AddOp());
        MapShare(length, [&](int64_t i) { return x_at(i) * (dy_at(i) - dot); }, put);
        break;
      }
      case RowOp::kLogSoftmaxGrad: {
        // x is y = log_softmax(.): dx = dy - exp(y) * sum(dy).
        const float sum = BlockFold(ShareOf(length, AddOp(), dy_at), scratch, AddOp());
        MapShare(length, [&](int64_t i) { return dy_at(i) - expf(x_at(i)) * sum; }, put);
        break;
      }
    }
  }
}

// mean and rstd = 1 / sqrt(var + eps) of a row, var biased.
struct RowMoments {
  float mean;
  float rstd;
};
template <typename At>
__device__ RowMoments MomentsOf(At x_at, int64_t n, float eps, float* scratch) {
  const float count = static_cast<float>(n);
  const float mean = BlockFold(ShareOf(n, AddOp(), x_at), scratch, AddOp()) / count;
  const float squares = BlockFold(ShareOf(n, AddOp(),
                                          [&](int64_t i) {
                                            const float centered = x_at(i) - mean;
                                            return centered * centered;
                                          }),
                                  scratch, AddOp());
  return {mean, 1.0f / sqrtf(squares / count + eps)};
}

__global__ void NormalizationKernel(NormOp op, ElementsIn x, ElementsIn second, ElementsIn beta, ElementsOut out,
                                    int64_t rows, int64_t length, float eps) {
  __shared__ float scratch[kFoldThreads];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t base = r * length;
    const auto x_at = [&](int64_t i) { return Load(x, base + i); };
    const auto put = [&](int64_t i, float value) { Store(out, base + i, value); };
    const RowMoments moments = MomentsOf(x_at, length, eps, scratch);
    switch (op) {
      case NormOp::kNormalize:
        MapShare(length, [&](int64_t i) { return (x_at(i) - moments.mean) * moments.rstd; }, put);
        break;
      case NormOp::kLayerNorm:
        // second is gamma: xhat * gamma rounded, then + beta rounded.
        MapShare(
            length,
            [&](int64_t i) {
              const float xhat = (x_at(i) - moments.mean) * moments.rstd;
              return __fadd_rn(__fmul_rn(xhat, Load(second, i)), Load(beta, i));
            },
            put);
        break;
      case NormOp::kNormalizeGrad: {
        // second is dy: dx = rstd * ((dy - mean(dy)) - xhat * mean(dy * xhat)).
        const auto dy_at = [&](int64_t i) { return Load(second, base + i); };
        const float count = static_cast<float>(length);
        const auto xhat = [&](int64_t i) { return (x_at(i) - moments.mean) * moments.rstd; };
        const float dy_mean = BlockFold(ShareOf(length, AddOp(), dy_at), scratch, AddOp()) / count;
        const float dy_xhat_mean =
            BlockFold(ShareOf(length, AddOp(), [&](int64_t i) { return dy_at(i) * xhat(i); }), scratch, AddOp()) /
            count;
        MapShare(length, [&](int64_t i) { return moments.rstd * ((dy_at(i) - dy_mean) - xhat(i) * dy_xhat_mean); },
                 put);
        break;
      }
    }
  }
}

__global__ void CausalMaskKernel(ElementsIn x, ElementsOut out, int64_t rows, int64_t cols, float fill, int64_t n) {
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) {
    const int64_t column = i % cols;
    const int64_t row = (i / cols) % rows;
    Store(out, i, column <= row ? Load(x, i) : fill);
  }
}

}  // namespace

namespace {
// A reduction whose outputs alone give the GPU too few blocks (a bias
// gradient's 1024 columns are 32 blocks; a loss's sum, one) runs in two
// passes: each output's reduced elements are cut into chunks of equal
// length, each chunk folded by a block of its own, then each output's
// chunk results folded in chunk order. The chunks are as many as bring the
// blocks to kTargetBlocks, but no shorter than leave a block
// kMinBlockElements to fold. Both are constants, so the order depends on
// the shape alone, never on the GPU.
constexpr int64_t kTargetBlocks = 1024;
constexpr int64_t kMinBlockElements = 8192;

int64_t ReducedTotal(const ReductionPlan& plan) {
  int64_t total = 1;
  for (int axis = 0; axis < plan.reduced_rank; ++axis) total *= plan.reduced_extents[axis];
  return total;
}

// The outputs a block folds at once: 32 where neighbouring outputs lie next
// to each other in the input (a warp reads 32 neighbours) or each output's
// elements are too few to share a block, else 1.
int OutputsPerBlock(const ReductionPlan& plan, int64_t reduced) {
  const bool outputs_adjacent = plan.kept.rank > 0 && plan.kept.strides[0][plan.kept.rank - 1] == 1;
  const bool reduced_adjacent = plan.reduced_rank > 0 && plan.reduced_strides[plan.reduced_rank - 1] == 1;
  return (outputs_adjacent && !reduced_adjacent) || reduced < kFoldThreads ? 32 : 1;
}

// The chunks each output's reduction is cut into: 1 for a single pass.
// None is empty: the count is the one the chunks' length needs.
int64_t ReduceChunks(const ReductionPlan& plan) {
  const int64_t total = ReducedTotal(plan);
  const int64_t per_block = OutputsPerBlock(plan, total);
  const int64_t groups = (plan.num_outputs + per_block - 1) / per_block;
  const int64_t shortest = kMinBlockElements / per_block;  // a chunk's fewest elements
  if (groups >= kTargetBlocks || total <= shortest) return 1;
  const int64_t wanted = (kTargetBlocks + groups - 1) / groups;
  const int64_t most = (total + shortest - 1) / shortest;
  const int64_t chunks = wanted < most ? wanted : most;
  const int64_t length = (total + chunks - 1) / chunks;
  return (total + length - 1) / length;
}

int64_t ChunkLength(const ReductionPlan& plan, int64_t chunks) {
  return (ReducedTotal(plan) + chunks - 1) / chunks;
}

template <typename Op>
cudaError_t LaunchReducePass(ElementsIn x, ElementsOut out, const ReductionPlan& plan, int64_t chunks,
                             int64_t chunk_length, bool mean, Op op, cudaStream_t stream) {
  const int outputs_per_block = OutputsPerBlock(plan, chunks > 1 ? chunk_length : ReducedTotal(plan));
  const int64_t blocks = (plan.num_outputs + outputs_per_block - 1) / outputs_per_block * chunks;
  const unsigned grid = static_cast<unsigned>(blocks < kMaxBlocks ? blocks : kMaxBlocks);
  TANDEM_LAUNCH(ReduceKernel, grid, kFoldThreads, 0, stream)(x, out, plan, outputs_per_block, chunks, chunk_length,
                                                           mean, op);
  return cudaGetLastError();
}

template <typename Op>
cudaError_t ReduceInPasses(ElementsIn x, ElementsOut out, const ReductionPlan& plan, bool mean, Op op, void* scratch,
                           cudaStream_t stream) {
  const int64_t chunks = ReduceChunks(plan);
  if (chunks == 1) return LaunchReducePass(x, out, plan, 1, ReducedTotal(plan), mean, op, stream);
  float* partials = static_cast<float*>(scratch);  // [num_outputs, chunks], f32 whatever x and out are
  if (cudaError_t error = LaunchReducePass(x, ElementsOut{partials, false}, plan, chunks, ChunkLength(plan, chunks),
                                           false, op, stream);
      error != cudaSuccess) {
    return error;
  }
  ReductionPlan second;
  second.num_outputs = plan.num_outputs;
  second.kept.rank = 1;
  second.kept.num_operands = 1;
  second.kept.extents[0] = plan.num_outputs;
  second.kept.strides[0][0] = chunks;
  second.reduced_rank = 1;
  second.reduced_extents[0] = chunks;
  second.reduced_strides[0] = 1;
  second.reduced_count = plan.reduced_count;
  return LaunchReducePass(ElementsIn{partials, false}, out, second, 1, chunks, mean, op, stream);
}
}  // namespace

size_t ReduceScratchBytes(const ReductionPlan& plan) {
  const int64_t chunks = ReduceChunks(plan);
  return chunks == 1 ? 0 : static_cast<size_t>(plan.num_outputs * chunks) * sizeof(float);
}

cudaError_t LaunchReduce(ReduceOp op, ElementsIn x, ElementsOut out, const ReductionPlan& plan, void* scratch,
                         cudaStream_t stream) {
  if (plan.num_outputs <= 0) return cudaSuccess;
  if (op == ReduceOp::kMax) return ReduceInPasses(x, out, plan, false, MaxOp(), scratch, stream);
  return ReduceInPasses(x, out, plan, op == ReduceOp::kMean, AddOp(), scratch, stream);
}

cudaError_t LaunchRows(RowOp op, ElementsIn x, ElementsIn dy, ElementsOut out, int64_t rows, int64_t length,
                       cudaStream_t stream) {
  if (length <= 0 || rows <= 0) return cudaSuccess;
  TANDEM_LAUNCH(RowsKernel, RowBlocks(rows), RowThreads(length), 0, stream)(op, x, dy, out, rows, length);
  return cudaGetLastError();
}

cudaError_t LaunchNormalization(NormOp op, ElementsIn x, ElementsIn second, ElementsIn beta, ElementsOut out,
                                int64_t rows, int64_t length, float eps, cudaStream_t stream) {
  if (length <= 0 || rows <= 0) return cudaSuccess;
  TANDEM_LAUNCH(NormalizationKernel, RowBlocks(rows), RowThreads(length), 0, stream)(op, x, second, beta, out, rows, length,
                                                                          eps);
  return cudaGetLastError();
}

cudaError_t LaunchCausalMask(ElementsIn x, ElementsOut out, int64_t matrices, int64_t rows, int64_t cols, float fill,
                             cudaStream_t stream) {
  const int64_t n = matrices * rows * cols;
  return Launch(n, stream, CausalMaskKernel, x, out, rows, cols, fill, n);
}

}  // namespace tandem::cuda::kernels
