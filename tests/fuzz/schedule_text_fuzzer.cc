// Fuzz target: the `.sched` text format (schedules::ParseScheduleText), what
// `tandem sched check` and `tandem train --schedule FILE` read from a user.
// Beyond not crashing: errors name the file; a parsed schedule prints and
// parses back to itself; the validator copes with whatever parses.
#include <cstddef>
#include <cstdint>
#include <string>

#include "schedules/text_format.h"
#include "schedules/validator.h"
#include "tests/fuzz/fuzz_support.h"

namespace tandem::schedules {
namespace {

constexpr char kFile[] = "fuzz.sched";
// Validate() is linear in the tasks, but its tables are sized by the
// header's counts; the parser bounds those, this keeps one run fast.
constexpr int64_t kMaxValidatedSlots = int64_t{1} << 20;

void Run(absl::string_view text) {
  absl::StatusOr<Schedule> schedule = ParseScheduleText(text, kFile);
  if (!schedule.ok()) {
    fuzz::CheckNamesFile(schedule.status(), kFile);
    return;
  }
  const std::string printed = PrintScheduleText(*schedule);
  absl::StatusOr<Schedule> reparsed = ParseScheduleText(printed, kFile);
  fuzz::FuzzCheck(reparsed.ok(), "the printed schedule does not parse: " + reparsed.status().ToString() +
                                     "\n" + printed);
  fuzz::FuzzCheck(*reparsed == *schedule, "print then parse changed the schedule:\n" + printed);
  fuzz::FuzzCheck(PrintScheduleText(*reparsed) == printed, "printing is not stable:\n" + printed);

  const int64_t slots = int64_t{schedule->num_actors} + schedule->num_stages +
                        int64_t{schedule->num_stages} * schedule->num_microbatches;
  if (slots <= kMaxValidatedSlots) Validate(*schedule).IgnoreError();
}

}  // namespace
}  // namespace tandem::schedules

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tandem::schedules::Run(tandem::fuzz::AsText(data, size));
  return 0;
}
