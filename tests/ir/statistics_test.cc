// One median for every measurement (ir/statistics.h): the fill planner's
// piece times, the benchmarks' steps, the profile's segments and the soak
// tool's detection times agree on it, an even count included.
#include "ir/statistics.h"

#include "gtest/gtest.h"

namespace tandem::ir {
namespace {

TEST(Median, IsTheMiddleOrTheMeanOfTheTwoMiddleValuesInAnyOrder) {
  EXPECT_EQ(Median({}), 0.0);
  EXPECT_EQ(Median({4.0}), 4.0);
  EXPECT_EQ(Median({3.0, 1.0, 2.0}), 2.0);
  // An even count: the mean of the two middle values, not the upper one.
  EXPECT_EQ(Median({4.0, 1.0, 3.0, 2.0}), 2.5);
  EXPECT_EQ(Median({10.0, 20.0}), 15.0);
}

}  // namespace
}  // namespace tandem::ir
