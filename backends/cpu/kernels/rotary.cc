// rotary: the rotary position embedding of ir/op.h, over rows of the last
// axis, position t being the row's index along axis rank-2, or the row's
// entry of the positions operand.
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
  const int64_t rows = ir::NumElements(shape) / width;
  const int64_t per_matrix = shape[shape.size() - 2];
  const double theta = node.attributes.GetDouble("theta");
  const float direction = node.attributes.GetInt("inverse") == 0 ? 1.0f : -1.0f;
  std::vector<float> frequencies(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) frequencies[i] = RotaryFrequency(theta, i, width);
  // Given positions (a row each, any value): their angles row by row, the
  // same f32 products as the table's.
  const int32_t* given = nullptr;
  if (operands.size() > 1) {
    if (absl::Status s = ExpectDType(node, operands, 1, ir::DType::kI32); !s.ok()) return s;
    if (operands[1]->num_elements() != rows) return KernelTypeError(node, "needs a position per row");
    given = operands[1]->i32();
    for (int64_t row = 0; row < rows; ++row) {
      if (given[row] < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(OpName(node.op), ": position ", given[row], " of row ", row, " is below 0"));
      }
    }
  }

  // Without: cos and sin of every (position, pair), once: positions x half
  // floats each.
  const int64_t positions = given != nullptr ? 0 : per_matrix;
  std::vector<float> cosines(static_cast<size_t>(positions * half));
  std::vector<float> sines(cosines.size());
  for (int64_t i = 0; i < half; ++i) {
    for (int64_t t = 0; t < positions; ++t) {
      const size_t at = static_cast<size_t>(t * half + i);
      SinCosF32(static_cast<float>(t) * frequencies[i], &sines[at], &cosines[at]);
      sines[at] *= direction;
    }
  }

  absl::StatusOr<ir::HostTensor> allocated = AllocateResult(node);
  if (!allocated.ok()) return allocated.status();
  ir::HostTensor out = *std::move(allocated);
  const float* x = operands[0]->f32();
  float* result = out.f32();
  ParallelFor(rows, RowGrain(width), [&](int64_t begin, int64_t end) {
    std::vector<float> row_cosines(given != nullptr ? static_cast<size_t>(half) : 0);
    std::vector<float> row_sines(row_cosines.size());
    for (int64_t row = begin; row < end; ++row) {
      const float* __restrict in = x + row * width;
      float* __restrict o = result + row * width;
      const float* c = row_cosines.data();
      const float* s = row_sines.data();
      if (given == nullptr) {
        c = cosines.data() + (row % per_matrix) * half;
        s = sines.data() + (row % per_matrix) * half;
      } else {
        for (int64_t i = 0; i < half; ++i) {
          SinCosF32(static_cast<float>(given[row]) * frequencies[i], &row_sines[i], &row_cosines[i]);
          row_sines[i] *= direction;
        }
      }
      for (int64_t i = 0; i < half; ++i) {
        o[i] = in[i] * c[i] - in[i + half] * s[i];
        o[i + half] = in[i + half] * c[i] + in[i] * s[i];
      }
    }
  });
  return out;
}

}  // namespace tandem::cpu::internal
