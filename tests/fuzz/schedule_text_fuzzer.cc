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
#include "tests/fuzz/schedule_fuzz_support.h"

namespace tandem::schedules {
namespace {

constexpr char kFile[] = "fuzz.sched";

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

  if (fuzz::SmallEnoughToValidate(*schedule)) Validate(*schedule).IgnoreError();
}

}  // namespace
}  // namespace tandem::schedules

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tandem::schedules::Run(tandem::fuzz::AsText(data, size));
  return 0;
}
