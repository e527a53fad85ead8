// Content hashes: XXH3 64-bit from libxxhash.
//
// XXH3's output is fixed by its specification, whatever the machine's
// endianness or the SIMD path taken, so a hash is the same on every machine
// and run: what an actor caches a program under and what seeds a parameter's
// initializer. Not for security (anyone can make collisions on purpose).
#ifndef TANDEM_IR_HASH_H_
#define TANDEM_IR_HASH_H_

#include <cstdint>

#include "absl/strings/string_view.h"

// The definition of XXH3_state_t, so that a hasher holds its state by value.
#ifndef XXH_STATIC_LINKING_ONLY
#define XXH_STATIC_LINKING_ONLY
#endif
#include <xxhash.h>

namespace tandem::ir {

// A 64-bit hash of bytes fed in pieces: Digest() equals Hash64 of all the
// bytes added so far, however they were split. Allocates nothing. Not
// thread-safe; not copyable (the state is large and copying it is never
// what a caller means).
class ContentHasher {
 public:
  ContentHasher();
  ContentHasher(const ContentHasher&) = delete;
  ContentHasher& operator=(const ContentHasher&) = delete;

  void Add(absl::string_view bytes);
  // The 8 bytes of `value`, least significant first on every machine.
  void AddUint64(uint64_t value);
  uint64_t Digest() const;

 private:
  XXH3_state_t state_;
};

// The hash of `bytes` in one call. Each `seed` gives an unrelated hash
// function; seed 0 gives ContentHasher's.
uint64_t Hash64(absl::string_view bytes, uint64_t seed = 0);

}  // namespace tandem::ir

#endif  // TANDEM_IR_HASH_H_
