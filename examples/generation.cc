#include "examples/generation.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "backends/cpu/interpreter.h"
#include "examples/limits.h"

namespace tandem::examples {
namespace {

// A uniform double in [0, 1) from the seed and the draw's index
// (SplitMix64): reproducible, independent of the platform's <random>.
double Uniform(uint64_t seed, uint64_t index) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * (index + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * (1.0 / 9007199254740992.0);
}

// The next id from one position's logits.
int32_t Pick(const float* logits, int64_t vocab, const SamplingOptions& options, uint64_t draw) {
  std::vector<int32_t> order(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  // Most likely first; ties by id, so the choice never depends on the sort.
  auto better = [logits](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  if (options.temperature <= 0.0) return *std::min_element(order.begin(), order.end(), better);
  const int64_t k = options.top_k > 0 ? std::min(options.top_k, vocab) : vocab;
  std::partial_sort(order.begin(), order.begin() + k, order.end(), better);
  const double top = logits[order[0]];
  std::vector<double> weights(static_cast<size_t>(k));
  double total = 0;
  for (int64_t i = 0; i < k; ++i) {
    weights[i] = std::exp((logits[order[i]] - top) / options.temperature);
    total += weights[i];
  }
  double target = Uniform(options.seed, draw) * total;
  for (int64_t i = 0; i < k; ++i) {
    target -= weights[i];
    if (target < 0) return order[i];
  }
  return order[k - 1];
}

}  // namespace

absl::Status CheckSamplingOptions(const SamplingOptions& options) {
  if (options.tokens < 0 || options.tokens > kMaxGeneratedTokens) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokens ", options.tokens, " is outside [0, ", kMaxGeneratedTokens, "]"));
  }
  if (!std::isfinite(options.temperature) || options.temperature < 0 || options.top_k < 0) {
    return absl::InvalidArgumentError("temperature must be a finite number, at least 0, and top-k at least 0");
  }
  return absl::OkStatus();
}

std::function<int32_t(const float* logits, int64_t vocab, int64_t sequence, int64_t draw)> TokenPicker(
    const SamplingOptions& options) {
  return [options](const float* logits, int64_t vocab, int64_t sequence, int64_t draw) {
    // Draws of different sequences never meet: each has kMaxGeneratedTokens.
    return Pick(logits, vocab, options, static_cast<uint64_t>(draw + sequence * kMaxGeneratedTokens));
  };
}

absl::StatusOr<std::vector<int32_t>> Generate(const ir::Graph& forward, const ir::TensorMap& parameters,
                                              const std::vector<int32_t>& prompt, const SamplingOptions& options) {
  if (prompt.empty()) return absl::InvalidArgumentError("generation needs a prompt of at least one token");
  if (absl::Status status = CheckSamplingOptions(options); !status.ok()) return status;
  const std::optional<ir::ValueId> tokens_input = forward.FindInput("tokens");
  if (forward.outputs().size() != 1 || !tokens_input.has_value()) {
    return absl::InvalidArgumentError("the forward graph must read \"tokens\" and output the logits");
  }
  const ir::TensorType tokens_type = forward.type(*tokens_input);
  const ir::TensorType logits_type = forward.type(forward.outputs()[0].value);
  if (tokens_type.shape.size() != 2 || tokens_type.shape[0] != 1 || logits_type.shape.size() != 3) {
    return absl::InvalidArgumentError(absl::StrCat("the forward graph reads tokens ", ir::TypeToString(tokens_type),
                                                   " and gives ", ir::TypeToString(logits_type),
                                                   "; generation needs [1, window] and [1, window, vocab]"));
  }
  const int64_t window = tokens_type.shape[1];
  const int64_t vocab = logits_type.shape[2];
  std::vector<int32_t> text = prompt;
  std::vector<int32_t> generated;
  ir::TensorMap inputs = parameters;
  for (int64_t n = 0; n < options.tokens; ++n) {
    const int64_t used = std::min<int64_t>(window, static_cast<int64_t>(text.size()));
    std::vector<int32_t> context(static_cast<size_t>(window), 0);
    std::copy(text.end() - used, text.end(), context.begin());
    inputs["tokens"] = ir::HostTensor::FromInts({1, window}, context);
    absl::StatusOr<ir::TensorMap> outputs = cpu::RunGraph(forward, inputs);
    if (!outputs.ok()) return outputs.status();
    const ir::HostTensor& logits = outputs->at(forward.outputs()[0].name);
    const int32_t next = Pick(logits.f32() + (used - 1) * vocab, vocab, options, static_cast<uint64_t>(n));
    text.push_back(next);
    generated.push_back(next);
  }
  return generated;
}

}  // namespace tandem::examples
