#include "ir/host_tensor.h"

#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace tandem::ir {
namespace {

constexpr size_t kAlignment = 64;

std::shared_ptr<std::byte[]> Allocate(int64_t bytes) {
  size_t size = (static_cast<size_t>(bytes) + kAlignment - 1) / kAlignment * kAlignment;
  if (size == 0) size = kAlignment;
  auto* memory = static_cast<std::byte*>(std::aligned_alloc(kAlignment, size));
  if (memory == nullptr) std::abort();
  std::memset(memory, 0, size);
  return std::shared_ptr<std::byte[]>(memory, [](std::byte* p) { std::free(p); });
}

}  // namespace

HostTensor::HostTensor(TensorType type) : type_(std::move(type)), storage_(Allocate(type_.num_bytes())) {}

HostTensor HostTensor::Borrow(TensorType type, std::shared_ptr<std::byte[]> storage) {
  HostTensor tensor;
  tensor.type_ = std::move(type);
  tensor.storage_ = std::move(storage);
  return tensor;
}

HostTensor HostTensor::FromFloats(Shape shape, absl::Span<const float> values) {
  HostTensor tensor(TensorType{DType::kF32, std::move(shape)});
  if (static_cast<int64_t>(values.size()) != tensor.num_elements()) std::abort();
  std::memcpy(tensor.data(), values.data(), values.size() * sizeof(float));
  return tensor;
}

HostTensor HostTensor::FromInts(Shape shape, absl::Span<const int32_t> values) {
  HostTensor tensor(TensorType{DType::kI32, std::move(shape)});
  if (static_cast<int64_t>(values.size()) != tensor.num_elements()) std::abort();
  std::memcpy(tensor.data(), values.data(), values.size() * sizeof(int32_t));
  return tensor;
}

HostTensor HostTensor::Reshaped(Shape shape) const {
  HostTensor view = *this;
  view.type_.shape = std::move(shape);
  if (view.num_elements() != num_elements()) std::abort();
  return view;
}

bool HostTensor::BitwiseEquals(const HostTensor& other) const {
  if (type_ != other.type_) return false;
  if (data() == other.data()) return true;
  return std::memcmp(data(), other.data(), static_cast<size_t>(num_bytes())) == 0;
}

std::string DescribeTensor(const HostTensor& tensor, int max_values) {
  std::string text = absl::StrCat(TypeToString(tensor.type()), " {");
  int64_t n = std::min<int64_t>(tensor.num_elements(), max_values);
  for (int64_t i = 0; i < n; ++i) {
    if (i) absl::StrAppend(&text, ", ");
    if (tensor.dtype() == DType::kI32) {
      absl::StrAppend(&text, tensor.i32()[i]);
    } else if (tensor.dtype() == DType::kF32) {
      absl::StrAppend(&text, tensor.f32()[i]);
    }
  }
  if (tensor.num_elements() > n) absl::StrAppend(&text, ", ...");
  return text + "}";
}

}  // namespace tandem::ir
