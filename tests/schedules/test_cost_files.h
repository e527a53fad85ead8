// Synthetic cost files for the partitioner's and the planner's tests.
#ifndef TANDEM_TESTS_SCHEDULES_TEST_COST_FILES_H_
#define TANDEM_TESTS_SCHEDULES_TEST_COST_FILES_H_

#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "schedules/cost_file.h"

namespace tandem::schedules::testing {

// Segments "s0", "s1", ... taking `seconds` each per microbatch of
// `microbatch_size` (F a third, B two thirds: I and W a third each), each
// stashing `stash` bytes (8 when its stage rematerialises), handing on 8,
// holding `state` bytes of parameters and as many of optimizer state, and
// a working set of 5.
inline CostFile Segments(const std::vector<double>& seconds, int64_t stash = 100, int64_t state = 10,
                         int64_t microbatch_size = 1) {
  CostFile costs{.model = "test", .device = "cpu", .microbatch_size = microbatch_size};
  for (size_t i = 0; i < seconds.size(); ++i) {
    costs.segments.push_back({.name = absl::StrCat("s", i),
                              .forward_s = seconds[i] / 3,
                              .backward_s = 2 * seconds[i] / 3,
                              .backward_input_s = seconds[i] / 3,
                              .backward_weight_s = seconds[i] / 3,
                              .recompute_s = seconds[i] / 3,
                              .activation_bytes = 8,
                              .stash_bytes = stash,
                              .remat_stash_bytes = 8,
                              .parameter_bytes = state,
                              .optimizer_bytes = state,
                              .working_bytes = 5});
  }
  return costs;
}

}  // namespace tandem::schedules::testing

#endif  // TANDEM_TESTS_SCHEDULES_TEST_COST_FILES_H_
