#include "ir/limits.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace tandem::ir {

absl::StatusOr<int64_t> CheckedNumElements(const Shape& shape) {
  if (static_cast<int64_t>(shape.size()) > kMaxRank) {
    return absl::InvalidArgumentError(
        absl::StrCat("a shape of rank ", shape.size(), " is more than the ", kMaxRank, " axes a tensor may have"));
  }
  int64_t elements = 1;
  for (int64_t extent : shape) {
    if (extent < 0) {
      return absl::InvalidArgumentError(absl::StrCat("shape ", ShapeToString(shape), " has a negative extent"));
    }
  }
  // The other extents are bounded even where one is zero: strides and loops
  // over a shape multiply them.
  for (int64_t extent : shape) {
    if (extent == 0) continue;
    // elements * extent > kMaxTensorBytes, tested without overflowing.
    if (extent > kMaxTensorBytes / elements) {
      return absl::InvalidArgumentError(absl::StrCat("shape ", ShapeToString(shape), " has more than the ",
                                                     kMaxTensorBytes, " elements a tensor may have"));
    }
    elements *= extent;
  }
  return std::find(shape.begin(), shape.end(), 0) != shape.end() ? 0 : elements;
}

absl::StatusOr<int64_t> CheckedNumBytes(const TensorType& type) {
  absl::StatusOr<int64_t> elements = CheckedNumElements(type.shape);
  if (!elements.ok()) return elements.status();
  const int64_t size = DTypeSize(type.dtype);
  if (*elements > kMaxTensorBytes / size) {
    return absl::InvalidArgumentError(absl::StrCat(TypeToString(type), " has ", *elements, " elements of ", size,
                                                   " bytes, more than the ", kMaxTensorBytes,
                                                   " bytes a tensor may have"));
  }
  return *elements * size;
}

}  // namespace tandem::ir
