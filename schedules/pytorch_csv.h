// PyTorch's pipelining schedule CSV (torch.distributed.pipelining), read and
// written as a Tandem Schedule.
//
// One row per rank, one cell per action: `<stage><TYPE><microbatch>`, e.g.
// `2F0`; an empty cell is an idle slot; `(0F7;7B3)OVERLAP_F_B` is a forward
// and a backward run as one overlapped slot. Types read: F; I and W (the
// split backward); B (a full backward, or in PyTorch's older dialect the
// input-gradient half: a B followed later on its rank by a W of the same
// stage and microbatch, with no I of it anywhere, is read as I); BW (a full
// backward); SEND_F, RECV_F, SEND_B, RECV_B (explicit transfers, checked and
// then dropped: Tandem derives transfers from the dataflow). The placement
// is inferred from which rank runs each stage's tasks.
//
// Pure functions; thread-safe.
#ifndef TANDEM_SCHEDULES_PYTORCH_CSV_H_
#define TANDEM_SCHEDULES_PYTORCH_CSV_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "schedules/schedule.h"

namespace tandem::schedules {

// What an import found besides the schedule.
struct PytorchCsvStats {
  int64_t legacy_input_backwards = 0;  // B cells read as I (older dialect).
  int64_t transfers_checked = 0;       // SEND/RECV actions, all correctly paired.
};

// Parses the CSV. Errors are InvalidArgument "<filename>:<line>:<col>:
// error: rank R, cell C: ..." (cells 0-based, like PyTorch's action lists):
// a malformed or unsupported action, a stage run by two ranks, or - when
// the file has SEND/RECV actions - a transfer that does not match the
// dataflow: each cross-rank edge needs exactly one SEND on the producer's
// rank after the producing task and one RECV on the consumer's rank before
// the consuming task; a missing, extra, duplicate, misplaced or misordered
// one is an error naming it. The result is NOT validated (call Validate()).
absl::StatusOr<Schedule> ParsePytorchCsv(absl::string_view text,
                                         absl::string_view filename = "<input>",
                                         PytorchCsvStats* stats = nullptr);

// Writes `schedule` in PyTorch's current dialect: F, I, W, B for a full
// backward, `(a;b)OVERLAP_F_B` for a group; no idle cells and no transfers.
// One row per actor, each ending in a newline.
std::string PrintPytorchCsv(const Schedule& schedule);

}  // namespace tandem::schedules

#endif  // TANDEM_SCHEDULES_PYTORCH_CSV_H_
