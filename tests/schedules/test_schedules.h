// Helpers shared by the schedules/ tests: build schedules from text.
#ifndef TANDEM_TESTS_SCHEDULES_TEST_SCHEDULES_H_
#define TANDEM_TESTS_SCHEDULES_TEST_SCHEDULES_H_

#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "schedules/schedule.h"
#include "schedules/text_format.h"

namespace tandem::schedules::testing {

// Parses `text` (Tandem's format) and fails the test on a parse error.
inline Task F(int stage, int microbatch) { return {TaskKind::kForward, StageId(stage), Microbatch(microbatch)}; }
inline Task B(int stage, int microbatch) { return {TaskKind::kBackward, StageId(stage), Microbatch(microbatch)}; }
inline Task I(int stage, int microbatch) {
  return {TaskKind::kBackwardInput, StageId(stage), Microbatch(microbatch)};
}
inline Task W(int stage, int microbatch) {
  return {TaskKind::kBackwardWeight, StageId(stage), Microbatch(microbatch)};
}

// One stage per actor; programs[a] lists actor a's slots. Not validated.
inline Schedule MakeSchedule(int microbatches, std::vector<std::vector<Slot>> programs,
                             std::string name = "1f1b") {
  Schedule schedule;
  schedule.name = std::move(name);
  schedule.num_actors = static_cast<int32_t>(programs.size());
  schedule.num_stages = schedule.num_actors;
  schedule.num_microbatches = microbatches;
  for (int32_t a = 0; a < schedule.num_actors; ++a) schedule.stage_to_actor.push_back(ActorId(a));
  schedule.programs = std::move(programs);
  return schedule;
}

// 1F1B for p=2, m=2: actor 0 runs F0 F1 B0 B1, actor 1 runs F0 B0 F1 B1.
inline Schedule TinyOneFOneB() {
  return MakeSchedule(2, {{{{F(0, 0)}}, {{F(0, 1)}}, {{B(0, 0)}}, {{B(0, 1)}}},
                          {{{F(1, 0)}}, {{B(1, 0)}}, {{F(1, 1)}}, {{B(1, 1)}}}});
}

inline Schedule FromText(const std::string& text) {
  absl::StatusOr<Schedule> schedule = ParseScheduleText(text, "test.sched");
  EXPECT_TRUE(schedule.ok()) << schedule.status();
  return schedule.ok() ? *schedule : Schedule{};
}

}  // namespace tandem::schedules::testing

#endif  // TANDEM_TESTS_SCHEDULES_TEST_SCHEDULES_H_
