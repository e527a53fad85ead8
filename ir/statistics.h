// Statistics of measurements that the controller, the benchmarks and the
// soak tool share, so that they agree: one median. Pure; thread-safe.
#ifndef TANDEM_IR_STATISTICS_H_
#define TANDEM_IR_STATISTICS_H_

#include <algorithm>
#include <vector>

namespace tandem::ir {

// The middle value; for an even count, the mean of the two middle ones;
// 0 for none.
inline double Median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const size_t middle = values.size() / 2;
  return values.size() % 2 == 1 ? values[middle] : 0.5 * (values[middle - 1] + values[middle]);
}

}  // namespace tandem::ir

#endif  // TANDEM_IR_STATISTICS_H_
