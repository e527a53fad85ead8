// Element types and tensor types of IR values.
#ifndef TANDEM_IR_DTYPE_H_
#define TANDEM_IR_DTYPE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tandem::ir {

// Element type. f32 carries activations, parameters and gradients; i32 token
// ids and labels. bf16 and f16 are declared for storage on devices that have
// them; the reference kernels compute in f32 only.
enum class DType : uint8_t { kF32, kI32, kBF16, kF16 };

const char* DTypeName(DType dtype);  // "f32", "i32", "bf16", "f16"
absl::StatusOr<DType> ParseDType(absl::string_view name);
int64_t DTypeSize(DType dtype);  // bytes per element

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
