// Internal to the reference kernels: exp and tanh in plain f32 arithmetic;
// sin, cos and the rotary frequencies rounded from double precision.
//
// Written out here instead of calling libm because (1) glibc picks its expf
// and tanhf per CPU at load time, so libm's bits could differ between two
// hosts of one job, while these use only IEEE adds, multiplies and divides
// (the kernels are built with -ffp-contract=off) and give the same bits on
// every machine; (2) they inline into the kernel loops, which the compiler
// can then vectorize; libm's calls were 30-50 ns per element here.
// Accuracy: ExpF32 within 2 ulp over the normal range (subnormal results are
// computed by two exact power-of-two scalings); TanhF32 within 2 ulp (both checked against
// double-precision libm over their ranges).
#ifndef TANDEM_BACKENDS_CPU_KERNELS_FLOAT_MATH_H_
#define TANDEM_BACKENDS_CPU_KERNELS_FLOAT_MATH_H_

#include <bit>
#include <cmath>
#include <cstdint>

namespace tandem::cpu::internal {

// e^x. NaN stays NaN, +inf gives +inf, -inf gives 0.
inline float ExpF32(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2High = 0.693359375f;  // few mantissa bits: n * kLn2High is exact
  constexpr float kLn2Low = -2.12194440e-4f;
  constexpr float kRoundShift = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  // Beyond these bounds e^x is inf or 0 in f32; clamping keeps n small.
  float clamped = x > 89.0f ? 89.0f : x;
  clamped = clamped < -104.0f ? -104.0f : clamped;
  // x = n ln2 + r, |r| <= ln2 / 2.
  const float shifted = clamped * kLog2e + kRoundShift;
  const uint32_t n_bits = std::bit_cast<uint32_t>(shifted) - std::bit_cast<uint32_t>(kRoundShift);
  const float n = shifted - kRoundShift;
  float r = clamped - n * kLn2High;
  r = r - n * kLn2Low;
  // e^r by its Taylor series through r^7 (|r| <= 0.347: truncation < 1e-8).
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  // 2^n in two exact factors 2^n1 * 2^n2, each a normal float for n in
  // [-150, 129], so overflow gives inf and tiny results round to subnormals.
  const int32_t n_int = static_cast<int32_t>(n_bits);
  const int32_t n1 = n_int >> 1;
  const int32_t n2 = n_int - n1;
  const float scale1 = std::bit_cast<float>(static_cast<uint32_t>(n1 + 127) << 23);
  const float scale2 = std::bit_cast<float>(static_cast<uint32_t>(n2 + 127) << 23);
  const float result = (p * scale1) * scale2;
  return x != x ? x : result;
}

// tanh(x): its odd Taylor polynomial through x^17 for |x| <= 0.5 (where the exp form
// would cancel), else sign(x) (1 - 2 / (e^(2|x|) + 1)).
inline float TanhF32(float x) {
  const float magnitude = x < 0.0f ? -x : x;
  const float x2 = x * x;
  float series = 6404582.0f / 10854718875.0f;
  series = series * x2 - 929569.0f / 638512875.0f;
  series = series * x2 + 21844.0f / 6081075.0f;
  series = series * x2 - 1382.0f / 155925.0f;
  series = series * x2 + 62.0f / 2835.0f;
  series = series * x2 - 17.0f / 315.0f;
  series = series * x2 + 2.0f / 15.0f;
  series = series * x2 - 1.0f / 3.0f;
  series = (series * x2) * x + x;
  const float e = ExpF32(2.0f * magnitude);
  const float large = 1.0f - 2.0f / (e + 1.0f);
  const float signed_large = x < 0.0f ? -large : large;
  return magnitude <= 0.5f ? series : (x != x ? x : signed_large);
}

// sin(x) and cos(x) of an f32 x, each rounded to f32 from libm's double
// precision. Unlike exp and tanh above these call libm, but its double
// result lies within an ulp of the exact value, so a host whose libm
// differs in the last double bit could round to another f32 only when the
// exact value lies within 2^-53 relative of the midpoint between two f32s:
// the bits are the same on every host unless so rare a tie occurs.
inline void SinCosF32(float x, float* sine, float* cosine) {
  *sine = static_cast<float>(std::sin(static_cast<double>(x)));
  *cosine = static_cast<float>(std::cos(static_cast<double>(x)));
}

// The rotary inverse frequency of pair i of a width-D row (ir/op.h
// kRotary): theta^(-2i/D), computed in double and rounded to f32, as
// SinCosF32 is.
inline float RotaryFrequency(double theta, int64_t i, int64_t width) {
  return static_cast<float>(std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(width)));
}

}  // namespace tandem::cpu::internal

#endif  // TANDEM_BACKENDS_CPU_KERNELS_FLOAT_MATH_H_
