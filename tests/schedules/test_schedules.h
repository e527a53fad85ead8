// Helpers shared by the schedules/ tests: build schedules from text.
#ifndef TANDEM_TESTS_SCHEDULES_TEST_SCHEDULES_H_
#define TANDEM_TESTS_SCHEDULES_TEST_SCHEDULES_H_

#include <string>

#include "gtest/gtest.h"
#include "schedules/schedule.h"
#include "schedules/text_format.h"

namespace tandem::schedules::testing {

// Parses `text` (Tandem's format) and fails the test on a parse error.
inline Schedule FromText(const std::string& text) {
  absl::StatusOr<Schedule> schedule = ParseScheduleText(text, "test.sched");
  EXPECT_TRUE(schedule.ok()) << schedule.status();
  return schedule.ok() ? *schedule : Schedule{};
}

}  // namespace tandem::schedules::testing

#endif  // TANDEM_TESTS_SCHEDULES_TEST_SCHEDULES_H_
