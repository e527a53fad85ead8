// A tensor in host memory: a TensorType and 64-byte aligned storage.
//
// Copies share storage (a reshape is free); a kernel always writes into a
// tensor it created, so shared storage is never written. Not synchronized:
// a tensor may be read from several threads once no one writes it.
#ifndef TANDEM_IR_HOST_TENSOR_H_
#define TANDEM_IR_HOST_TENSOR_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "ir/dtype.h"

namespace tandem::ir {

class HostTensor {
 public:
  HostTensor() = default;
  // A zero-filled tensor of `type`, for sizes the caller has bounded (tests,
  // small fixed shapes): when the memory cannot be had it prints what it was
  // allocating and aborts. Where a size comes from a user, a file or the
  // wire, use Allocate().
  explicit HostTensor(TensorType type);

  // A zero-filled tensor of `type`. InvalidArgument for a shape that
  // ir/limits.h refuses (a negative extent, a product over kMaxTensorBytes);
  // ResourceExhausted naming the type and bytes when the memory cannot be
  // had.
  static absl::StatusOr<HostTensor> Allocate(TensorType type);
  // The same, its elements left as the memory had them: for a kernel that
  // writes every element before anything reads one (zeroing a large result
  // first costs as much as a pass over it).
  static absl::StatusOr<HostTensor> AllocateUninitialized(TensorType type);

  static HostTensor FromFloats(Shape shape, absl::Span<const float> values);
  static HostTensor FromInts(Shape shape, absl::Span<const int32_t> values);
  static HostTensor Scalar(float value) { return FromFloats({}, {value}); }
  // A tensor over storage someone else allocated (e.g. shared memory a
  // transport received into): `storage` must hold type.num_bytes() bytes,
  // 64-byte aligned; its deleter runs when the last copy of the tensor dies.
  static HostTensor Borrow(TensorType type, std::shared_ptr<std::byte[]> storage);

  const TensorType& type() const { return type_; }
  const Shape& shape() const { return type_.shape; }
  DType dtype() const { return type_.dtype; }
  int64_t num_elements() const { return type_.num_elements(); }
  int64_t num_bytes() const { return type_.num_bytes(); }
  bool defined() const { return storage_ != nullptr; }

  std::byte* data() { return storage_.get(); }
  const std::byte* data() const { return storage_.get(); }
  float* f32() { return reinterpret_cast<float*>(data()); }
  const float* f32() const { return reinterpret_cast<const float*>(data()); }
  uint16_t* bf16() { return reinterpret_cast<uint16_t*>(data()); }  // bits (ir/dtype.h)
  const uint16_t* bf16() const { return reinterpret_cast<const uint16_t*>(data()); }
  int32_t* i32() { return reinterpret_cast<int32_t*>(data()); }
  const int32_t* i32() const { return reinterpret_cast<const int32_t*>(data()); }
  absl::Span<const float> floats() const { return {f32(), static_cast<size_t>(num_elements())}; }
  absl::Span<const int32_t> ints() const { return {i32(), static_cast<size_t>(num_elements())}; }

  // The same elements under another shape of equal size; shares storage.
  HostTensor Reshaped(Shape shape) const;

  // Same type and the same bytes.
  bool BitwiseEquals(const HostTensor& other) const;

 private:
  TensorType type_;
  std::shared_ptr<std::byte[]> storage_;
};

// Keeps the storage of freed tensors of at least kMinCachedStorageBytes,
// up to `bytes` in all, for tensors of the same size to reuse (0, the
// default: none kept). A training step frees and allocates the same large
// tensors every step; without it each allocation is fresh memory from the
// kernel, whose every page faults in on first touch (a third of a GPT-2
// small step on the reference went there). Memory the process holds grows
// by up to `bytes`: processes that compute (actors, the reference) turn it
// on, the controller does not. Thread-safe; lowering it frees what is over.
void SetStorageCacheBytes(int64_t bytes);
inline constexpr int64_t kMinCachedStorageBytes = int64_t{1} << 20;
// What a computing process keeps: a GPT-2 small step's largest temporaries
// (its Adam update's, 500 MB each) several times over.
inline constexpr int64_t kComputeStorageCacheBytes = int64_t{2} << 30;
// The bytes kept now, for tests and reports.
int64_t CachedStorageBytes();

// "512 B", "64.0 KiB", "2.4 MiB".
std::string FormatBytes(int64_t bytes);

// A debugger's look at a tensor, over lines: "f32[8,32,64] (64.0 KiB)", then
// min/max/mean/L2 norm of the finite elements, "all finite" or the NaN and
// Inf counts, and the first 8 values.
std::string SummarizeTensor(const HostTensor& tensor);

// A short description for messages: "f32[2,3] {0.1, 0.2, ...}".
std::string DescribeTensor(const HostTensor& tensor, int max_values = 6);

// Tensors by name: a graph's inputs or outputs, a model's state.
using TensorMap = std::map<std::string, HostTensor>;

}  // namespace tandem::ir

#endif  // TANDEM_IR_HOST_TENSOR_H_
