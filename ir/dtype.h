// Element types and tensor types of IR values.
#ifndef TANDEM_IR_DTYPE_H_
#define TANDEM_IR_DTYPE_H_

#include <bit>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tandem::ir {

// Element type. f32 carries parameters, gradients and activations; bf16
// activations under mixed precision (a model converts its f32 parameters to
// bf16 where it computes with them); i32 token ids and labels. f16 is
// declared for storage only.
enum class DType : uint8_t { kF32, kI32, kBF16, kF16 };

const char* DTypeName(DType dtype);  // "f32", "i32", "bf16", "f16"
absl::StatusOr<DType> ParseDType(absl::string_view name);
int64_t DTypeSize(DType dtype);  // bytes per element

// The floating types arithmetic computes on: f32 and bf16. An op on bf16
// computes as on f32 from its operands' exact f32 values and rounds its
// result to bf16 once (backends/cpu/kernels.h).
inline bool IsComputedFloat(DType dtype) { return dtype == DType::kF32 || dtype == DType::kBF16; }

// bf16 is the upper half of an f32's bits. FloatToBf16 rounds to nearest,
// ties to even, as CUDA's __float2bfloat16_rn does: finite values past
// bf16's largest round to infinity, and a NaN stays a NaN (made quiet, its
// sign kept). Bf16ToFloat is exact.
inline uint16_t FloatToBf16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}
inline float Bf16ToFloat(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

// A static shape: one extent per axis; rank 0 is a scalar.
using Shape = std::vector<int64_t>;

int64_t NumElements(const Shape& shape);
std::string ShapeToString(const Shape& shape);  // "[2,3]"

// The type of an SSA value: element type and static shape.
struct TensorType {
  DType dtype = DType::kF32;
  Shape shape;

  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
  int64_t num_elements() const { return NumElements(shape); }
  int64_t num_bytes() const { return num_elements() * DTypeSize(dtype); }
  friend bool operator==(const TensorType&, const TensorType&) = default;
};

std::string TypeToString(const TensorType& type);  // "f32[2,3]"

}  // namespace tandem::ir

#endif  // TANDEM_IR_DTYPE_H_
