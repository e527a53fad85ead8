#include "ir/dtype.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tandem::ir {

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "f32";
    case DType::kI32: return "i32";
    case DType::kBF16: return "bf16";
    case DType::kF16: return "f16";
  }
  return "?";
}

absl::StatusOr<DType> ParseDType(absl::string_view name) {
  for (DType dtype : {DType::kF32, DType::kI32, DType::kBF16, DType::kF16}) {
    if (name == DTypeName(dtype)) return dtype;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown dtype '", name, "'"));
}

int64_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kF32:
    case DType::kI32: return 4;
    case DType::kBF16:
    case DType::kF16: return 2;
  }
  return 0;
}

int64_t NumElements(const Shape& shape) {
  // A zero extent makes the product empty, whatever the other extents.
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return 0;
  int64_t n = 1;
  for (int64_t extent : shape) n *= extent;
  return n;
}

std::string ShapeToString(const Shape& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

std::string TypeToString(const TensorType& type) {
  return absl::StrCat(DTypeName(type.dtype), ShapeToString(type.shape));
}

}  // namespace tandem::ir
