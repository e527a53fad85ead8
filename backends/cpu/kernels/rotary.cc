// rotary: the rotary position embedding of ir/op.h, over rows of the last
// axis, position t being the row's index along axis rank-2.
//
// The angles follow the computation PyTorch models use: the inverse
// frequency w_i = theta^(-2i/D) rounded to f32, the angle t * w_i as an f32
// product, and its cosine and sine rounded to f32 from double precision
// (kernels/float_math.h, SinCosF32).
#include <cmath>
#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/cpu/kernels/float_math.h"
#include "backends/cpu/kernels/kernel_support.h"
#include "backends/cpu/kernels/parallel.h"

namespace tandem::cpu::internal {

absl::StatusOr<ir::HostTensor> EvaluateRotary(const ir::Node& node, Operands operands) {
  if (absl::Status s = ExpectDType(node, operands, 0, ir::DType::kF32); !s.ok()) return s;
  if (absl::Status s = ExpectShape(node, operands, 0, node.type.shape); !s.ok()) return s;
  if (absl::Status s = ExpectResultDType(node, ir::DType::kF32); !s.ok()) return s;
  const ir::Shape& shape = node.type.shape;
  if (shape.size() < 2 || shape.back() % 2 != 0) return KernelTypeError(node, "needs rank >= 2 and an even last axis");
  const int64_t width = shape.back();
  const int64_t half = width / 2;
  const int64_t positions = shape[shape.size() - 2];
  const double theta = node.attributes.GetDouble("theta");
  const float direction = node.attributes.GetInt("inverse") == 0 ? 1.0f : -1.0f;

  // cos and sin of every (position, pair), once: positions x half floats each.
  std::vector<float> cosines(static_cast<size_t>(positions * half));
  std::vector<float> sines(cosines.size());
  for (int64_t i = 0; i < half; ++i) {
    const float frequency = RotaryFrequency(theta, i, width);
    for (int64_t t = 0; t < positions; ++t) {
      const size_t at = static_cast<size_t>(t * half + i);
      SinCosF32(static_cast<float>(t) * frequency, &sines[at], &cosines[at]);
      sines[at] *= direction;
    }
  }

  absl::StatusOr<ir::HostTensor> allocated = AllocateResult(node);
  if (!allocated.ok()) return allocated.status();
  ir::HostTensor out = *std::move(allocated);
  const float* x = operands[0]->f32();
  float* result = out.f32();
  const int64_t rows = ir::NumElements(shape) / width;
  ParallelFor(rows, RowGrain(width), [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const float* __restrict in = x + row * width;
      float* __restrict o = result + row * width;
      const float* __restrict c = cosines.data() + (row % positions) * half;
      const float* __restrict s = sines.data() + (row % positions) * half;
      for (int64_t i = 0; i < half; ++i) {
        o[i] = in[i] * c[i] - in[i + half] * s[i];
        o[i + half] = in[i + half] * c[i] + in[i] * s[i];
      }
    }
  });
  return out;
}

}  // namespace tandem::cpu::internal
