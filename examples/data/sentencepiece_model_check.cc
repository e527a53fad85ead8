#include "examples/data/sentencepiece_model_check.h"

#include <cstring>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace tandem::examples {
namespace {

// One field of a protobuf message: its number and, for length-delimited
// ones, its bytes.
struct WireField {
  uint64_t number = 0;
  int wire_type = 0;
  absl::string_view bytes;  // wire type 2 only
};

// Reads protobuf's wire format field by field; nullopt at the end, an error
// for bytes that are not well-formed.
class WireReader {
 public:
  explicit WireReader(absl::string_view message) : rest_(message) {}

  absl::StatusOr<std::optional<WireField>> Next() {
    if (rest_.empty()) return std::optional<WireField>();
    std::optional<uint64_t> key = Varint();
    if (!key.has_value()) return Malformed("a field key");
    WireField field;
    field.number = *key >> 3;
    field.wire_type = static_cast<int>(*key & 7);
    if (field.number == 0) return Malformed("field number 0");
    switch (field.wire_type) {
      case 0:
        if (!Varint().has_value()) return Malformed("a varint");
        break;
      case 1:
        if (!Skip(8)) return Malformed("a 64-bit field");
        break;
      case 2: {
        std::optional<uint64_t> length = Varint();
        if (!length.has_value() || *length > rest_.size()) return Malformed("a length past the end");
        field.bytes = rest_.substr(0, *length);
        rest_.remove_prefix(*length);
        break;
      }
      case 5:
        if (!Skip(4)) return Malformed("a 32-bit field");
        break;
      default:  // groups (3, 4) are not in SentencePiece's schema
        return Malformed(absl::StrCat("wire type ", field.wire_type));
    }
    return std::optional<WireField>(field);
  }

 private:
  std::optional<uint64_t> Varint() {
    uint64_t value = 0;
    for (int shift = 0; shift < 64 && !rest_.empty(); shift += 7) {
      const auto byte = static_cast<uint8_t>(rest_.front());
      rest_.remove_prefix(1);
      value |= static_cast<uint64_t>(byte & 0x7F) << shift;
      if ((byte & 0x80) == 0) return value;
    }
    return std::nullopt;
  }
  bool Skip(size_t bytes) {
    if (rest_.size() < bytes) return false;
    rest_.remove_prefix(bytes);
    return true;
  }
  static absl::Status Malformed(absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("not well-formed protobuf (", what, ")"));
  }

  absl::string_view rest_;
};

// darts-clone's unit fields (the header's comment).
bool HasLeaf(uint32_t unit) { return ((unit >> 8) & 1) != 0; }
uint32_t Value(uint32_t unit) { return unit & 0x7FFFFFFFu; }
uint32_t Label(uint32_t unit) { return unit & (0x80000000u | 0xFFu); }
uint32_t Offset(uint32_t unit) { return (unit >> 10) << ((unit & (1u << 9)) >> 6); }

}  // namespace

absl::Status CheckPrecompiledCharsmap(absl::string_view charsmap) {
  auto bad = [](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("its normaliser table (precompiled_charsmap) ", why));
  };
  if (charsmap.size() < 4) return bad(absl::StrCat("has ", charsmap.size(), " bytes, too few for a trie's size"));
  uint32_t trie_bytes = 0;
  for (int b = 3; b >= 0; --b) trie_bytes = (trie_bytes << 8) | static_cast<uint8_t>(charsmap[static_cast<size_t>(b)]);
  if (trie_bytes % 4 != 0 || trie_bytes < 4 || trie_bytes > charsmap.size() - 4) {
    return bad(absl::StrCat("says its trie has ", trie_bytes, " bytes, which is not a whole number of units within its ",
                            charsmap.size() - 4));
  }
  if (trie_bytes > kMaxCharsmapTrieBytes) {
    return bad(absl::StrCat("has a trie of ", trie_bytes, " bytes, more than the ", kMaxCharsmapTrieBytes, " it may have"));
  }
  const size_t units = trie_bytes / 4;
  std::vector<uint32_t> unit(units);
  for (size_t i = 0; i < units; ++i) {
    const char* at = charsmap.data() + 4 + 4 * i;
    unit[i] = static_cast<uint32_t>(static_cast<uint8_t>(at[0])) | static_cast<uint32_t>(static_cast<uint8_t>(at[1])) << 8 |
              static_cast<uint32_t>(static_cast<uint8_t>(at[2])) << 16 |
              static_cast<uint32_t>(static_cast<uint8_t>(at[3])) << 24;
  }
  const size_t replacements = charsmap.size() - 4 - trie_bytes;
  // Every base a search can reach, each looked at once: all 256 units it
  // may read must exist, each child's leaf value must, and each value must
  // name a replacement string.
  std::vector<bool> seen(units, false);
  std::vector<uint32_t> bases = {Offset(unit[0])};
  while (!bases.empty()) {
    const uint32_t base = bases.back();
    bases.pop_back();
    if ((static_cast<uint64_t>(base) | 0xFF) >= units) {
      return bad(absl::StrCat("points outside its trie of ", units, " units (to ", base, ")"));
    }
    if (seen[base]) continue;
    seen[base] = true;
    for (uint32_t c = 0; c < 256; ++c) {
      const uint32_t child = base ^ c;
      if (Label(unit[child]) != c) continue;
      const uint32_t next = child ^ Offset(unit[child]);
      if (next >= units) return bad(absl::StrCat("points outside its trie of ", units, " units (unit ", child, ")"));
      if (HasLeaf(unit[child])) {
        const uint32_t value = Value(unit[next]);
        if (value >= replacements || std::memchr(charsmap.data() + 4 + trie_bytes + value, '\0', replacements - value) == nullptr) {
          return bad(absl::StrCat("names replacement ", value, ", not a string within its ", replacements,
                                  " bytes of them (unit ", child, ")"));
        }
      }
      bases.push_back(next);
    }
  }
  return absl::OkStatus();
}

absl::Status CheckSentencePieceModel(absl::string_view model, absl::string_view what) {
  auto refuse = [&](const absl::Status& status) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " is not a SentencePiece model Tandem can load safely: ", status.message()));
  };
  WireReader top(model);
  while (true) {
    absl::StatusOr<std::optional<WireField>> field = top.Next();
    if (!field.ok()) return refuse(field.status());
    if (!field->has_value()) return absl::OkStatus();
    // normalizer_spec = 3, denormalizer_spec = 5 (NormalizerSpec messages).
    if ((**field).number != 3 && (**field).number != 5) continue;
    if ((**field).wire_type != 2) return refuse(absl::InvalidArgumentError("a normaliser spec that is not a message"));
    WireReader spec((**field).bytes);
    while (true) {
      absl::StatusOr<std::optional<WireField>> inner = spec.Next();
      if (!inner.ok()) return refuse(inner.status());
      if (!inner->has_value()) break;
      if ((**inner).number != 2) continue;  // precompiled_charsmap
      if ((**inner).wire_type != 2) return refuse(absl::InvalidArgumentError("a charsmap that is not bytes"));
      if ((**inner).bytes.empty()) continue;  // none: the library uses no trie
      if (absl::Status status = CheckPrecompiledCharsmap((**inner).bytes); !status.ok()) return refuse(status);
    }
  }
}

}  // namespace tandem::examples
