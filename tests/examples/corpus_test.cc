// Corpus::Windows: the consecutive windows `tandem eval` reads, in order,
// each followed by its label, and a clear refusal past the corpus's end.
#include "examples/data/corpus.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "examples/data/char_corpus.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::examples {
namespace {

using ::testing::HasSubstr;

// 2,080 pseudo-random letters (a corpus needs 1,024 bytes at least), so
// that a window read from the wrong place shows.
absl::StatusOr<CharCorpus> Letters() {
  std::string text;
  uint32_t state = 12345;
  for (int i = 0; i < 2080; ++i) {
    state = state * 1664525u + 1013904223u;
    text.push_back(static_cast<char>('a' + (state >> 24) % 26));
  }
  return CharCorpus::FromText(text, "letters");
}

TEST(CorpusWindows, WindowIIsTokensINToINPlusNEachFollowedByItsLabel) {
  absl::StatusOr<CharCorpus> corpus = Letters();
  ASSERT_TRUE(corpus.ok()) << corpus.status();
  std::vector<int32_t> all(corpus->size());
  ASSERT_TRUE(corpus->Read(0, corpus->size(), all.data()).ok());
  // Windows 2 and 3 of 300 tokens: tokens 600..1199, labels 601..1200.
  absl::StatusOr<ir::TensorMap> windows = corpus->Windows(2, 2, 300);
  ASSERT_TRUE(windows.ok()) << windows.status();
  const ir::HostTensor& tokens = windows->at("tokens");
  const ir::HostTensor& labels = windows->at("labels");
  ASSERT_EQ(tokens.shape(), (ir::Shape{2, 300}));
  ASSERT_EQ(labels.shape(), (ir::Shape{2, 300}));
  for (int64_t i = 0; i < 600; ++i) {
    ASSERT_EQ(tokens.i32()[i], all[600 + i]) << i;
    ASSERT_EQ(labels.i32()[i], all[601 + i]) << i;
  }
}

TEST(CorpusWindows, AWindowWhoseLastLabelIsPastTheEndIsRefusedSayingHowManyThereAre) {
  absl::StatusOr<CharCorpus> corpus = Letters();
  ASSERT_TRUE(corpus.ok()) << corpus.status();
  // 2,080 tokens hold 4 windows of 500 (token 2,000 is window 3's last
  // label).
  EXPECT_TRUE(corpus->Windows(0, 4, 500).ok());
  const absl::Status past = corpus->Windows(3, 2, 500).status();
  EXPECT_EQ(past.code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(past.message(), HasSubstr("holds 4 windows of 500 tokens (each followed by its label), not 5"));
}

}  // namespace
}  // namespace tandem::examples
