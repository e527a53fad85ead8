// What a debugger prints about a tensor (the REPL's inspect).
#include "ir/host_tensor.h"

#include <cmath>
#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::ir {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(SummarizeTensor, StatisticsCoverTheFiniteElementsAndCountTheRest) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::string summary = SummarizeTensor(HostTensor::FromFloats({2, 3}, {3, -4, nan, inf, 0, 1}));
  EXPECT_THAT(summary, AllOf(HasSubstr("f32[2,3] (24 B)\n"), HasSubstr("min -4  max 3  mean 0  norm 5.09902\n"),
                             HasSubstr("NaN: 1  Inf: 1 (of 6)"), HasSubstr("first values: 3, -4, nan, inf, 0, 1\n")));
}

TEST(SummarizeTensor, FiniteIntegersAndLongTensors) {
  std::vector<int32_t> values(10, 2);
  const std::string summary = SummarizeTensor(HostTensor::FromInts({10}, values));
  EXPECT_THAT(summary, AllOf(HasSubstr("i32[10] (40 B)"), HasSubstr("all finite"),
                             HasSubstr("first values: 2, 2, 2, 2, 2, 2, 2, 2, ...")));
}

TEST(FormatBytes, PicksTheUnit) {
  EXPECT_EQ(FormatBytes(512), "512 B");
  EXPECT_EQ(FormatBytes(64 * 1024), "64.0 KiB");
  EXPECT_EQ(FormatBytes(int64_t{5} << 20), "5.0 MiB");
}

}  // namespace
}  // namespace tandem::ir
