// Bit-for-bit comparison of floats: how a run's losses are checked against
// another run's (a redone step's, the reference's, a run without fill).
// Header-only, for every folder.
#ifndef TANDEM_IR_BITWISE_H_
#define TANDEM_IR_BITWISE_H_

#include <cstring>
#include <vector>

namespace tandem::ir {

// Whether `a` and `b` hold the same bits (a NaN equals itself, -0 is not +0).
inline bool BitwiseEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

}  // namespace tandem::ir

#endif  // TANDEM_IR_BITWISE_H_
