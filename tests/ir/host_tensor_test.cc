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

TEST(StorageCache, AFreedTensorsStorageIsReusedZeroedAndBoundedByTheLimit) {
  const TensorType big{DType::kF32, {1 << 19}};  // 2 MiB
  SetStorageCacheBytes(0);
  { HostTensor dropped(big); }
  EXPECT_EQ(CachedStorageBytes(), 0);  // off: freed at once

  SetStorageCacheBytes(int64_t{5} << 20);
  const std::byte* first = nullptr;
  {
    HostTensor tensor(big);
    tensor.f32()[7] = 42.0f;
    first = tensor.data();
  }
  EXPECT_EQ(CachedStorageBytes(), int64_t{2} << 20);
  {
    HostTensor again(big);  // the same size: the same storage, zeroed again
    EXPECT_EQ(again.data(), first);
    EXPECT_EQ(again.f32()[7], 0.0f);
    EXPECT_EQ(CachedStorageBytes(), 0);
    HostTensor other(TensorType{DType::kF32, {(1 << 19) + 16}});  // another size: fresh storage
    EXPECT_NE(other.data(), first);
  }
  EXPECT_EQ(CachedStorageBytes(), (int64_t{4} << 20) + 64);
  { HostTensor third(TensorType{DType::kF32, {1 << 20}}); }  // 4 MiB more would pass the 5 MiB limit
  EXPECT_EQ(CachedStorageBytes(), (int64_t{4} << 20) + 64);
  { HostTensor small(TensorType{DType::kF32, {1024}}); }  // under kMinCachedStorageBytes: never kept
  EXPECT_EQ(CachedStorageBytes(), (int64_t{4} << 20) + 64);
  SetStorageCacheBytes(int64_t{3} << 20);  // lowering the limit frees the largest first
  EXPECT_EQ(CachedStorageBytes(), int64_t{2} << 20);
  SetStorageCacheBytes(0);
  EXPECT_EQ(CachedStorageBytes(), 0);
}

}  // namespace
}  // namespace tandem::ir
