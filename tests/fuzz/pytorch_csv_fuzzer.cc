// Fuzz target: the PyTorch pipelining CSV importer (schedules::ParsePytorchCsv),
// which reads schedules exported by torch.distributed.pipelining. Beyond not
// crashing: errors name the file; the validator copes with whatever
// imports; a valid imported schedule exports and imports back to itself.
// (An invalid one need not: a full backward B followed by a W of the same
// task exports as "B ... W", which the older dialect reads as I then W.)
#include <cstddef>
#include <cstdint>
#include <string>

#include "schedules/pytorch_csv.h"
#include "schedules/validator.h"
#include "tests/fuzz/fuzz_support.h"
#include "tests/fuzz/schedule_fuzz_support.h"

namespace tandem::schedules {
namespace {

constexpr char kFile[] = "fuzz.csv";

void Run(absl::string_view text) {
  absl::StatusOr<Schedule> schedule = ParsePytorchCsv(text, kFile);
  if (!schedule.ok()) {
    fuzz::CheckNamesFile(schedule.status(), kFile);
    return;
  }
  if (!fuzz::SmallEnoughToValidate(*schedule) || !Validate(*schedule).ok()) return;
  const std::string printed = PrintPytorchCsv(*schedule);
  absl::StatusOr<Schedule> reparsed = ParsePytorchCsv(printed, kFile);
  fuzz::FuzzCheck(reparsed.ok(), "the exported CSV does not import: " + reparsed.status().ToString() + "\n" +
                                     printed);
  fuzz::FuzzCheck(*reparsed == *schedule, "export then import changed the schedule:\n" + printed);
}

}  // namespace
}  // namespace tandem::schedules

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tandem::schedules::Run(tandem::fuzz::AsText(data, size));
  return 0;
}
