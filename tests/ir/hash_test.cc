#include "ir/hash.h"

#include <string>

#include "gtest/gtest.h"

namespace tandem::ir {
namespace {

// Expected values from Debian's `xxhsum -H3` (XXH3 64-bit) on files holding
// exactly these bytes, a computation independent of this code.
TEST(Hash64, MatchesTheReferenceXxh3) {
  EXPECT_EQ(Hash64(""), 0x2d06800538d394c2ull);
  EXPECT_EQ(Hash64("tandem"), 0x9d9902d652a891e0ull);
}

TEST(Hash64, EachSeedIsADifferentFunctionAndZeroIsTheDefault) {
  EXPECT_EQ(Hash64("w1", /*seed=*/0), Hash64("w1"));
  EXPECT_NE(Hash64("w1", /*seed=*/1), Hash64("w1"));
  EXPECT_NE(Hash64("w1", /*seed=*/1), Hash64("w1", /*seed=*/2));
}

TEST(ContentHasher, PiecesHashLikeTheWholeWhateverTheSplit) {
  // Longer than XXH3's internal buffer, so updates cross it.
  std::string text;
  for (int i = 0; i < 200; ++i) text += "instruction " + std::to_string(i) + ";";
  for (size_t piece : {size_t{1}, size_t{7}, size_t{256}, text.size()}) {
    ContentHasher hasher;
    for (size_t at = 0; at < text.size(); at += piece) hasher.Add(absl::string_view(text).substr(at, piece));
    EXPECT_EQ(hasher.Digest(), Hash64(text)) << "pieces of " << piece;
  }
  EXPECT_EQ(ContentHasher().Digest(), Hash64(""));
}

TEST(ContentHasher, AddsIntegersLeastSignificantByteFirst) {
  ContentHasher hasher;
  hasher.AddUint64(0x0807060504030201ull);
  EXPECT_EQ(hasher.Digest(), Hash64(std::string("\x01\x02\x03\x04\x05\x06\x07\x08", 8)));
}

}  // namespace
}  // namespace tandem::ir
