#include "ir/initial_state.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace tandem::ir {
namespace {

// SplitMix64 (Steele, Lea & Flood, 2014): a counter-based generator, so the
// k-th number of a stream is a pure function of (seed, k).
uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Uniform in (0, 1), from the top 53 bits.
double UniformOpen(uint64_t seed, uint64_t counter) {
  uint64_t bits = SplitMix64(seed ^ SplitMix64(counter)) >> 11;
  return (static_cast<double>(bits) + 0.5) * 0x1.0p-53;
}

}  // namespace

absl::StatusOr<HostTensor> MakeTensor(const TensorType& type, const Initializer& init) {
  absl::StatusOr<HostTensor> allocated = HostTensor::Allocate(type);
  if (!allocated.ok()) return allocated.status();
  HostTensor tensor = *std::move(allocated);
  const int64_t n = tensor.num_elements();
  float* out = tensor.f32();
  switch (init.kind) {
    case Initializer::Kind::kZeros:
      break;
    case Initializer::Kind::kOnes:
      for (int64_t i = 0; i < n; ++i) out[i] = 1.0f;
      break;
    case Initializer::Kind::kUniform:
      for (int64_t i = 0; i < n; ++i) {
        out[i] = static_cast<float>(init.a + (init.b - init.a) * UniformOpen(init.seed, i));
      }
      break;
    case Initializer::Kind::kNormal:
      // Box-Muller on the pair (2j, 2j+1) of the stream; element 2j takes the
      // cosine branch, 2j+1 the sine branch.
      for (int64_t i = 0; i < n; ++i) {
        uint64_t pair = static_cast<uint64_t>(i / 2);
        double radius = std::sqrt(-2.0 * std::log(UniformOpen(init.seed, 2 * pair)));
        double angle = 2.0 * M_PI * UniformOpen(init.seed, 2 * pair + 1);
        double z = radius * (i % 2 == 0 ? std::cos(angle) : std::sin(angle));
        out[i] = static_cast<float>(init.a + init.b * z);
      }
      break;
  }
  return tensor;
}

absl::StatusOr<TensorMap> InitialState(const TrainStep& step) {
  TensorMap state;
  for (const StateSpec& spec : step.state) {
    absl::StatusOr<HostTensor> value = InitialValue(spec);
    if (!value.ok()) {
      return absl::Status(value.status().code(),
                          absl::StrCat("state '", spec.name, "': ", value.status().message()));
    }
    state[spec.name] = *std::move(value);
  }
  return state;
}

}  // namespace tandem::ir
