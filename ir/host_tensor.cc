#include "ir/host_tensor.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <limits>
#include <malloc.h>
#include <map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "ir/limits.h"

namespace tandem::ir {
namespace {

constexpr size_t kAlignment = 64;

// Freed storage kept for reuse (SetStorageCacheBytes), by size.
class StorageCache {
 public:
  static StorageCache& Get() {
    static StorageCache* const cache = new StorageCache;
    return *cache;
  }

  // A kept block of exactly `size` bytes, or null.
  std::byte* Take(size_t size) {
    if (size < static_cast<size_t>(kMinCachedStorageBytes)) return nullptr;
    absl::MutexLock lock(&mu_);
    auto found = blocks_.find(size);
    if (found == blocks_.end()) return nullptr;
    std::byte* block = found->second;
    blocks_.erase(found);
    kept_ -= size;
    return block;
  }

  // Keeps `block` of `size` bytes, or frees it when the cache is full.
  void Give(std::byte* block, size_t size) {
    if (size >= static_cast<size_t>(kMinCachedStorageBytes)) {
      absl::MutexLock lock(&mu_);
      if (kept_ + size <= limit_) {
        blocks_.emplace(size, block);
        kept_ += size;
        return;
      }
    }
    std::free(block);
  }

  void SetLimit(size_t limit) {
    std::vector<std::byte*> freed;
    {
      absl::MutexLock lock(&mu_);
      limit_ = limit;
      // The largest go first: they are the fewest bytes' worth of calls.
      while (kept_ > limit_) {
        auto largest = std::prev(blocks_.end());
        kept_ -= largest->first;
        freed.push_back(largest->second);
        blocks_.erase(largest);
      }
    }
    for (std::byte* block : freed) std::free(block);
  }

  size_t kept() {
    absl::MutexLock lock(&mu_);
    return kept_;
  }

 private:
  absl::Mutex mu_;
  std::multimap<size_t, std::byte*> blocks_ ABSL_GUARDED_BY(mu_);
  size_t kept_ ABSL_GUARDED_BY(mu_) = 0;
  size_t limit_ ABSL_GUARDED_BY(mu_) = 0;
};

// 64-byte aligned storage of `type`, zeroed when asked, or the reason there
// is none.
absl::StatusOr<std::shared_ptr<std::byte[]>> AllocateStorage(const TensorType& type, bool zeroed = true) {
  absl::StatusOr<int64_t> bytes = CheckedNumBytes(type);
  if (!bytes.ok()) return bytes.status();
  size_t size = (static_cast<size_t>(*bytes) + kAlignment - 1) / kAlignment * kAlignment;
  if (size == 0) size = kAlignment;
  std::byte* memory = StorageCache::Get().Take(size);
  if (memory == nullptr) memory = static_cast<std::byte*>(std::aligned_alloc(kAlignment, size));
  if (memory == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot allocate a tensor of ", TypeToString(type), " (",
                                                     *bytes, " bytes): out of memory"));
  }
  if (zeroed) std::memset(memory, 0, size);
  return std::shared_ptr<std::byte[]>(memory, [size](std::byte* p) { StorageCache::Get().Give(p, size); });
}

}  // namespace

void SetStorageCacheBytes(int64_t bytes) {
  bytes = std::max<int64_t>(bytes, 0);
  StorageCache::Get().SetLimit(static_cast<size_t>(bytes));
  // Storage under kMinCachedStorageBytes is malloc's, and glibc trims a
  // heap whose free top passes 128 KiB (its threshold moves up and down with
  // the sizes it sees): a small model's steps then fault in fresh pages for
  // their tensors again and again (`tandem bench step` of the README's main
  // job, 30 steps: 58,000 page faults, 6,400 with the heaps kept, and 5-8%
  // less time). So with the cache on, the heaps keep what is freed
  // (trimmed only past the cache's limit), and storage of the cache's sizes
  // is mmapped, so that giving it back never strands a heap. Off: glibc's
  // starting values, fixed.
  const int trim = bytes > 0 ? static_cast<int>(std::min<int64_t>(bytes, std::numeric_limits<int>::max())) : 128 << 10;
  const int mmap = bytes > 0 ? static_cast<int>(kMinCachedStorageBytes) : 128 << 10;
  mallopt(M_TRIM_THRESHOLD, trim);
  mallopt(M_MMAP_THRESHOLD, mmap);
}

int64_t CachedStorageBytes() { return static_cast<int64_t>(StorageCache::Get().kept()); }

HostTensor::HostTensor(TensorType type) : type_(std::move(type)) {
  absl::StatusOr<std::shared_ptr<std::byte[]>> storage = AllocateStorage(type_);
  if (!storage.ok()) {
    std::fprintf(stderr, "tandem: %s\n", std::string(storage.status().message()).c_str());
    std::abort();
  }
  storage_ = *std::move(storage);
}

absl::StatusOr<HostTensor> HostTensor::Allocate(TensorType type) {
  absl::StatusOr<std::shared_ptr<std::byte[]>> storage = AllocateStorage(type);
  if (!storage.ok()) return storage.status();
  HostTensor tensor;
  tensor.type_ = std::move(type);
  tensor.storage_ = *std::move(storage);
  return tensor;
}

absl::StatusOr<HostTensor> HostTensor::AllocateUninitialized(TensorType type) {
  absl::StatusOr<std::shared_ptr<std::byte[]>> storage = AllocateStorage(type, /*zeroed=*/false);
  if (!storage.ok()) return storage.status();
  HostTensor tensor;
  tensor.type_ = std::move(type);
  tensor.storage_ = *std::move(storage);
  return tensor;
}

HostTensor HostTensor::Borrow(TensorType type, std::shared_ptr<std::byte[]> storage) {
  HostTensor tensor;
  tensor.type_ = std::move(type);
  tensor.storage_ = std::move(storage);
  return tensor;
}

HostTensor HostTensor::FromFloats(Shape shape, absl::Span<const float> values) {
  HostTensor tensor(TensorType{DType::kF32, std::move(shape)});
  if (static_cast<int64_t>(values.size()) != tensor.num_elements()) std::abort();
  // (No copy of nothing: an empty span's data may be null, which memcpy
  // must not be given.)
  if (!values.empty()) std::memcpy(tensor.data(), values.data(), values.size() * sizeof(float));
  return tensor;
}

HostTensor HostTensor::FromInts(Shape shape, absl::Span<const int32_t> values) {
  HostTensor tensor(TensorType{DType::kI32, std::move(shape)});
  if (static_cast<int64_t>(values.size()) != tensor.num_elements()) std::abort();
  if (!values.empty()) std::memcpy(tensor.data(), values.data(), values.size() * sizeof(int32_t));
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
    } else if (tensor.dtype() == DType::kBF16) {
      absl::StrAppend(&text, Bf16ToFloat(tensor.bf16()[i]));
    }
  }
  if (tensor.num_elements() > n) absl::StrAppend(&text, ", ...");
  return text + "}";
}

std::string FormatBytes(int64_t bytes) {
  if (bytes >= (int64_t{1} << 30)) return absl::StrFormat("%.1f GiB", static_cast<double>(bytes) / (1 << 30));
  if (bytes >= (int64_t{1} << 20)) return absl::StrFormat("%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  if (bytes >= 1024) return absl::StrFormat("%.1f KiB", static_cast<double>(bytes) / 1024);
  return absl::StrCat(bytes, " B");
}

std::string SummarizeTensor(const HostTensor& tensor) {
  std::string text = absl::StrFormat("%s (%s)\n", TypeToString(tensor.type()), FormatBytes(tensor.num_bytes()));
  const int64_t n = tensor.num_elements();
  std::vector<double> values;
  if (tensor.dtype() == DType::kF32) {
    for (float v : tensor.floats()) values.push_back(v);
  } else if (tensor.dtype() == DType::kBF16) {
    for (int64_t i = 0; i < n; ++i) values.push_back(Bf16ToFloat(tensor.bf16()[i]));
  } else if (tensor.dtype() == DType::kI32) {
    for (int32_t v : tensor.ints()) values.push_back(v);
  } else {
    return text + "  (no statistics for this dtype)\n";
  }
  int64_t nan = 0, inf = 0;
  double min = std::numeric_limits<double>::infinity(), max = -min, sum = 0, squares = 0;
  for (double v : values) {
    if (std::isnan(v)) {
      ++nan;
    } else if (std::isinf(v)) {
      ++inf;
    } else {
      min = std::min(min, v);
      max = std::max(max, v);
      sum += v;
      squares += v * v;
    }
  }
  if (const int64_t finite = n - nan - inf; finite > 0) {
    absl::StrAppendFormat(&text, "  min %.6g  max %.6g  mean %.6g  norm %.6g\n", min, max,
                          sum / static_cast<double>(finite), std::sqrt(squares));
  }
  absl::StrAppendFormat(&text, "  %s\n",
                        nan + inf == 0 ? "all finite" : absl::StrFormat("NaN: %d  Inf: %d (of %d)", nan, inf, n));
  std::vector<std::string> first;
  for (int64_t i = 0; i < std::min<int64_t>(n, 8); ++i) first.push_back(absl::StrFormat("%.6g", values[i]));
  absl::StrAppendFormat(&text, "  first values: %s%s\n", absl::StrJoin(first, ", "), n > 8 ? ", ..." : "");
  return text;
}

}  // namespace tandem::ir
