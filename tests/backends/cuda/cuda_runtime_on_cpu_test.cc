// The runtime's description of a device and the peak rates that follow
// from it (`tandem bench kernels --device cuda`'s share of peak): checked
// with an H100's published attributes, and on the CPU's runtime, which
// names itself and knows no peak.
#include "backends/cuda/cuda_runtime.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::cuda {
namespace {

using ::testing::HasSubstr;

// An H100 SXM as the runtime reports it: 132 SMs at 1980 MHz, HBM3 on a
// 5120-bit bus at 2619 MHz.
DeviceFacts H100() {
  return DeviceFacts{.name = "NVIDIA H100 80GB HBM3",
                     .major = 9,
                     .minor = 0,
                     .multiprocessors = 132,
                     .clock_hz = 1980e6,
                     .memory_clock_hz = 2619e6,
                     .memory_bus_bits = 5120};
}

TEST(PeakRates, AnH100sFollowFromItsAttributesInEachPrecision) {
  const backends::PeakRates f32 = PeakRatesOf(H100(), ir::DeviceSpec::Precision::kF32);
  EXPECT_DOUBLE_EQ(f32.memory_bytes_per_second, 2 * 2619e6 * 640);  // 3.35 TB/s
  EXPECT_DOUBLE_EQ(f32.matmul_flops_per_second, 256.0 * 132 * 1980e6);  // 66.9 TFLOP/s on the SIMT cores
  EXPECT_DOUBLE_EQ(PeakRatesOf(H100(), ir::DeviceSpec::Precision::kTf32).matmul_flops_per_second,
                   2048.0 * 132 * 1980e6);
  EXPECT_DOUBLE_EQ(PeakRatesOf(H100(), ir::DeviceSpec::Precision::kBf16).matmul_flops_per_second,
                   4096.0 * 132 * 1980e6);  // 1070 TFLOP/s: 989 at the data sheet's 1830 MHz
  EXPECT_THAT(f32.basis, HasSubstr("NVIDIA H100 80GB HBM3: 132 SMs of sm_90 at 1980 MHz"));
}

TEST(PeakRates, AComputeCapabilityNotKnownHereHasNoMatmulPeakButItsBandwidth) {
  DeviceFacts facts = H100();
  facts.major = 8;
  facts.minor = 9;
  const backends::PeakRates peak = PeakRatesOf(facts, ir::DeviceSpec::Precision::kBf16);
  EXPECT_EQ(peak.matmul_flops_per_second, 0.0);
  EXPECT_GT(peak.memory_bytes_per_second, 0.0);
  EXPECT_THAT(peak.basis, HasSubstr("matmul rate per SM not known here"));
}

TEST(PeakRates, TheCpusRuntimeNamesItselfAndReportsNoAttributes) {
  absl::StatusOr<DeviceFacts> facts = DescribeDevice(0);
  ASSERT_TRUE(facts.ok()) << facts.status();
  EXPECT_EQ(facts->name, "CUDA on the CPU");
  EXPECT_EQ(facts->multiprocessors, 0);
  EXPECT_EQ(PeakRatesOf(*facts, ir::DeviceSpec::Precision::kF32).memory_bytes_per_second, 0.0);
  EXPECT_FALSE(DescribeDevice(1).ok());
}

}  // namespace
}  // namespace tandem::cuda
