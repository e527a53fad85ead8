#include "ir/hash.h"

namespace tandem::ir {

ContentHasher::ContentHasher() { XXH3_64bits_reset(&state_); }

void ContentHasher::Add(absl::string_view bytes) { XXH3_64bits_update(&state_, bytes.data(), bytes.size()); }

void ContentHasher::AddUint64(uint64_t value) {
  char bytes[8];
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>(value >> (8 * i));
  Add(absl::string_view(bytes, sizeof(bytes)));
}

uint64_t ContentHasher::Digest() const { return XXH3_64bits_digest(&state_); }

uint64_t Hash64(absl::string_view bytes, uint64_t seed) {
  return XXH3_64bits_withSeed(bytes.data(), bytes.size(), seed);
}

}  // namespace tandem::ir
