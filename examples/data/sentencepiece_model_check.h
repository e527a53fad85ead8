// Checks a SentencePiece model file's bytes before the library sees them. A
// tokenizer model is a file people download and share, and the library
// trusts the tables inside it: its normalizer follows the double-array trie
// of `precompiled_charsmap` wherever the units point and reads replacement
// strings at whatever offsets they hold, so a random or forged table reads
// far outside the file (a crash, or worse). This check walks every path the
// library's search can take and refuses the model unless each one stays
// inside the table; only then is the model handed to the library.
//
// The model is a serialized ModelProto (protobuf). Only the wire format is
// read here, not the schema: every precompiled_charsmap (field 2) of every
// normalizer_spec (field 3) and denormalizer_spec (field 5) is checked, so
// whichever copy protobuf's merge rules pick is a checked one. A
// charsmap is
//
//   uint32 (little-endian) T: the trie's size in bytes, a multiple of 4
//   T bytes: the trie, units of 4 bytes (darts-clone's double array)
//   the rest: replacement strings, each ended by a NUL
//
// and a unit u says: has_leaf = bit 8; label = u & 0x800000FF (a leaf's
// value unit has bit 31 set, so it never matches a byte); value = u &
// 0x7FFFFFFF; offset = (u >> 10) << ((u & 0x200) >> 6). A search starts at
// base = offset(unit 0); for each input byte c it reads unit base ^ c,
// stops unless its label is c, moves base to (base ^ c) ^ offset, and if
// the unit has a leaf reads the value at the new base: an offset into the
// replacement strings.
//
// Pure function of its input; thread-safe.
#ifndef TANDEM_EXAMPLES_DATA_SENTENCEPIECE_MODEL_CHECK_H_
#define TANDEM_EXAMPLES_DATA_SENTENCEPIECE_MODEL_CHECK_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace tandem::examples {

// The most a model file may have: real ones are 0.2 to 20 MB.
inline constexpr int64_t kMaxTokenizerModelBytes = int64_t{64} << 20;
// The most a charsmap's trie may have (nmt_nfkc's is about 200 KB): the
// check reads 256 units per node, so this bounds its time.
inline constexpr int64_t kMaxCharsmapTrieBytes = int64_t{8} << 20;

// OK if `model` (the file's bytes) is well-formed protobuf at the top level
// and in its normalizer specs, and each precompiled_charsmap keeps every
// search inside itself; InvalidArgument naming `what` and the fault
// otherwise ("... the normaliser's trie points outside itself at unit 12").
absl::Status CheckSentencePieceModel(absl::string_view model, absl::string_view what);

// The same for one precompiled_charsmap alone (for tests and the fuzzer).
absl::Status CheckPrecompiledCharsmap(absl::string_view charsmap);

}  // namespace tandem::examples

#endif  // TANDEM_EXAMPLES_DATA_SENTENCEPIECE_MODEL_CHECK_H_
