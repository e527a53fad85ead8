// Helpers shared by the CUDA graph runner's tests on the CPU.
#ifndef TANDEM_TESTS_BACKENDS_CUDA_GRAPH_RUNNER_TEST_UTIL_H_
#define TANDEM_TESTS_BACKENDS_CUDA_GRAPH_RUNNER_TEST_UTIL_H_

#include <cmath>
#include <cstdint>

#include "ir/host_tensor.h"

namespace tandem::cuda::testing {

// ||actual - expected|| / ||expected|| over the tensor's elements (f32);
// the elementwise quotient is meaningless where a gradient cancels to
// nearly 0, the norm's is not.
inline double RelativeError(const ir::HostTensor& actual, const ir::HostTensor& expected) {
  double difference = 0, magnitude = 0;
  for (int64_t i = 0; i < expected.num_elements(); ++i) {
    const double e = expected.f32()[i], a = actual.f32()[i];
    difference += (a - e) * (a - e);
    magnitude += e * e;
  }
  return magnitude == 0 ? std::sqrt(difference) : std::sqrt(difference / magnitude);
}

}  // namespace tandem::cuda::testing

#endif  // TANDEM_TESTS_BACKENDS_CUDA_GRAPH_RUNNER_TEST_UTIL_H_
