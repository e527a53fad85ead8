// The CUDA backend's rotary embedding (cuda_kernels.cuh, ir/op.h kRotary).

#include "backends/cuda/kernels/common.cuh"

namespace tandem::cuda::kernels {

// One thread per (row, pair): rows are positions of `positions`-row
// matrices, or have their own in `given` (one per row, at least 0).
__global__ void RotaryKernel(ElementsIn x, const int32_t* given, ElementsOut out, int64_t positions, int64_t half,
                             double theta, float direction, int64_t pairs) {
  for (int64_t p = FirstIndex(); p < pairs; p += GridStride()) {
    const int64_t row = p / half;
    const int64_t i = p - row * half;
    const int64_t t = given != nullptr ? given[row] : row % positions;
    const float frequency = static_cast<float>(pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(2 * half)));
    const double angle = static_cast<double>(static_cast<float>(t) * frequency);
    const float c = static_cast<float>(cos(angle));
    const float s = direction * static_cast<float>(sin(angle));
    const int64_t base = row * 2 * half;
    const float a = Load(x, base + i);
    const float b = Load(x, base + i + half);
    Store(out, base + i, a * c - b * s);
    Store(out, base + i + half, b * c + a * s);
  }
}

cudaError_t LaunchRotary(ElementsIn x, const int32_t* given, ElementsOut out, int64_t matrices, int64_t positions,
                         int64_t width, double theta, bool inverse, cudaStream_t stream) {
  const int64_t half = width / 2;
  const int64_t pairs = matrices * positions * half;
  if (pairs <= 0) return cudaSuccess;
  return Launch(pairs, stream, RotaryKernel, x, given, out, positions, half, theta, inverse ? -1.0f : 1.0f, pairs);
}

}  // namespace tandem::cuda::kernels
