// The controller's half of the NCCL bootstrap works without a GPU: fresh,
// distinct 128-byte unique ids.
#include "controller/nccl_unique_id.h"

#include <string>

#include "gtest/gtest.h"

namespace tandem::controller {
namespace {

TEST(NcclUniqueId, EachIdIsFresh128Bytes) {
  absl::StatusOr<std::string> first = NewNcclUniqueId();
  if (!first.ok() && first.status().code() == absl::StatusCode::kFailedPrecondition) {
    GTEST_SKIP() << "no NCCL on this machine: " << first.status();
  }
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<std::string> second = NewNcclUniqueId();
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(first->size(), 128u);
  EXPECT_EQ(second->size(), 128u);
  EXPECT_NE(*first, *second);
  EXPECT_NE(*first, std::string(128, '\0'));
}

}  // namespace
}  // namespace tandem::controller
