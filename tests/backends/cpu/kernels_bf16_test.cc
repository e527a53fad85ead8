// bf16 in the reference kernels: the rounding (ir/dtype.h), convert, and
// every computing op's rule "compute as f32 on the exact widened operands,
// round the result once".
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/backends/cpu/kernel_test_util.h"

namespace tandem::cpu {
namespace {

using namespace kernel_test;  // NOLINT: test helpers
using ::testing::ElementsAre;

ir::TensorType BF16(ir::Shape shape) { return {ir::DType::kBF16, std::move(shape)}; }

uint16_t Round(uint32_t f32_bits) { return ir::FloatToBf16(std::bit_cast<float>(f32_bits)); }

// bf16 tensors of random values (each exactly a bf16).
ir::HostTensor RandomBf16(ir::Shape shape, uint32_t seed, float low = -2.0f, float high = 2.0f) {
  std::vector<float> values = RandomFloats(ir::NumElements(shape), seed, low, high);
  ir::HostTensor out(BF16(std::move(shape)));
  for (size_t i = 0; i < values.size(); ++i) out.bf16()[i] = ir::FloatToBf16(values[i]);
  return out;
}

ir::HostTensor Widened(const ir::HostTensor& bf16) {
  ir::HostTensor out(F32(bf16.shape()));
  for (int64_t i = 0; i < bf16.num_elements(); ++i) out.f32()[i] = ir::Bf16ToFloat(bf16.bf16()[i]);
  return out;
}

std::vector<uint16_t> Bits(const ir::HostTensor& bf16) {
  return std::vector<uint16_t>(bf16.bf16(), bf16.bf16() + bf16.num_elements());
}

std::vector<uint16_t> RoundedBits(const ir::HostTensor& f32) {
  std::vector<uint16_t> bits;
  for (float v : f32.floats()) bits.push_back(ir::FloatToBf16(v));
  return bits;
}

TEST(Bf16Rounding, RoundsToNearestWithTiesToEven) {
  EXPECT_EQ(Round(0x3F800000), 0x3F80);  // 1
  EXPECT_EQ(Round(0x3F808000), 0x3F80);  // 1 + half an ulp: the tie goes to the even 1
  EXPECT_EQ(Round(0x3F818000), 0x3F82);  // 1 + 3 half ulps: the tie goes up, to even
  EXPECT_EQ(Round(0x3F808001), 0x3F81);  // just above the tie
  EXPECT_EQ(Round(0x3F807FFF), 0x3F80);  // just below it
  EXPECT_EQ(Round(0xBF808001), 0xBF81);  // the sign rides along
  EXPECT_EQ(Round(0x80000000), 0x8000);  // -0
  EXPECT_EQ(Round(0x00000001), 0x0000);  // the smallest subnormal rounds to 0
  EXPECT_EQ(Round(0x00008001), 0x0001);  // subnormals are kept, not flushed
}

TEST(Bf16Rounding, OverflowsToInfinityAndKeepsNanANan) {
  EXPECT_EQ(Round(0x7F7FFFFF), 0x7F80);  // the largest f32 is past bf16's largest
  EXPECT_EQ(Round(0x7F7F7FFF), 0x7F7F);  // below the halfway point it stays finite
  EXPECT_EQ(Round(0x7F800000), 0x7F80);
  EXPECT_EQ(Round(0xFF800000), 0xFF80);
  // A NaN whose payload sits in the dropped half would round to infinity;
  // it is made quiet instead, its sign kept.
  EXPECT_TRUE(std::isnan(ir::Bf16ToFloat(Round(0x7F800001))));
  EXPECT_TRUE(std::isnan(ir::Bf16ToFloat(Round(0xFFC00000))));
  EXPECT_TRUE(std::signbit(ir::Bf16ToFloat(Round(0xFF800001))));
}

TEST(Bf16Rounding, WideningIsExactForEveryPattern) {
  for (uint32_t bits = 0; bits <= 0xFFFF; ++bits) {
    const float wide = ir::Bf16ToFloat(static_cast<uint16_t>(bits));
    if (std::isnan(wide)) continue;
    ASSERT_EQ(ir::FloatToBf16(wide), bits) << std::hex << bits;
  }
}

TEST(ConvertKernel, RoundsF32ToBf16AndWidensItBackExactly) {
  ir::HostTensor x = ir::HostTensor::FromFloats(
      {4}, {1.0f, std::bit_cast<float>(0x3F818000u), -3.4e38f, 1e-3f});  // -3.4e38: past bf16's largest, 3.39e38
  ir::HostTensor narrow = Evaluate(ir::OpKind::kConvert, BF16({4}), {{"dtype", std::string("bf16")}}, {&x});
  ASSERT_EQ(narrow.dtype(), ir::DType::kBF16);
  EXPECT_EQ(narrow.num_bytes(), 8);
  EXPECT_EQ(Bits(narrow), RoundedBits(x));
  ir::HostTensor wide = Evaluate(ir::OpKind::kConvert, F32({4}), {{"dtype", std::string("f32")}}, {&narrow});
  EXPECT_THAT(Values(wide), ElementsAre(1.0f, std::bit_cast<float>(0x3F820000u), -kInf,
                                        ir::Bf16ToFloat(ir::FloatToBf16(1e-3f))));
}

TEST(ConvertKernel, GoesBetweenBf16AndI32ThroughF32) {
  ir::HostTensor ids = ir::HostTensor::FromInts({3}, {-7, 257, 1 << 20});
  ir::HostTensor b = Evaluate(ir::OpKind::kConvert, BF16({3}), {{"dtype", std::string("bf16")}}, {&ids});
  EXPECT_THAT(Bits(b), ElementsAre(ir::FloatToBf16(-7.0f), ir::FloatToBf16(257.0f), ir::FloatToBf16(1048576.0f)));
  ir::HostTensor back = Evaluate(ir::OpKind::kConvert, I32({3}), {{"dtype", std::string("i32")}}, {&b});
  EXPECT_THAT(back.ints(), ElementsAre(-7, 256, 1 << 20));  // 257 needs 9 bits: bf16 holds 8
}

TEST(ConstantKernel, FillsBf16WithTheRoundedValue) {
  ir::HostTensor c = Evaluate(ir::OpKind::kConstant, BF16({3}), {{"value", 0.1}}, {});
  EXPECT_THAT(Bits(c), ElementsAre(ir::FloatToBf16(0.1f), ir::FloatToBf16(0.1f), ir::FloatToBf16(0.1f)));
}

// Each op on bf16 operands gives exactly the f32 kernel's result on the
// widened operands, rounded to bf16.
struct Bf16Case {
  std::string name;
  ir::OpKind op;
  std::vector<ir::Shape> shapes;
  ir::Shape result;
  ir::Attributes attributes;
};

class Bf16Kernels : public ::testing::TestWithParam<Bf16Case> {};

TEST_P(Bf16Kernels, EqualTheF32KernelOnWidenedOperandsRoundedOnce) {
  const Bf16Case& c = GetParam();
  std::vector<ir::HostTensor> narrow, wide;
  for (size_t i = 0; i < c.shapes.size(); ++i) {
    narrow.push_back(RandomBf16(c.shapes[i], static_cast<uint32_t>(11 + i), 0.25f, 2.0f));
    wide.push_back(Widened(narrow.back()));
  }
  std::vector<const ir::HostTensor*> narrow_operands, wide_operands;
  for (size_t i = 0; i < narrow.size(); ++i) {
    narrow_operands.push_back(&narrow[i]);
    wide_operands.push_back(&wide[i]);
  }
  ir::HostTensor expected = Evaluate(c.op, F32(c.result), c.attributes, wide_operands);
  ir::HostTensor got = Evaluate(c.op, BF16(c.result), c.attributes, narrow_operands);
  ASSERT_EQ(got.dtype(), ir::DType::kBF16);
  EXPECT_EQ(Bits(got), RoundedBits(expected));
  // Rounding happened: the f32 result has bits below bf16's.
  bool any_rounded = false;
  for (float v : expected.floats()) any_rounded = any_rounded || (std::bit_cast<uint32_t>(v) & 0xFFFF) != 0;
  EXPECT_TRUE(any_rounded) << "a case whose f32 result is already bf16 cannot tell";
}

INSTANTIATE_TEST_SUITE_P(
    Ops, Bf16Kernels,
    ::testing::Values(
        Bf16Case{"Add", ir::OpKind::kAdd, {{4, 8}, {8}}, {4, 8}, {}},
        Bf16Case{"Div", ir::OpKind::kDiv, {{4, 8}, {4, 8}}, {4, 8}, {}},
        Bf16Case{"Exp", ir::OpKind::kExp, {{33}}, {33}, {}}, Bf16Case{"Silu", ir::OpKind::kSilu, {{33}}, {33}, {}},
        Bf16Case{"ReduceSum", ir::OpKind::kReduceSum, {{6, 40}}, {6}, {{"axes", std::vector<int64_t>{1}}}},
        Bf16Case{"MatMul", ir::OpKind::kMatMul, {{5, 48}, {48, 7}}, {5, 7}, {}},
        Bf16Case{"Softmax", ir::OpKind::kSoftmax, {{3, 16}}, {3, 16}, {}},
        Bf16Case{"Rotary", ir::OpKind::kRotary, {{4, 8}}, {4, 8}, {{"theta", 10000.0}, {"inverse", int64_t{0}}}}),
    [](const ::testing::TestParamInfo<Bf16Case>& info) { return info.param.name; });

TEST(Bf16Embedding, GathersBf16RowsBitForBit) {
  ir::HostTensor table = RandomBf16({5, 3}, 3);
  ir::HostTensor ids = ir::HostTensor::FromInts({2}, {4, 1});
  ir::HostTensor rows = Evaluate(ir::OpKind::kEmbedding, BF16({2, 3}), {}, {&table, &ids});
  std::vector<uint16_t> expected(table.bf16() + 12, table.bf16() + 15);
  expected.insert(expected.end(), table.bf16() + 3, table.bf16() + 6);
  EXPECT_EQ(Bits(rows), expected);
}

}  // namespace
}  // namespace tandem::cpu
