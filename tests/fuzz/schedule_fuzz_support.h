// What the two schedule fuzz targets (.sched text, PyTorch CSV) share: the
// size past which a parsed schedule is not validated. Validate() is linear
// in the tasks, but its tables are sized by the header's counts; the
// parsers bound those, this keeps one fuzz run fast.
#ifndef TANDEM_TESTS_FUZZ_SCHEDULE_FUZZ_SUPPORT_H_
#define TANDEM_TESTS_FUZZ_SCHEDULE_FUZZ_SUPPORT_H_

#include <cstdint>

#include "schedules/schedule.h"

namespace tandem::fuzz {

inline constexpr int64_t kMaxValidatedSlots = int64_t{1} << 20;

// Whether `schedule`'s actors, stages and (stage, microbatch) pairs are few
// enough for a fuzz run to validate it.
inline bool SmallEnoughToValidate(const schedules::Schedule& schedule) {
  const int64_t slots = int64_t{schedule.num_actors} + schedule.num_stages +
                        int64_t{schedule.num_stages} * schedule.num_microbatches;
  return slots <= kMaxValidatedSlots;
}

}  // namespace tandem::fuzz

#endif  // TANDEM_TESTS_FUZZ_SCHEDULE_FUZZ_SUPPORT_H_
